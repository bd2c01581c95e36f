"""Log-log line charts as SVG, for the scaling benchmark's curves (no plotting package).

A chart is a JSON-able spec (kept in the record, so the docs renderer draws it from the record
alone): a title, axis labels and series of ``[x, y]`` points. A series labelled ``"<group>
<kind>"`` takes its colour from ``<group>`` and is dashed when ``<kind>`` is in :data:`DASHED`
(the reference a curve is compared with).

    >>> svg = loglog_chart({"title": "t", "x": "tokens", "y": "s",
    ...                     "series": {"tiny engine": [[64, 1.0], [256, 4.0]]}})
    >>> svg.startswith("<svg") and "polyline" in svg
    True
"""

from __future__ import annotations

import html
import math
from typing import Any

from vlrollout.charts import AXIS, COLOURS, svg_open

DASHED = ("generate", "per-copy")
WIDTH, HEIGHT = 560, 260
PAD_L, PAD_R, PAD_T, PAD_B = 56, 150, 24, 34


def _ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten (or of two when the range spans less than a decade) within ``[lo, hi]``."""
    base = 10 if hi / lo >= 10 else 2
    first, last = math.floor(math.log(lo, base)), math.ceil(math.log(hi, base))
    return [base**k for k in range(first, last + 1) if lo <= base**k <= hi] or [lo, hi]


def _label(v: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:g}{unit}"
    return f"{v:.3g}"


def loglog_chart(spec: dict[str, Any]) -> str:
    """The SVG of ``spec`` (``title``, ``x``, ``y`` labels, ``series`` of ``[x, y]`` lists)."""
    series = {k: [(x, y) for x, y in v if x > 0 and y > 0] for k, v in spec["series"].items()}
    pts = [p for v in series.values() for p in v]
    if not pts:
        return f"{svg_open(WIDTH, 40)}<text x='4' y='20'>{html.escape(spec['title'])}: no data</text></svg>"
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) * 2
    y0, y1 = min(ys) / 1.2, max(ys) * 1.2
    lx0, lx1, ly0, ly1 = (math.log(v) for v in (x0, x1, y0, y1))

    def sx(x: float) -> float:
        return PAD_L + (math.log(x) - lx0) / (lx1 - lx0) * (WIDTH - PAD_L - PAD_R)

    def sy(y: float) -> float:
        return HEIGHT - PAD_B - (math.log(y) - ly0) / (ly1 - ly0) * (HEIGHT - PAD_B - PAD_T)

    parts = [
        svg_open(WIDTH, HEIGHT),
        f'<text x="{PAD_L}" y="14" font-weight="bold">{html.escape(spec["title"])}</text>',
        f'<line x1="{PAD_L}" y1="{HEIGHT - PAD_B}" x2="{WIDTH - PAD_R}" y2="{HEIGHT - PAD_B}" '
        f'stroke="{AXIS}"/><line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{HEIGHT - PAD_B}" '
        f'stroke="{AXIS}"/>',
        f'<text x="{(PAD_L + WIDTH - PAD_R) / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle">'
        f"{html.escape(spec['x'])} (log)</text>",
        f'<text x="4" y="{PAD_T - 6}">{html.escape(spec["y"])} (log)</text>',
    ]
    for t in _ticks(x0, x1):
        parts.append(
            f'<text x="{sx(t):.0f}" y="{HEIGHT - PAD_B + 13}" text-anchor="middle">{_label(t)}</text>'
        )
    for t in _ticks(y0, y1):
        parts.append(
            f'<text x="{PAD_L - 4}" y="{sy(t) + 4:.0f}" text-anchor="end">{_label(t)}</text>'
        )
    groups = list(dict.fromkeys(label.split(" ")[0] for label in series))
    for i, (label, points) in enumerate(series.items()):
        colour = COLOURS[groups.index(label.split(" ")[0]) % len(COLOURS)]
        dash = ' stroke-dasharray="5,3"' if label.split(" ")[-1] in DASHED else ""
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(points))
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{coords}"/>'
        )
        parts.append(
            f'<text x="{WIDTH - PAD_R + 6}" y="{PAD_T + 12 * (i + 1)}" fill="{colour}">'
            f"{html.escape(label)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts) + "\n"
