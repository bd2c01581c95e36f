"""Processor regression snapshots: record what matters downstream, compare with tolerances.

A transformers upgrade or a changed setting can silently change image-token counts, resizing or
pixel values. A snapshot records, per data item and image, exactly the things training depends
on, so a check fails loudly and names the item, the image and the field:

- ``prompt_len``, ``image_token_count`` and the ``input_ids`` around each image;
- ``image_grid_thw`` (when the family has it), ``pixel_values`` shape and dtype;
- fingerprints of ``pixel_values``: per-channel mean/std (tolerance-compared) and a hash of the
  values quantised to ``1/64`` (exact-compared, catches any visible pixel change);
- the geometry (original w×h → model w×h);
- the library versions that produced it (reported in the diff, not compared).

Regenerate golden files only with ``vlrollout snapshot`` and review the diff.

>>> # In a user's test suite:
>>> # from vlrollout.snapshots import assert_matches_snapshot
>>> # assert_matches_snapshot(my_preprocessor, items, "tests/snapshots/mine.json")
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from vlrollout.processors.base import PreparedPrompt, Preprocessor

CONTEXT_TOKENS = 3
QUANTUM = 64  # pixel_values are hashed after rounding to 1/64


def library_versions() -> dict[str, str]:
    out = {}
    for name in (
        "transformers",
        "torch",
        "torchvision",
        "pillow",
        "tokenizers",
        "areal",
        "vlrollout",
    ):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _channel_stats(
    pixel_values: torch.Tensor, channels: int = 3
) -> tuple[list[float], list[float]]:
    """Mean and std per colour channel, for any layout whose channel axis can be found.

    Qwen-VL flattens patches to ``[patches, C * T * P * P]`` (channel-major), other families use
    ``[..., C, H, W]``.
    """
    pv = pixel_values.detach().float()
    if pv.ndim == 2 and pv.shape[1] % channels == 0:
        per_channel = pv.reshape(pv.shape[0], channels, -1).transpose(0, 1).reshape(channels, -1)
    elif pv.ndim >= 3 and pv.shape[-3] == channels:
        per_channel = pv.movedim(-3, 0).reshape(channels, -1)
    else:
        per_channel = pv.reshape(1, -1)
    return per_channel.mean(1).tolist(), per_channel.std(1).tolist()


def _quantised_hash(t: torch.Tensor) -> str:
    q = torch.round(t.detach().float() * QUANTUM).to(torch.int32).contiguous()
    return hashlib.sha256(q.numpy().tobytes()).hexdigest()[:16]


def _image_runs(input_ids: Sequence[int], token_id: int | None) -> list[tuple[int, int]]:
    """(start, end) of each run of image placeholder tokens."""
    runs: list[tuple[int, int]] = []
    if token_id is None:
        return runs
    start = None
    for i, t in enumerate([*input_ids, None]):
        if t == token_id and start is None:
            start = i
        elif t != token_id and start is not None:
            runs.append((start, i))
            start = None
    return runs


def record(prepared: PreparedPrompt) -> dict[str, Any]:
    """The snapshot of one prepared item."""
    ids = prepared.input_ids
    runs = _image_runs(ids, prepared.image_token_id)
    mm = prepared.multi_modal_input
    entry: dict[str, Any] = {
        "prompt_len": len(ids),
        "num_images": prepared.num_images,
        "image_token_count": sum(end - start for start, end in runs),
        "context": [
            {"before": ids[max(0, s - CONTEXT_TOKENS) : s], "after": ids[e : e + CONTEXT_TOKENS]}
            for s, e in runs
        ],
        "geometry": [g.to_dict() for g in prepared.geometry],
    }
    if "image_grid_thw" in mm:
        entry["image_grid_thw"] = mm["image_grid_thw"].tolist()
    if "pixel_values" in mm:
        pv = mm["pixel_values"]
        mean, std = _channel_stats(pv)
        entry["pixel_values"] = {
            "shape": list(pv.shape),
            "dtype": str(pv.dtype),
            "channel_mean": mean,
            "channel_std": std,
            "hash": _quantised_hash(pv),
        }
    return entry


def take_snapshot(preprocessor: Preprocessor, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Prepare every item and record it; the result is what ``vlrollout snapshot`` writes."""
    return {
        "versions": library_versions(),
        "preprocessor": repr(preprocessor),
        "items": {str(item["id"]): record(preprocessor.prepare(dict(item))) for item in items},
    }


@dataclass(frozen=True)
class Tolerances:
    """How far fingerprints may move before a check fails.

    ``channel_mean``/``channel_std`` absorb float noise between fast and slow image processors
    (about 1e-6 here) and tiny resampling differences; anything that changes sizes, counts, tokens
    or the quantised pixel hash is never tolerated unless ``check_hash`` is off.
    """

    channel_mean: float = 1e-3
    channel_std: float = 1e-3
    check_hash: bool = True


@dataclass(frozen=True)
class Difference:
    """One field that differs: where, what was expected, what came out."""

    item: str
    field: str
    expected: Any
    actual: Any

    def __str__(self) -> str:
        return f"item {self.item}: {self.field}: expected {self.expected!r}, got {self.actual!r}"


def _close(a: Sequence[float], b: Sequence[float], tol: float) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def compare(
    expected: Mapping[str, Any], actual: Mapping[str, Any], tolerances: Tolerances = Tolerances()
) -> list[Difference]:
    """Every difference between two snapshots (empty when they agree within ``tolerances``)."""
    diffs: list[Difference] = []
    exp_items, act_items = expected["items"], actual["items"]
    for item in sorted(set(exp_items) | set(act_items)):
        if item not in act_items or item not in exp_items:
            diffs.append(Difference(item, "presence", item in exp_items, item in act_items))
            continue
        e, a = exp_items[item], act_items[item]
        for key in (
            "prompt_len",
            "num_images",
            "image_token_count",
            "image_grid_thw",
            "geometry",
            "context",
        ):
            if e.get(key) != a.get(key):
                diffs.append(Difference(item, key, e.get(key), a.get(key)))
        ep, ap = e.get("pixel_values"), a.get("pixel_values")
        if (ep is None) != (ap is None):
            diffs.append(Difference(item, "pixel_values", ep is not None, ap is not None))
            continue
        if ep is None:
            continue
        for key in ("shape", "dtype"):
            if ep[key] != ap[key]:
                diffs.append(Difference(item, f"pixel_values.{key}", ep[key], ap[key]))
        for key, tol in (
            ("channel_mean", tolerances.channel_mean),
            ("channel_std", tolerances.channel_std),
        ):
            if not _close(ep[key], ap[key], tol):
                diffs.append(Difference(item, f"pixel_values.{key}", ep[key], ap[key]))
        if tolerances.check_hash and ep["hash"] != ap["hash"] and ep["shape"] == ap["shape"]:
            diffs.append(Difference(item, "pixel_values.hash", ep["hash"], ap["hash"]))
    return diffs


def format_report(
    diffs: Sequence[Difference], expected: Mapping[str, Any], actual: Mapping[str, Any]
) -> str:
    lines = [str(d) for d in diffs]
    ev, av = expected.get("versions", {}), actual.get("versions", {})
    changed = {
        k: (ev.get(k), av.get(k)) for k in sorted(set(ev) | set(av)) if ev.get(k) != av.get(k)
    }
    if changed:
        lines.append(
            "library versions changed since the snapshot: "
            + ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items())
        )
    return "\n".join(lines)


def save_snapshot(snapshot: Mapping[str, Any], path: str | Path) -> None:
    from vlrollout.run.files import atomic_write_bytes

    atomic_write_bytes(Path(path), (json.dumps(snapshot, indent=1, sort_keys=True) + "\n").encode())


def load_snapshot(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def assert_matches_snapshot(
    preprocessor: Preprocessor,
    items: Sequence[Mapping[str, Any]],
    path: str | Path,
    tolerances: Tolerances = Tolerances(),
) -> None:
    """For users' test suites: fail with a readable diff when ``preprocessor`` drifted.

    Raises:
        AssertionError: listing each differing item and field, and changed library versions.
        FileNotFoundError: when the snapshot does not exist (create it with ``vlrollout snapshot``).
    """
    expected = load_snapshot(path)
    actual = take_snapshot(preprocessor, items)
    diffs = compare(expected, actual, tolerances)
    if diffs:
        raise AssertionError(
            f"{len(diffs)} difference(s) from snapshot {path}:\n"
            + format_report(diffs, expected, actual)
            + "\nIf the change is intended, regenerate with `vlrollout snapshot` and review the diff."
        )
