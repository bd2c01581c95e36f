"""The run report and the training report draw their charts with one module
(:mod:`vlrollout.charts`): inline SVG with the same frame, font and palette."""

from __future__ import annotations

import re

from vlrollout.files import atomic_write_json, item_stem
from vlrollout.jsonl import append_jsonl
from vlrollout.run.report import write_report as write_run_report
from vlrollout.run.runner import summarize
from vlrollout.train.report import write_report as write_train_report

SVG = re.compile(r"<svg [^>]*>")


def _run_page(out) -> str:
    items = [{"id": "a", "task": "count", "messages": "x"}, {"id": "b", "task": "ground"}]
    for item_id, rewards in (("a", [1.0, 0.0]), ("b", [0.25, 0.5])):
        atomic_write_json(
            out / "items" / f"{item_stem(item_id)}.json",
            {
                "id": item_id,
                "status": "accepted",
                "episodes": [{"reward": r, "turns": ["1"]} for r in rewards],
                "rejections": [],
                "generated_tokens": 1,
            },
        )
    return write_run_report(out, items, summarize(out, items, 0.0)).read_text()


def _train_page(out) -> str:
    out.mkdir()
    for step in (1, 2):
        append_jsonl(out / "metrics.jsonl", {"step": step, "reward_mean": 0.1 * step})
    return write_train_report(out).read_text()


def _frame(tag: str) -> str:
    """An ``<svg>`` tag without its size and class: what every chart shares."""
    return re.sub(r' (width|height|class)="[^"]*"', "", tag)


def test_both_reports_draw_svg_charts_alike(tmp_path):
    run_charts = SVG.findall(_run_page(tmp_path / "run"))
    train_charts = SVG.findall(_train_page(tmp_path / "train"))
    assert len(run_charts) == 2  # a reward histogram per task
    assert train_charts
    assert {_frame(t) for t in run_charts} == {_frame(t) for t in train_charts}
