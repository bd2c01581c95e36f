"""What an evaluation leaves behind: ``results.json``, the printed table, and the comparison with
an earlier ``results.json`` that makes ``vlrollout eval --compare`` a regression test.

``results.json``::

    {"task": "refcoco", "primary": "ACC@0.5", "k": 1,
     "metrics": {"ACC@0.5": {"value": 0.61, "ci95": [0.55, 0.67]}, ...},
     "per_split": {"val": {"items": 120, "metrics": {...}}, ...},
     "items": 240, "rejected": {"image_not_found": 1},
     "rejections": [{"id", "reason", "detail"}, ...], "unreadable": {"no_box": 3},
     "model": "...", "data": {"path": "...", "sha256": "..."}, "settings": {...},
     "vlrollout_version": "0.1.0"}

``scores.jsonl`` beside it holds one line per scored item (``id``, ``split``, ``values``: the
item's values averaged over its completions, ``prediction``, ``reason``), for paired comparisons of
two runs on the same items.

``rejected`` counts the items not scored, by reason; ``unreadable`` the completions that were
scored as 0 because the task could not read them (no box, no number), by reason.

Every metric is higher-is-better, so a regression is a drop.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlrollout.errors import UsageError
from vlrollout.eval.runner import EvalResult
from vlrollout.files import atomic_write_json, data_sha256
from vlrollout.jsonl import write_jsonl
from vlrollout.versions import installed_version

RESULTS_FILE = "results.json"
SCORES_FILE = "scores.jsonl"
DEFAULT_THRESHOLD = 0.01
"""A metric that drops by more than this (absolute: 0.01 is one point of a 0-1 accuracy) is a
regression for ``--compare``."""


def results_dict(
    result: EvalResult, *, model: str, data: str | Path, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``results.json`` content of ``result`` (see the module docstring)."""
    return {
        "task": result.task,
        "primary": result.primary,
        "k": result.k,
        "metrics": result.metrics,
        "per_split": result.per_split,
        "items": len(result.scores),
        "rejected": result.rejected,
        "rejections": result.rejections,
        "unreadable": result.unreadable,
        "model": model,
        "data": {"path": str(Path(data).resolve()), "sha256": data_sha256(data)},
        "settings": dict(settings),
        "vlrollout_version": installed_version("vlrollout"),
    }


def write_results(
    output: Path, result: EvalResult, *, model: str, data: str | Path, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """Write ``output/results.json`` and ``output/scores.jsonl``; returns the results."""
    content = results_dict(result, model=model, data=data, settings=settings)
    write_jsonl(output / SCORES_FILE, score_records(result))
    atomic_write_json(output / RESULTS_FILE, content)
    return content


def score_records(result: EvalResult) -> list[dict[str, Any]]:
    """One ``scores.jsonl`` record per scored item (see the module docstring)."""
    return [
        {
            "id": s.id,
            "split": s.split,
            "values": s.values,
            "prediction": s.details.get("prediction"),
            "reason": s.details.get("reason"),
        }
        for s in result.scores
    ]


def read_results(path: str | Path) -> dict[str, Any]:
    """A ``results.json`` written by ``vlrollout eval``.

    Raises:
        UsageError: missing, not JSON, or without ``metrics`` (naming the file).
    """
    path = Path(path)
    try:
        content = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"--compare {path}: no such file; pass a results.json of vlrollout eval"
        ) from None
    except (OSError, ValueError) as e:
        raise UsageError(f"--compare {path}: not a readable JSON file ({e})") from None
    if not isinstance(content, dict) or not isinstance(content.get("metrics"), dict):
        raise UsageError(f"--compare {path}: no 'metrics'; pass a results.json of vlrollout eval")
    return content


def check_baseline(baseline: Mapping[str, Any], task: str, path: str | Path = "") -> None:
    """Refuse a baseline :func:`compare` cannot compare with a run of ``task``: another task, or
    ``metrics`` or ``per_split`` not shaped as :func:`results_dict` writes them. ``vlrollout
    eval`` calls it before any model runs, so a wrong ``--compare`` file costs no evaluation.

    Raises:
        UsageError: naming the file, what is wrong and the fix.

    >>> check_baseline({"task": "caption", "metrics": {}}, "refcoco", "base.json")
    Traceback (most recent call last):
    vlrollout.errors.UsageError: --compare base.json: the baseline is task 'caption', this run ...
    """
    where = f"--compare {path}".rstrip()
    if baseline.get("task") != task:
        raise UsageError(
            f"{where}: the baseline is task {baseline.get('task')!r}, this run is {task!r}; "
            "compare results of the same task"
        )
    splits = baseline.get("per_split") or {}
    if not _is_metrics(baseline.get("metrics")) or not (
        isinstance(splits, dict)
        and all(isinstance(e, dict) and _is_metrics(e.get("metrics")) for e in splits.values())
    ):
        raise UsageError(
            f"{where}: 'metrics' or 'per_split' is not as vlrollout eval writes them "
            '({name: {"value", "ci95"}}, {split: {"items", "metrics"}}); pass a results.json of '
            "vlrollout eval"
        )
    if not baseline["metrics"]:
        raise UsageError(
            f"{where}: the baseline scored no item (no metrics), so nothing could be compared; "
            "pass the results.json of a run that scored items"
        )


def _is_metrics(metrics: Any) -> bool:
    return isinstance(metrics, dict) and all(isinstance(e, dict) for e in metrics.values())


def _fmt(value: Any) -> str:
    if isinstance(value, int | float) and math.isfinite(value):
        return f"{value:.4f}"
    return "—"


def _rows(metrics: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    rows = []
    for name, entry in metrics.items():
        ci = entry.get("ci95")
        shown = f"[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "—"
        rows.append((name, _fmt(entry.get("value")), shown))
    return rows


def format_table(results: Mapping[str, Any]) -> str:
    """The printed table: each metric's value and 95% interval, overall and (when the data has
    more than one split) per split; then the rejected items by reason."""
    rejected = results.get("rejected") or {}
    n_rejected = sum(rejected.values())
    lines = [
        f"task {results['task']}: {results['items']} items scored, {n_rejected} rejected"
        + (f", k={results['k']}" if results.get("k", 1) > 1 else "")
    ]
    sections = [("all items", results["metrics"])]
    splits = results.get("per_split") or {}
    if len(splits) > 1:
        sections += [(f"split {s} ({v['items']} items)", v["metrics"]) for s, v in splits.items()]
    for title, metrics in sections:
        rows = [("metric", "value", "95% CI"), *_rows(metrics)]
        width = max(len(r[0]) for r in rows)
        lines.append(title)
        lines += [f"  {a:<{width}}  {b:>7}  {c}" for a, b, c in rows]
    if rejected:
        lines.append("rejected: " + ", ".join(f"{r} {n}" for r, n in rejected.items()))
    unreadable = results.get("unreadable") or {}
    if unreadable:
        shown = ", ".join(f"{r} {n}" for r, n in unreadable.items())
        lines.append(f"completions scored 0 as unreadable: {shown}")
    return "\n".join(lines)


def differing_inputs(results: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """What the two runs were not both given: the data (by digest), the number of items (a
    ``--limit``), the settings that shape the numbers. A regression test compares the same data; a difference is worth a
    line, not a refusal (a new checkpoint is the point of the comparison).

    >>> differing_inputs({"data": {"sha256": "a"}, "k": 1}, {"data": {"sha256": "b"}, "k": 1})
    ['data: sha256 b… (baseline) vs a… (now)']
    """
    notes = []
    old, new = (baseline.get("data") or {}).get("sha256"), (results.get("data") or {}).get("sha256")
    if old and new and old != new:
        notes.append(f"data: sha256 {old[:12]}… (baseline) vs {new[:12]}… (now)")
    if baseline.get("items") != results.get("items"):
        notes.append(f"items: {baseline.get('items')} (baseline) vs {results.get('items')} (now)")
    if baseline.get("k", 1) != results.get("k", 1):
        notes.append(f"k: {baseline.get('k', 1)} (baseline) vs {results.get('k', 1)} (now)")
    return notes


FLOAT_SLACK = 1e-9
"""Added to ``--threshold``: metrics are means of floats, so a drop of exactly one point
(0.52 -> 0.51) computes as a little more than 0.01."""


def compare(
    results: Mapping[str, Any], baseline: Mapping[str, Any], threshold: float = DEFAULT_THRESHOLD
) -> list[str]:
    """The regressions of ``results`` against ``baseline``: one line per metric (overall and per
    split) that dropped by more than ``threshold`` (absolute) or is missing now.

    Metrics only in ``results`` are new, not regressions. Both must be of the same task.

    Raises:
        UsageError: the two are results of different tasks.

    >>> base = {"task": "t", "metrics": {"acc": {"value": 0.8}}, "per_split": {}}
    >>> compare({"task": "t", "metrics": {"acc": {"value": 0.7}}, "per_split": {}}, base)
    ['acc (all items): baseline 0.8000, now 0.7000 (-0.1000)']
    """
    check_baseline(baseline, str(results.get("task")))
    pairs = [("all items", baseline["metrics"], results["metrics"])]
    now_splits = results.get("per_split") or {}
    for split, entry in (baseline.get("per_split") or {}).items():
        if split in now_splits:
            pairs.append((f"split {split}", entry["metrics"], now_splits[split]["metrics"]))
    found = []
    for where, before, after in pairs:
        for name, entry in before.items():
            old = entry.get("value")
            if not isinstance(old, int | float) or not math.isfinite(old):
                continue
            new = (after.get(name) or {}).get("value")
            if not isinstance(new, int | float) or not math.isfinite(new):
                found.append(f"{name} ({where}): baseline {old:.4f}, now missing")
            elif old - new > threshold + FLOAT_SLACK:
                found.append(
                    f"{name} ({where}): baseline {old:.4f}, now {new:.4f} ({new - old:+.4f})"
                )
    return found
