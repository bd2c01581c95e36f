"""Charts for the HTML reports, as inline SVG (no plotting package, no scripts): line charts of
curves over steps and bar charts of histograms, with one frame, font and palette.

Every chart is an ``<svg>`` element opened by :func:`svg_open`, so the run report and the training
report look alike and a test can recognise any chart.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
"""Series colours, in order (cycling)."""
AXIS = "#888"
FONT = 'font-family="sans-serif" font-size="11"'
BINS = 10


def svg_open(width: int, height: int, css_class: str = "chart") -> str:
    """The opening tag every chart starts with."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" width="{width}" '
        f'height="{height}" {FONT}>'
    )


def line_chart(
    title: str, series: dict[str, list[tuple[float, float]]], width: int = 520, height: int = 220
) -> str:
    """A line chart of ``{label: [(step, y), ...]}`` with its title, axes and the ranges' ends.

    Points whose ``y`` is ``None`` are left out; with no point at all the chart is a line saying so.

    >>> "<polyline" in line_chart("r", {"a": [(0, 0.0), (1, 1.0)]})
    True
    """
    points = [p for pts in series.values() for p in pts if p[1] is not None]
    if not points:
        return f"<p>{html.escape(title)}: no data yet</p>"
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1
    pad_l, pad_b, pad_t, pad_r = 50, 30, 24, 10

    def sx(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * (width - pad_l - pad_r)

    def sy(y: float) -> float:
        return height - pad_b - (y - y0) / (y1 - y0) * (height - pad_b - pad_t)

    parts = [
        svg_open(width, height),
        f'<text x="{pad_l}" y="14" font-weight="bold">{html.escape(title)}</text>',
        f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" '
        f'stroke="{AXIS}"/><line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" '
        f'stroke="{AXIS}"/>',
        f'<text x="{pad_l - 4}" y="{sy(y0):.0f}" text-anchor="end">{y0:.3g}</text>',
        f'<text x="{pad_l - 4}" y="{sy(y1) + 8:.0f}" text-anchor="end">{y1:.3g}</text>',
        f'<text x="{pad_l}" y="{height - 12}">{x0:g}</text>',
        f'<text x="{width - pad_r}" y="{height - 12}" text-anchor="end">step {x1:g}</text>',
    ]
    for i, (label, pts) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts if y is not None)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>'
        )
        parts.append(
            f'<text x="{width - pad_r - 4}" y="{pad_t + 12 * (i + 1)}" text-anchor="end" '
            f'fill="{colour}">{html.escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def histogram(values: Sequence[float], bins: int = BINS) -> tuple[float, float, list[int]]:
    """``(low, high, counts)`` of the finite ``values`` in ``bins`` equal bins over
    ``[low, high]``.

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


def bar_chart(
    counts: Sequence[int], labels: Sequence[str], width: int = 120, height: int = 40
) -> str:
    """Bars of ``counts`` scaled to the tallest, on a base line; hovering a bar shows its label
    and count. A zero count has no bar, any other count at least one pixel.

    >>> bar_chart([0, 2], ["low", "high"]).count("<rect")
    1
    """
    top = max(counts, default=0) or 1
    step = width / max(1, len(counts))
    bars = []
    for k, (count, label) in enumerate(zip(counts, labels, strict=True)):
        if not count:
            continue
        h = max(1, round((height - 1) * count / top))
        bars.append(
            f'<rect x="{k * step:.1f}" y="{height - 1 - h}" width="{max(1.0, step - 1):.1f}" '
            f'height="{h}" fill="{COLOURS[0]}"><title>{html.escape(label)}: {count}</title></rect>'
        )
    base = f'<line x1="0" y1="{height - 0.5}" x2="{width}" y2="{height - 0.5}" stroke="{AXIS}"/>'
    return f"{svg_open(width, height, 'hist')}{''.join(bars)}{base}</svg>"


def histogram_chart(values: Sequence[float], bins: int = BINS) -> str:
    """:func:`histogram` of ``values`` as a :func:`bar_chart`, followed by its range."""
    low, high, counts = histogram(values, bins)
    edges = [low + k * (high - low) / bins for k in range(bins + 1)]
    labels = [f"{edges[k]:.2f}–{edges[k + 1]:.2f}" for k in range(bins)]
    return f"{bar_chart(counts, labels)} <small>{low:g}…{high:g}</small>"
