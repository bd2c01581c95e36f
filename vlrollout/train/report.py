"""Metrics files and the HTML report of ``vlrollout train`` (inline SVG: no plotting package).

``metrics.jsonl``: one record per step (reward mean/std, fraction of all-equal groups, KL,
entropy, clip fraction, tokens/s, time split, and AReaL's full ``stats_tracker`` export under
``areal``). ``eval.jsonl``: one record per held-out evaluation. ``report.html`` draws both.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
#: Prefixes of held-out metrics in ``eval.jsonl`` (greedy; sampled at the training temperature).
EVAL_PREFIXES = ("eval", "eval_sampled")
#: Keys under an evaluation prefix that count episodes or time rather than score them.
EVAL_COUNTS = ("n", "rejected", "seconds")


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record, default=float) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def svg_chart(
    title: str, series: dict[str, list[tuple[float, float]]], width: int = 520, height: int = 220
) -> str:
    """A line chart of ``{label: [(x, y), ...]}`` as an inline ``<svg>`` string.

    >>> "<polyline" in svg_chart("r", {"a": [(0, 0.0), (1, 1.0)]})
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
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{pad_l}" y="14" font-weight="bold">{html.escape(title)}</text>',
        f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" '
        f'stroke="#888"/><line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" '
        f'stroke="#888"/>',
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


def write_report(out: Path, cfg: Any = None) -> Path:
    """(Re)write ``out/report.html`` from ``metrics.jsonl``, ``eval.jsonl`` and the shown
    held-out rollouts (:func:`vlrollout.train.samples.section_html`)."""
    from vlrollout.train.samples import SECTION_CSS, section_html

    steps = read_jsonl(out / "metrics.jsonl")
    evals = read_jsonl(out / "eval.jsonl")

    def series(key: str, rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
        return [(r["step"], r[key]) for r in rows if r.get(key) is not None]

    prefixes = [p for p in EVAL_PREFIXES if any(f"{p}/n" in r for r in evals)]
    eval_keys = sorted(
        k
        for k in {k for r in evals for k in r}
        if k.partition("/")[0] in EVAL_PREFIXES and k.partition("/")[2] not in EVAL_COUNTS
    )
    charts = [
        svg_chart(
            "training reward (sampled)",
            {"mean": series("reward_mean", steps), "std": series("reward_std", steps)},
        ),
        svg_chart(
            "held-out metric (eval/: greedy; eval_sampled/: at the training temperature)",
            {k: series(k, evals) for k in eval_keys},
        ),
        svg_chart(
            "groups with all-equal rewards (no signal)",
            {"fraction": series("frac_all_equal_groups", steps)},
        ),
        svg_chart(
            "PPO approximate KL (updated vs sampling policy) / entropy / clip fraction",
            {k: series(k, steps) for k in ("ppo_approx_kl", "entropy", "clip_ratio")},
        ),
        svg_chart(
            "seconds per step",
            {k: series(f"time/{k}", steps) for k in ("step", "rollout", "update", "weight_sync")},
        ),
    ]
    columns = (
        "step",
        "reward_mean",
        "reward_std",
        "frac_all_equal_groups",
        "n_trajectories",
        "rejected",
        "ppo_approx_kl",
        "entropy",
        "clip_ratio",
        "tokens_per_s",
        "time/step",
    )
    rows = "".join(
        "<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in columns) + "</tr>"
        for r in steps[-20:]
    )
    eval_rows = "".join(
        "<tr>"
        + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in ("step", *eval_keys))
        + "".join(f"<td>{_rejected(r, p)}</td>" for p in prefixes)
        + "</tr>"
        for r in evals
    )
    eval_head = [*("step", *eval_keys), *(f"{p}/rejected of n" for p in prefixes)]
    title = "vlrollout train"
    if cfg is not None:
        title += f": {html.escape(cfg.experiment_name)}/{html.escape(cfg.trial_name)}"
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 8px;text-align:right}}
.charts svg{{margin:0 1em 1em 0;border:1px solid #eee}}{SECTION_CSS}</style></head><body>
<h1>{title}</h1><p>{len(steps)} steps; {len(evals)} held-out evaluations.</p>
<div class="charts">{"".join(charts)}</div>
<h2>Held-out evaluation</h2><p>Means over every episode; a rejected episode scores 0.</p>
<table><tr>{"".join(f"<th>{c}</th>" for c in eval_head)}</tr>{eval_rows}</table>
<h2>Last steps</h2><table><tr>{"".join(f"<th>{c}</th>" for c in columns)}</tr>{rows}</table>
{section_html(out)}
</body></html>"""
    path = out / "report.html"
    path.write_text(doc)
    return path


def _rejected(record: dict[str, Any], prefix: str) -> str:
    """``"2 of 8"``: rejected episodes of an evaluation, and all its episodes."""
    n = record.get(f"{prefix}/n")
    return "" if n is None else f"{record.get(f'{prefix}/rejected', 0)} of {n}"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else html.escape(str(v))
