"""Metrics files and the HTML report of ``vlrollout train`` (charts by :mod:`vlrollout.charts`).

``metrics.jsonl``: one record per step (reward mean/std, fraction of all-equal groups, KL,
entropy, clip fraction, tokens/s, time split, and AReaL's full ``stats_tracker`` export under
``areal``). ``eval.jsonl``: one record per held-out evaluation. ``report.html`` draws both.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from vlrollout.charts import line_chart
from vlrollout.files import atomic_write_bytes
from vlrollout.jsonl import read_jsonl
from vlrollout.train.evaluation import PRIMARY_KEY, TASK_KEY

#: Prefixes of held-out metrics in ``eval.jsonl`` (greedy; sampled at the training temperature).
EVAL_PREFIXES = ("eval", "eval_sampled")
#: Keys under an evaluation prefix that count episodes or time rather than score them.
EVAL_COUNTS = ("n", "rejected", "seconds")
#: Label suffix of the control curve drawn beside each greedy held-out metric.
CONTROL = " (lr = 0 control)"


def lr0_control(evals: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """The lr = 0 control of each greedy held-out metric: its step-0 value at every evaluation.

    A run at ``actor.optimizer.lr=0`` keeps the step-0 weights, and greedy decoding of the same
    weights on the same held-out items gives the same answers, so the control needs no second run
    (exactly so with ``vlrollout.engine.deterministic=true``; otherwise up to the rare argmax tie
    that batching order can flip). Sampled metrics (``eval_sampled/``) vary from draw to draw and
    get no control; neither does a run without a step-0 evaluation (one resumed from a folder
    whose ``eval.jsonl`` starts later).

    >>> lr0_control([{"step": 0, "eval/mean": 0.2, "eval/n": 8}, {"step": 5, "eval/mean": 0.3}])
    {'eval/mean (lr = 0 control)': [(0, 0.2), (5, 0.2)]}
    """
    if not evals or evals[0].get("step") != 0:
        return {}
    first = evals[0]
    keys = [
        k for k in first if k.partition("/")[0] == "eval" and k.partition("/")[2] not in EVAL_COUNTS
    ]
    return {k + CONTROL: [(r["step"], first[k]) for r in evals if k in r] for k in sorted(keys)}


def held_out_metric(evals: list[dict[str, Any]]) -> str:
    """What ``eval/mean`` holds: ``"eval/mean"`` (the mean reward), or with
    ``vlrollout.eval_task`` the task and its primary metric, as the last evaluation names them.

    >>> held_out_metric([{"eval/mean": 0.5, "eval_task": "refcoco", "eval_primary": "ACC@0.5"}])
    'refcoco ACC@0.5'
    """
    last = evals[-1] if evals else {}
    if last.get(PRIMARY_KEY) is None:
        return "eval/mean"
    return f"{last.get(TASK_KEY, '')} {last[PRIMARY_KEY]}".strip()


def rejected_line(record: dict[str, Any]) -> str | None:
    """How many of an evaluation's greedy episodes (with a task: items) were rejected.

    >>> rejected_line({"eval/n": 8, "eval/rejected": 2})
    '2 of 8 episodes (scored 0)'
    >>> rejected_line({"eval/n": 8, "eval/rejected": 2, "eval_primary": "ACC@0.5"})
    '2 of 8 items (not scored)'
    """
    if "eval/n" not in record:
        return None
    counted = "items (not scored)" if record.get(PRIMARY_KEY) else "episodes (scored 0)"
    return f"{record.get('eval/rejected', 0)} of {record['eval/n']} {counted}"


def control_summary(evals: list[dict[str, Any]]) -> str:
    """One sentence: the last greedy held-out mean (with a task: its primary metric) against the
    lr = 0 control, or ``""``.

    >>> control_summary([{"step": 0, "eval/mean": 0.25}, {"step": 10, "eval/mean": 0.5}])
    'Held-out greedy eval/mean at step 10: 0.5 against 0.25 for the lr = 0 control (+0.25).'
    """
    control = lr0_control(evals).get("eval/mean" + CONTROL)
    if not control or len(evals) < 2 or "eval/mean" not in evals[-1]:
        return ""
    last, base = evals[-1]["eval/mean"], control[-1][1]
    return (
        f"Held-out greedy {held_out_metric(evals)} at step {evals[-1]['step']}: {last:.4g} "
        f"against {base:.4g} for the lr = 0 control ({last - base:+.4g})."
    )


def write_report(out: Path, cfg: Any = None) -> Path:
    """(Re)write ``out/report.html`` from ``metrics.jsonl``, ``eval.jsonl`` and the shown
    held-out rollouts (:func:`vlrollout.train.samples.section_html`)."""
    from vlrollout.train.samples import SECTION_CSS, section_html

    steps = read_jsonl(out / "metrics.jsonl")
    evals = read_jsonl(out / "eval.jsonl")

    prefixes = [p for p in EVAL_PREFIXES if any(f"{p}/n" in r for r in evals)]
    eval_keys = sorted(
        k
        for k in {k for r in evals for k in r}
        if k.partition("/")[0] in EVAL_PREFIXES and k.partition("/")[2] not in EVAL_COUNTS
    )
    charts = _charts(steps, evals, eval_keys)
    scored = _scored_note(evals)
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
<h2>Held-out evaluation</h2><p>{html.escape(control_summary(evals))} {scored} The lr = 0
control keeps the step-0 weights, so its greedy score is the step-0 score at every evaluation.</p>
<table><tr>{"".join(f"<th>{c}</th>" for c in eval_head)}</tr>{eval_rows}</table>
<h2>Last steps</h2><table><tr>{"".join(f"<th>{c}</th>" for c in columns)}</tr>{rows}</table>
{section_html(out)}
</body></html>"""
    path = out / "report.html"
    atomic_write_bytes(path, doc.encode())  # a browser reloading it never sees half a page
    return path


def _series(key: str, rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(r["step"], r[key]) for r in rows if r.get(key) is not None]


def _charts(
    steps: list[dict[str, Any]], evals: list[dict[str, Any]], eval_keys: list[str]
) -> list[str]:
    """The report's charts (SVG) of the training steps and the held-out evaluations."""
    # Dynamic sampling: reward_mean is the trained groups'; this, every episode rolled out.
    every = _series("dynamic/reward_mean_all", steps)
    rolled_out = {"mean of every episode rolled out": every} if every else {}
    return [
        line_chart(
            "training reward (sampled)",
            {
                "mean": _series("reward_mean", steps),
                "std": _series("reward_std", steps),
                **rolled_out,
            },
        ),
        _held_out_chart(evals, eval_keys),
        line_chart(
            "groups with all-equal rewards (no signal)",
            {"fraction": _series("frac_all_equal_groups", steps)},
        ),
        line_chart(
            "PPO approximate KL (updated vs sampling policy) / entropy / clip fraction",
            {k: _series(k, steps) for k in ("ppo_approx_kl", "entropy", "clip_ratio")},
        ),
        line_chart(
            "seconds per step",
            {k: _series(f"time/{k}", steps) for k in ("step", "rollout", "update", "weight_sync")},
        ),
    ]


def _scored_note(evals: list[dict[str, Any]]) -> str:
    """What the held-out numbers are averaged over (HTML): episodes of the mean reward, or the
    items a task scored."""
    if not evals or evals[-1].get(PRIMARY_KEY) is None:
        return "Means over every episode; a rejected episode scores 0."
    return (
        f"The {html.escape(held_out_metric(evals))} of <code>vlrollout eval</code> and the "
        "task's other metrics, over the scored items; a rejected item is counted, not "
        "scored. <code>vlrollout eval</code> on a saved checkpoint reproduces an evaluation "
        "(docs/training.md)."
    )


def _held_out_chart(evals: list[dict[str, Any]], eval_keys: list[str]) -> str:
    """The held-out curves beside their lr = 0 controls: every metric of the mean-reward
    evaluation, or with a task its primary metric, named (the table lists the others)."""
    timing = "eval/: greedy; eval_sampled/: at the training temperature"
    if not evals or evals[-1].get(PRIMARY_KEY) is None:
        series = {**{k: _series(k, evals) for k in eval_keys}, **lr0_control(evals)}
        return line_chart(f"held-out metric ({timing})", series)
    name = evals[-1][PRIMARY_KEY]
    keys = [f"{p}/{name}" for p in EVAL_PREFIXES if f"{p}/{name}" in eval_keys]
    control = lr0_control(evals).get(f"eval/{name}{CONTROL}")
    series = {k: _series(k, evals) for k in keys}
    if control:
        series[f"eval/{name}{CONTROL}"] = control
    return line_chart(f"held-out {held_out_metric(evals)} ({timing})", series)


def _rejected(record: dict[str, Any], prefix: str) -> str:
    """``"2 of 8"``: rejected episodes of an evaluation, and all its episodes."""
    n = record.get(f"{prefix}/n")
    return "" if n is None else f"{record.get(f'{prefix}/rejected', 0)} of {n}"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else html.escape(str(v))
