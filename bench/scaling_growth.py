"""Growth exponents of the scaling benchmark's costs, and the ones above their expected order.

A cost ``y`` measured at several values ``x`` of one axis (everything else fixed) grows like
``x**k``; ``k`` is the least-squares slope of ``log y`` against ``log x``. Each (metric, axis)
has an expected order (:data:`EXPECTED`): linear in the group size and the images per prompt;
the prefill (and so a whole request) at most quadratic in the prompt's length, which grows with
the image tokens and with the images per prompt alike (each image lengthens the one sequence
that attention runs over); a decode step at most linear in the context; a prompt prepared once
per group flat in the group size. An exponent above its order plus
:data:`TOLERANCE` is flagged; costs too small to measure (:data:`FLOORS`) are fitted but not
flagged.

    >>> round(exponent([1, 2, 4], [3, 12, 48]), 6)   # y = 3 x^2
    2.0
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

TOLERANCE = 0.25
"""Slack over the expected order before a slope is flagged (shared 2-core machines are noisy)."""

EXPECTED: dict[tuple[str, str], float] = {
    # (metric, axis) -> the largest exponent that is not a defect
    ("time/total", "group"): 1.0,
    ("time/prefill", "group"): 1.0,
    ("time/decode", "group"): 1.0,
    ("time/decode_per_token", "group"): 1.0,
    ("peak_rss_extra", "group"): 1.0,
    ("images_encoded", "group"): 0.0,
    ("time/prepare_group", "group"): 0.0,
    ("prepares_per_group", "group"): 0.0,
    ("bytes", "group"): 0.0,
    ("latency", "group"): 1.0,
    ("time/total", "images"): 2.0,
    ("time/prefill", "images"): 2.0,
    ("time/decode", "images"): 1.0,
    ("time/decode_per_token", "images"): 1.0,
    ("peak_rss_extra", "images"): 1.0,
    ("time/prepare_group", "images"): 1.0,
    ("bytes", "images"): 1.0,
    ("latency", "images"): 2.0,
    ("time/total", "tokens"): 2.0,
    ("time/prefill", "tokens"): 2.0,
    ("time/decode", "tokens"): 1.0,
    ("time/decode_per_token", "tokens"): 1.0,
    ("peak_rss_extra", "tokens"): 2.0,
    ("time/prepare_group", "tokens"): 1.0,
    ("bytes", "tokens"): 1.0,
    ("latency", "tokens"): 2.0,
    ("time/total", "size"): 1.0,
    ("time/prefill", "size"): 1.0,
    ("time/decode", "size"): 1.0,
    ("time/decode_per_token", "size"): 1.0,
    ("peak_rss", "size"): 1.0,
    ("peak_rss_extra", "size"): 1.0,
    ("latency", "size"): 1.0,
}
"""Expected orders. Trainer metrics (``time/step`` and its phases, ``peak_rss``) are linear in
the group size, which :func:`expected` gives for any ``time/*`` or memory metric not listed."""

FLOORS: dict[str, float] = {"s": 0.05, "B": 64 * 2**20, "bytes": 64 * 2**20}
"""Largest value of a fit below which it is not flagged: timing noise on a loaded machine, and the
allocator's granularity on peak resident memory (by unit)."""


@dataclass(frozen=True)
class Fit:
    """One growth exponent: ``metric`` on ``path``/``shape`` against ``axis``."""

    path: str
    shape: str
    axis: str
    metric: str
    exponent: float
    expected: float | None
    points: int
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    flagged: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def exponent(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``log y`` on ``log x``.

    Raises:
        ValueError: fewer than two distinct ``x``, or a value that is not positive.
    """
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} x values for {len(ys)} y values")
    if any(v <= 0 for v in [*xs, *ys]):
        raise ValueError(f"log-log fit needs positive values, got x={list(xs)} y={list(ys)}")
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((x - mx) ** 2 for x in lx)
    if sxx == 0:
        raise ValueError(f"log-log fit needs two distinct x values, got {list(xs)}")
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / sxx


def expected(metric: str, axis: str, path: str = "engine") -> float | None:
    """The expected order of ``metric`` against ``axis`` on ``path`` (``None``: not judged).
    ``generate`` encodes every copy's images by design: its ``images_encoded`` is the
    reference the engine's is compared with, not a cost with an order."""
    if (metric == "images_encoded" and path != "engine") or metric.endswith("_ratio"):
        return None
    if (metric, axis) in EXPECTED:
        return EXPECTED[metric, axis]
    if metric.startswith("time/") or metric.startswith("peak_rss"):
        return 1.0
    return None


def _series(points: Iterable[dict[str, Any]]) -> dict[tuple, list[tuple[float, float]]]:
    """Points grouped by (path, shape, axis, metric, fixed); the size axis ignores the shape."""
    out: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for p in points:
        fixed = tuple(sorted((k, str(v)) for k, v in p.get("fixed", {}).items()))
        shape = "all" if p["axis"] == "size" else p["shape"]
        out[p["path"], shape, p["axis"], p["metric"], fixed].append((p["x"], p["value"]))
    return out


def fits(points: Iterable[dict[str, Any]], tolerance: float = TOLERANCE) -> list[Fit]:
    """An exponent for every series of two or more distinct ``x`` with positive values."""
    points = list(points)
    result = []
    for (path, shape, axis, metric, _), pairs in sorted(_series(points).items()):
        pairs = sorted(pairs)
        xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
        if len(set(xs)) < 2 or min(ys) <= 0 or min(xs) <= 0:
            continue
        k = exponent(xs, ys)
        order = expected(metric, axis, path)
        unit_floor = FLOORS.get(_unit(points, metric), 0.0)
        above = order is not None and k > order + tolerance
        small = max(ys) < unit_floor
        note = "below the noise floor: not flagged" if above and small else ""
        result.append(
            Fit(
                path,
                shape,
                axis,
                metric,
                round(k, 3),
                order,
                len(xs),
                (min(xs), max(xs)),
                (min(ys), max(ys)),
                flagged=above and not small,
                note=note,
            )
        )
    return result


def _unit(points: Iterable[dict[str, Any]], metric: str) -> str:
    for p in points:
        if p["metric"] == metric:
            return p.get("unit", "")
    return ""


def flags(found: Iterable[Fit]) -> list[Fit]:
    """The fits above their expected order."""
    return [f for f in found if f.flagged]
