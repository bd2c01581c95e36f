"""The report's overview: counts, rejections by reason, a reward histogram per task, and the
fraction of GRPO groups whose rewards are all equal (zero advantages: they teach nothing)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

BINS = 10


def histogram(values: Sequence[float], bins: int = BINS) -> tuple[float, float, list[int]]:
    """``(low, high, counts)`` of ``values`` in ``bins`` equal bins over ``[low, high]``.

    The range is ``[0, 1]`` when every value lies in it (most rewards), else the values' own.

    >>> histogram([0.0, 0.05, 1.0], bins=2)
    (0.0, 1.0, [2, 1])
    """
    finite = [v for v in values if math.isfinite(v)]
    low, high = 0.0, 1.0
    if finite and (min(finite) < 0 or max(finite) > 1):
        low, high = min(finite), max(finite)
    counts = [0] * bins
    width = (high - low) / bins or 1.0
    for v in finite:
        counts[min(bins - 1, max(0, int((v - low) / width)))] += 1
    return low, high, counts


def histogram_html(values: Sequence[float], bins: int = BINS) -> str:
    """A small bar chart (inline, no scripts) of :func:`histogram`."""
    low, high, counts = histogram(values, bins)
    top = max(counts) or 1
    bars = "".join(
        f"<span class=bar title='{low + k * (high - low) / bins:.2f}–"
        f"{low + (k + 1) * (high - low) / bins:.2f}: {c}' "
        f"style='height:{max(1, round(40 * c / top)) if c else 0}px'></span>"
        for k, c in enumerate(counts)
    )
    return f"<span class=hist>{bars}</span> <small>{low:g}…{high:g}</small>"


def overview_html(summary: dict[str, Any], rewards_by_task: dict[str, list[float]]) -> str:
    """The page's header section."""
    items, episodes = summary.get("items", {}), summary.get("episodes", {})
    rows = "".join(
        f"<tr><td>{html.escape(task)}</td><td class=r>{len(values)}</td>"
        f"<td class=r>{(sum(values) / len(values)) if values else float('nan'):.3f}</td>"
        f"<td>{histogram_html(values)}</td></tr>"
        for task, values in sorted(rewards_by_task.items())
    )
    reasons = ", ".join(f"{k}: {v}" for k, v in episodes.get("rejected_by_reason", {}).items())
    groups = summary.get("groups") or {}
    fraction = groups.get("fraction_all_equal")
    group_line = (
        f"<p>{groups['all_equal']}/{groups['groups']} GRPO groups ({fraction:.0%}) have all-equal "
        "rewards: their advantages are zero, so they teach nothing.</p>"
        if fraction is not None
        else ""
    )
    return (
        f"<p>{items.get('done', 0)}/{items.get('total', 0)} items, "
        f"{episodes.get('accepted', 0)} episodes kept, {episodes.get('rejected', 0)} rejected"
        f"{' (' + html.escape(reasons) + ')' if reasons else ''}</p>{group_line}"
        "<table><tr><th>task</th><th>episodes</th><th>mean reward</th><th>rewards</th></tr>"
        f"{rows}</table>"
    )
