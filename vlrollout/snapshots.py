"""Processor regression snapshots: record what matters downstream, compare with tolerances.

A transformers upgrade or a changed setting can silently change image-token counts, resizing or
pixel values. A snapshot records, per data item and image, exactly the things training depends
on, so a check fails loudly and names the item, the image and the field:

- ``prompt_len``, ``image_token_count``, the ``input_ids`` around each image and a SHA-256 of the
  whole ``input_ids`` (any change of the prompt text or template fails);
- ``image_grid_thw`` (when the family has it), ``pixel_values`` shape and dtype;
- fingerprints of ``pixel_values``: per-channel mean/std, a hash of the values quantised to
  ``1/64``, and per image :data:`PIXEL_SAMPLES` evenly spaced values and the means of as many
  consecutive blocks of them, so a check states how large a pixel difference is (max and mean
  absolute difference per image, in ``pixel_values`` units) and whether it is within
  :attr:`Tolerances.pixel_max_abs`. A change between the sampled positions moves a block mean
  (by at most its largest value's change, so the size stays a lower bound) and the hash;
- the geometry (original w×h → model w×h, with the crop/pad transform);
- for an item with videos: the frames each clip sampled (indices and timestamps), the video token
  count, ``video_grid_thw`` and the same fingerprints of ``pixel_values_videos`` per video;
- the preprocessor settings (class, pixel budget, the image processor's resize settings), shown
  beside the current ones when a check fails, and the library versions (reported, not compared).

Regenerate golden files only with ``vlrollout snapshot`` and review the diff.

>>> # In a user's test suite:
>>> # from vlrollout.snapshots import assert_matches_snapshot
>>> # assert_matches_snapshot(my_preprocessor, items, "tests/snapshots/mine.json")
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vlrollout.processors.base import PreparedPrompt, Preprocessor, item_copy
from vlrollout.processors.contract import check_prepared, merge_sizes, plugin_name
from vlrollout.processors.errors import PreprocessError, PreprocessorContractError
from vlrollout.readers.sources import LOAD_ERROR
from vlrollout.versions import library_versions

CONTEXT_TOKENS = 3
QUANTUM = 64  # pixel_values are hashed after rounding to 1/64
PIXEL_SAMPLES = 1024  # evenly spaced pixel_values kept per image (float16) to size differences
# and as many block means per image (summed in float64, so no kernel's summation order shows)


class SnapshotError(Exception):
    """A snapshot cannot be taken or read: names the item or file and the fix (no traceback)."""


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


def _per_unit(pv: torch.Tensor, grid: torch.Tensor | None, count: int) -> list[torch.Tensor]:
    """Pixel values split per image or video: by the grid's rows (Qwen-VL's ``*_grid_thw``), by
    the first axis when it counts them, else one group."""
    if grid is not None and pv.ndim == 2 and int(grid.prod(-1).sum()) == pv.shape[0]:
        return list(torch.split(pv, grid.prod(-1).tolist()))
    if pv.shape[0] == count:
        return list(pv)
    return [pv]


def _fingerprint(pv: torch.Tensor, grid: torch.Tensor | None, count: int) -> dict[str, Any]:
    """Shape, dtype, channel statistics, quantised hash and per-unit samples of pixel values."""
    mean, std = _channel_stats(pv)
    return {
        "shape": list(pv.shape),
        "dtype": str(pv.dtype),
        "channel_mean": mean,
        "channel_std": std,
        "hash": _quantised_hash(pv),
        "samples": [_samples(t) for t in _per_unit(pv, grid, count)],
        "blocks": [_block_means(t) for t in _per_unit(pv, grid, count)],
    }


def _samples(t: torch.Tensor) -> str:
    flat = t.detach().float().reshape(-1)
    idx = torch.linspace(0, flat.numel() - 1, min(PIXEL_SAMPLES, flat.numel())).round().long()
    return base64.b64encode(flat[idx].to(torch.float16).numpy().tobytes()).decode("ascii")


def _block_means(t: torch.Tensor) -> str:
    """Means of :data:`PIXEL_SAMPLES` consecutive blocks of ``t``'s values, stored as the
    samples are (float16)."""
    flat = t.detach().double().reshape(-1)
    blocks = torch.tensor_split(flat, min(PIXEL_SAMPLES, flat.numel()))
    means = torch.stack([b.mean() for b in blocks]) if blocks else flat
    return base64.b64encode(means.to(torch.float16).numpy().tobytes()).decode("ascii")


def _unsample(text: str) -> torch.Tensor:
    import numpy as np

    return torch.from_numpy(
        np.frombuffer(base64.b64decode(text), dtype=np.float16).astype("float32")
    )


def record(prepared: PreparedPrompt) -> dict[str, Any]:
    """The snapshot of one prepared item (video fields only for an item with videos)."""
    ids = prepared.input_ids
    runs = _image_runs(ids, prepared.image_token_id)
    mm = prepared.multi_modal_input
    entry: dict[str, Any] = {
        "input_ids_sha256": hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest(),
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
        entry["pixel_values"] = _fingerprint(
            mm["pixel_values"], mm.get("image_grid_thw"), prepared.num_images
        )
    if prepared.num_videos:
        entry.update(_video_record(prepared))
    return entry


def _video_record(prepared: PreparedPrompt) -> dict[str, Any]:
    """Which frames of each clip were sampled (and when), the video tokens and their pixels."""
    mm = prepared.multi_modal_input
    runs = _image_runs(prepared.input_ids, prepared.video_token_id)
    out: dict[str, Any] = {
        "num_videos": prepared.num_videos,
        "video_token_count": sum(end - start for start, end in runs),
        "video_frames": [
            {"frame_indices": list(c.frame_indices), "timestamps_s": list(c.timestamps_s)}
            for c in prepared.videos
        ],
    }
    if "video_grid_thw" in mm:
        out["video_grid_thw"] = mm["video_grid_thw"].tolist()
    if "pixel_values_videos" in mm:
        out["pixel_values_videos"] = _fingerprint(
            mm["pixel_values_videos"], mm.get("video_grid_thw"), prepared.num_videos
        )
    return out


def preprocessor_settings(preprocessor: Preprocessor) -> dict[str, Any]:
    """What decides the tensors: classes, pixel budget, the image processor's resize settings
    (its resampling filter too) and, for a family with videos, the frame sampling."""
    from vlrollout.checks import RESIZE_ATTRIBUTES

    processor = getattr(preprocessor, "processor", None)
    ip = getattr(processor, "image_processor", None)
    out: dict[str, Any] = {
        "preprocessor": type(preprocessor).__qualname__,
        "processor": type(processor).__name__,
        "image_processor": type(ip).__name__,
        "min_pixels": getattr(preprocessor, "min_pixels", None),
        "max_pixels": getattr(preprocessor, "max_pixels", None),
    }
    for name in RESIZE_ATTRIBUTES:
        value = getattr(ip, name, None)
        if value is not None:
            out[f"image_processor.{name}"] = dict(value) if isinstance(value, Mapping) else value
    sampling = getattr(preprocessor, "video_sampling", None)
    if dataclasses.is_dataclass(sampling):
        for name, value in dataclasses.asdict(sampling).items():
            out[f"video_sampling.{name}"] = value
    return json.loads(json.dumps(out, default=str))


def take_snapshot(preprocessor: Preprocessor, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Prepare every item and record it; the result is what ``vlrollout snapshot`` writes.

    Raises:
        SnapshotError: an item cannot be prepared (naming it, the reason and the fix), or its
            prepared prompt breaks the preprocessor contract (a dropped image, tensors that
            disagree with the placeholders).
    """
    recorded: dict[str, Any] = {}
    positions: dict[str, int] = {}
    for k, item in enumerate(items):
        name = str(item.get("id", k))
        if name in positions:
            raise SnapshotError(
                f"id {name!r} is used by items {positions[name]} and {k + 1}: a snapshot records "
                "each item under its id, so give every item its own id"
            )
        positions[name] = k + 1
        try:
            if LOAD_ERROR in item:  # a line the reader could not make an item of
                raise PreprocessError(name, item[LOAD_ERROR]["reason"], item[LOAD_ERROR]["detail"])
            prepared = preprocessor.prepare(item_copy(item))
            merge = merge_sizes(getattr(preprocessor, "processor", None))
            check_prepared(prepared, plugin_name(preprocessor), merge, item)
            recorded[name] = record(prepared)
        except PreprocessorContractError as e:  # recorded, it would be the regression truth
            raise SnapshotError(f"item {name}: {e}") from None
        except PreprocessError as e:
            raise SnapshotError(
                f"item {name}: {e.reason}: {e.detail} — fix the item (or drop it from the data "
                "file) and run the command again"
            ) from None
    return {
        "versions": library_versions(),
        "preprocessor": repr(preprocessor),
        "settings": preprocessor_settings(preprocessor),
        "items": recorded,
    }


@dataclass(frozen=True)
class Tolerances:
    """How far fingerprints may move before a check fails.

    ``channel_mean``/``channel_std`` absorb float noise between fast and slow image processors
    (about 1e-6 here) and tiny resampling differences; anything that changes sizes, counts or
    tokens is never tolerated. Pixel values are judged by their samples and block means against
    ``pixel_max_abs``; with ``pixel_max_abs`` at 0 (any change fails) the quantised pixel hash
    is compared too, unless ``check_hash`` is off, as it is for a snapshot without samples.
    """

    channel_mean: float = 1e-3
    channel_std: float = 1e-3
    check_hash: bool = True
    pixel_max_abs: float = 0.0
    """Largest accepted absolute difference of a sampled ``pixel_values`` value (normalised units:
    one grey level is about 0.015 with CLIP's std). 0 by default: any change is reported with its
    size; raise it to accept e.g. a slow→fast processor switch."""


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


ITEM_FIELDS = (
    "input_ids_sha256",
    "prompt_len",
    "num_images",
    "image_token_count",
    "image_grid_thw",
    "geometry",
    "context",
    "num_videos",
    "video_token_count",
    "video_frames",
    "video_grid_thw",
)
"""Fields of an item that must be equal (no tolerance)."""

PIXEL_FIELDS = {"pixel_values": "image", "pixel_values_videos": "video"}
"""Fingerprinted pixel tensors, with what each of their units is."""


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
        for key in ITEM_FIELDS:
            if e.get(key) != a.get(key):
                diffs.append(Difference(item, key, e.get(key), a.get(key)))
        for key, unit in PIXEL_FIELDS.items():
            diffs.extend(
                _fingerprint_differences(item, key, unit, e.get(key), a.get(key), tolerances)
            )
    return diffs


def _fingerprint_differences(
    item: str,
    key: str,
    unit: str,
    ep: Mapping[str, Any] | None,
    ap: Mapping[str, Any] | None,
    tolerances: Tolerances,
) -> list[Difference]:
    """How one item's pixel tensor ``key`` (``_fingerprint``) moved between two snapshots."""
    if (ep is None) != (ap is None):
        return [Difference(item, key, ep is not None, ap is not None)]
    if ep is None or ap is None:
        return []
    diffs = [
        Difference(item, f"{key}.{field}", ep[field], ap[field])
        for field in ("shape", "dtype")
        if ep[field] != ap[field]
    ]
    for field, tol in (
        ("channel_mean", tolerances.channel_mean),
        ("channel_std", tolerances.channel_std),
    ):
        if not _close(ep[field], ap[field], tol):
            diffs.append(Difference(item, f"{key}.{field}", ep[field], ap[field]))
    if ep["shape"] != ap["shape"]:
        return diffs
    sampled = "samples" in ep and "samples" in ap
    moved = _pixel_differences(item, key, unit, ep, ap, tolerances) if sampled else []
    strict = not sampled or tolerances.pixel_max_abs == 0
    if not moved and strict and tolerances.check_hash and ep["hash"] != ap["hash"]:
        moved = [Difference(item, f"{key}.hash", ep["hash"], ap["hash"])]
    return diffs + moved


@dataclass(frozen=True)
class PixelDifference(Difference):
    """How far one image's pixel values moved, and whether that is within the tolerance."""

    max_abs: float = 0.0
    mean_abs: float = 0.0
    tolerance: float = 0.0

    def __str__(self) -> str:
        verdict = "within" if self.max_abs <= self.tolerance else "exceeds"
        return (
            f"item {self.item}: {self.field}: max |difference| {self.max_abs:.4g}, mean "
            f"{self.mean_abs:.4g} (pixel_values units, {PIXEL_SAMPLES} samples and block "
            f"means); {verdict} the tolerance {self.tolerance:g}"
        )


def _largest_change(expected: Mapping[str, Any], actual: Mapping[str, Any], k: int) -> float:
    """Largest change of image ``k``'s block means (0 when either snapshot has none)."""
    if "blocks" not in expected or "blocks" not in actual:
        return 0.0
    ev, av = _unsample(expected["blocks"][k]), _unsample(actual["blocks"][k])
    if ev.shape != av.shape or not ev.numel():
        return 0.0
    return float((ev - av).abs().max())


def _pixel_differences(
    item: str,
    key: str,
    unit: str,
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    tolerances: Tolerances,
) -> list[Difference]:
    """Per image: the largest change of a sample or a block mean, against the tolerance."""
    out: list[Difference] = []
    if len(expected["samples"]) != len(actual["samples"]):
        return [
            Difference(item, f"{key}.{unit}s", len(expected["samples"]), len(actual["samples"]))
        ]
    pairs = zip(expected["samples"], actual["samples"], strict=True)
    for k, (e, a) in enumerate(pairs, start=1):
        ev, av = _unsample(e), _unsample(a)
        if ev.shape != av.shape:
            out.append(Difference(item, f"{key}[{unit} {k}]", ev.shape, av.shape))
            continue
        delta = (ev - av).abs()
        max_abs = max(float(delta.max()) if delta.numel() else 0.0,
                      _largest_change(expected, actual, k - 1))  # fmt: skip
        mean_abs = float(delta.mean())
        if max_abs > tolerances.pixel_max_abs:
            out.append(
                PixelDifference(
                    item,
                    f"{key}[{unit} {k}]",
                    None,
                    None,
                    max_abs,
                    mean_abs,
                    tolerances.pixel_max_abs,
                )  # fmt: skip
            )
    return out


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
    es, cs = expected.get("settings", {}), actual.get("settings", {})
    keys = sorted(set(es) | set(cs))
    if keys:
        lines.append("preprocessor settings (snapshot | now):")
        for k in keys:
            mark = "  " if es.get(k) == cs.get(k) else "* "
            lines.append(f"  {mark}{k}: {es.get(k, '(not recorded)')} | {cs.get(k, '(none)')}")
    return "\n".join(lines)


def save_snapshot(snapshot: Mapping[str, Any], path: str | Path) -> None:
    from vlrollout.files import atomic_write_bytes

    atomic_write_bytes(Path(path), (json.dumps(snapshot, indent=1, sort_keys=True) + "\n").encode())


def load_snapshot(path: str | Path) -> dict[str, Any]:
    """Read a snapshot file.

    Raises:
        SnapshotError: the file is missing or not a snapshot (naming it and the fix).
    """
    path = Path(path)
    fix = f"create it with `vlrollout snapshot --processor ... --out {path}`"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SnapshotError(f"snapshot file {path} does not exist; {fix}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SnapshotError(f"snapshot file {path} cannot be read ({e}); {fix}") from None
    if not isinstance(data, dict) or not isinstance(data.get("items"), dict):
        raise SnapshotError(f"{path} is not a vlrollout snapshot (no 'items' mapping); {fix}")
    return data


def assert_matches_snapshot(
    preprocessor: Preprocessor,
    items: Sequence[Mapping[str, Any]],
    path: str | Path,
    tolerances: Tolerances = Tolerances(),
) -> None:
    """For users' test suites: fail with a readable diff when ``preprocessor`` drifted.

    Raises:
        AssertionError: listing each differing item and field, and changed library versions.
        SnapshotError: the snapshot does not exist (create it with ``vlrollout snapshot``) or an
            item cannot be prepared.
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
