"""The visual report of an evaluation: one self-contained HTML page, worst items first.

At the top the metric table (overall and per split) and the rejected items by reason. Then one
section per scored item, ordered by the task's primary metric (lowest first, so what went wrong is
what one sees first; ties, as every failure of a 0-or-1 metric, by the mean of the item's other
values): the first image with the true boxes (magenta) and each completion's
predicted boxes in its own colour and number (both in the original image's pixels, as the task
scored them), the prediction next to the truth (boxes, reference captions or answer), the
completions as the model wrote them and the item's scores. Then every rejected item with its
reason. Images are embedded as data URLs so the page can be mailed or attached to an issue.

Nothing an item holds can stop the page from being written: an item that cannot be drawn gets a
line saying why.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vlrollout.eval.runner import EvalResult
from vlrollout.eval.tasks import ItemScore
from vlrollout.files import atomic_write_bytes
from vlrollout.logs import get_logger
from vlrollout.report_drawing import (
    STYLE,
    draw_boxes,
    episode_colour,
    hex_colour,
    load_report_image,
    prompt_sources,
)

logger = get_logger("vlrollout.eval")

REPORT_FILE = "report.html"
PICTURED = 300
"""Items drawn with their image (the lowest first); the rest are rows of a table, so a
5000-item evaluation still gives a page a browser opens."""
TRUTH_FIELDS = ("boxes", "captions", "answer", "choices")
"""Item fields shown as the truth a prediction is scored against."""


def ranking_metric(
    scores: Sequence[ItemScore], primary: str, correct_key: str | None
) -> str | None:
    """The per-item value items are ranked by: the primary metric when items carry it (a corpus
    metric such as CIDEr-D does not), else the ``correct_key``, else the first value."""
    for name in (primary, correct_key):
        if name is not None and scores and all(name in s.values for s in scores):
            return name
    return next((name for s in scores for name in s.values), None)


def rank_key(score: ItemScore, rank: str | None) -> tuple[float, float]:
    """Sort key of an item, lowest first: its ``rank`` value, then the mean of its other finite
    values. A 0-or-1 headline (ACC@0.5, exact_match) ties every failed item; the other values
    (IoU, the looser thresholds) then put the item with no box before the near miss.

    >>> near = ItemScore("a", "val", {"ACC@0.5": 0.0, "IoU": 0.4}, {})
    >>> none = ItemScore("b", "val", {"ACC@0.5": 0.0, "IoU": 0.0}, {})
    >>> rank_key(none, "ACC@0.5") < rank_key(near, "ACC@0.5")
    True
    """
    others = [
        v
        for name, v in score.values.items()
        if name != rank and isinstance(v, int | float) and math.isfinite(v)
    ]
    first = score.values.get(rank, math.inf) if rank is not None else math.inf
    return first, sum(others) / len(others) if others else math.inf


def _fmt(value: Any) -> str:
    if isinstance(value, int | float) and math.isfinite(value):
        return f"{value:.3f}"
    return html.escape(str(value))


def metric_table(result: EvalResult) -> str:
    """The metrics overall and per split, with their 95% intervals, as an HTML table."""
    columns = [("all items", len(result.scores), result.metrics)]
    if len(result.per_split) > 1:
        columns += [(s, v["items"], v["metrics"]) for s, v in result.per_split.items()]
    head = "".join(f"<th>{html.escape(t)} ({n})</th>" for t, n, _ in columns)
    rows = []
    for name in result.metrics:
        cells = []
        for _, _, metrics in columns:
            entry = metrics.get(name, {})
            ci = entry.get("ci95")
            interval = f" <small>[{_fmt(ci[0])}, {_fmt(ci[1])}]</small>" if ci else ""
            cells.append(f"<td class=r>{_fmt(entry.get('value'))}{interval}</td>")
        strong = f"<b>{html.escape(name)}</b>" if name == result.primary else html.escape(name)
        rows.append(f"<tr><td>{strong}</td>{''.join(cells)}</tr>")
    return f"<table><tr><th>metric</th>{head}</tr>{''.join(rows)}</table>"


def _picture(item: Mapping[str, Any], score: ItemScore) -> str:
    sources = prompt_sources(dict(item))
    if not sources:
        return "<i>no image</i>"
    image, why = load_report_image(sources[0])
    if image is None:
        return f"<p class=rej>image unavailable: {html.escape(why[:200])}</p>"
    samples = score.details.get("samples") or [score]
    truth = [tuple(b) for b in score.details.get("true_boxes") or []]
    preds = [
        (j, [tuple(b) for b in s.details.get("pred_boxes") or []]) for j, s in enumerate(samples)
    ]
    drawn = truth or any(boxes for _, boxes in preds)
    caption = "true boxes magenta, predicted by completion number" if drawn else "image"
    return (
        f"<figure><img src='{draw_boxes(image, truth, preds)}'>"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def prompt_text(item: Mapping[str, Any]) -> str:
    """The text of the item's messages (what the model was asked), images left out."""
    messages = item.get("messages")
    if isinstance(messages, str):
        return messages
    parts: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        for part in content if isinstance(content, list) else []:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    return " ".join(parts)


def _truth(item: Mapping[str, Any]) -> str:
    shown = {k: item[k] for k in TRUTH_FIELDS if k in item}
    return "".join(
        f"<p><b>true {html.escape(k)}</b> {html.escape(json.dumps(v, default=str))}</p>"
        for k, v in shown.items()
    )


def render_scored(
    item: Mapping[str, Any], score: ItemScore, completions: Sequence[str], primary: str
) -> str:
    """One scored item's section."""
    samples = score.details.get("samples") or [score]
    rows = []
    for j, sample in enumerate(samples):
        text = completions[j] if j < len(completions) else ""
        swatch = f"<span class=sw style='background:{hex_colour(episode_colour(j))}'></span>"
        predicted = sample.details.get("prediction")
        reason = sample.details.get("reason")
        note = f"<div class=rej>{html.escape(str(reason))}</div>" if reason else ""
        values = ", ".join(f"{k} {_fmt(v)}" for k, v in sample.values.items())
        rows.append(
            f"<tr><td>{swatch}{j}</td><td><pre>{html.escape(text)}</pre>{note}</td>"
            f"<td>{html.escape(json.dumps(predicted, default=str))}</td>"
            f"<td>{html.escape(values)}</td></tr>"
        )
    headline = ", ".join(
        f"<b>{html.escape(k)} {_fmt(v)}</b>" if k == primary else f"{html.escape(k)} {_fmt(v)}"
        for k, v in score.values.items()
    )
    return (
        f"<section><h3>{html.escape(str(item['id']))} <small>{html.escape(score.split)}</small>"
        f"</h3><p>{headline}</p><div class=item><div>{_picture(item, score)}</div>"
        f"<div><p><b>prompt</b> {html.escape(prompt_text(item))}</p>{_truth(item)}<table><tr><th>#</th><th>completion</th><th>prediction</th>"
        f"<th>score</th></tr>{''.join(rows)}</table></div></div></section>"
    )


def _safe_section(item: Mapping[str, Any], score: ItemScore, result: EvalResult) -> str:
    prediction = result.predictions.get(score.id)
    completions = prediction.completions if prediction is not None else []
    try:
        return render_scored(item, score, completions, result.primary)
    except Exception as e:  # noqa: BLE001 - one item must not cost the whole report
        logger.warning("report: cannot draw item %s", score.id, exc_info=True)
        return (
            f"<section><h3>{html.escape(score.id)}</h3><p class=rej>could not draw this item: "
            f"{html.escape(type(e).__name__)}: {html.escape(str(e)[:300])}</p></section>"
        )


def rejected_table(rejections: Sequence[Mapping[str, str]]) -> str:
    """Every item that was not scored, with its reason and detail."""
    if not rejections:
        return ""
    rows = "".join(
        f"<tr class=rej><td>{html.escape(str(r.get('id')))}</td>"
        f"<td>{html.escape(str(r.get('reason')))}</td>"
        f"<td>{html.escape(str(r.get('detail', '')))}</td></tr>"
        for r in rejections
    )
    return (
        f"<h2>Rejected items ({len(rejections)})</h2>"
        f"<table><tr><th>item</th><th>reason</th><th>detail</th></tr>{rows}</table>"
    )


def rest_table(scores: Sequence[ItemScore]) -> str:
    """Items beyond :data:`PICTURED`, one row each: id, split, values, prediction."""
    if not scores:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(s.id)}</td><td>{html.escape(s.split)}</td>"
        f"<td>{html.escape(', '.join(f'{k} {_fmt(v)}' for k, v in s.values.items()))}</td>"
        f"<td>{html.escape(json.dumps(s.details.get('prediction'), default=str))}</td></tr>"
        for s in scores
    )
    return (
        f"<h2>{len(scores)} more items, without pictures</h2><table><tr><th>item</th>"
        f"<th>split</th><th>score</th><th>prediction</th></tr>{rows}</table>"
    )


def write_report(
    output: Path,
    result: EvalResult,
    items: Sequence[Mapping[str, Any]],
    correct_key: str | None = None,
    title: str = "",
    pictured: int = PICTURED,
) -> Path:
    """Write ``output/report.html`` (see the module docstring); returns its path.

    The ``pictured`` lowest items get a section with their image; the others a row each."""
    by_id = {str(item.get("id")): item for item in items}
    rank = ranking_metric(result.scores, result.primary, correct_key)
    known = [s for s in result.scores if s.id in by_id]
    ordered = sorted(known, key=lambda s: rank_key(s, rank))
    sections = [_safe_section(by_id[s.id], s, result) for s in ordered[:pictured]]
    sections.append(rest_table(ordered[pictured:]))
    rejected = ", ".join(f"{html.escape(r)} {n}" for r, n in result.rejected.items())
    page = (
        f"<!doctype html><meta charset=utf-8><title>vlrollout eval</title><style>{STYLE}</style>"
        f"<h1>vlrollout eval: {html.escape(result.task)}</h1><p>{html.escape(title)}</p>"
        f"<p>{len(result.scores)} items scored"
        + (f", k={result.k}" if result.k > 1 else "")
        + (f"; rejected: {rejected}" if rejected else "")
        + f"</p>{metric_table(result)}"
        f"<h2>Items, lowest {html.escape(str(rank))} first</h2>{''.join(sections)}"
        f"{rejected_table(result.rejections)}"
    )
    path = output / REPORT_FILE
    atomic_write_bytes(path, page.encode())
    return path
