"""The visual report of a run: one self-contained HTML page.

Each of the first :data:`PICTURED` finished items shows every prompt image (from ``images`` and
from inside the messages), the images tools added during an episode (labelled, as the model saw
them), the ground-truth boxes (magenta) on the first image, and every episode's predicted boxes in
that episode's own colour and number, converted from the model's frame to the image's pixels. The
completions table repeats the colour and number; each rejection reason is listed once per item
with its count. A video shows as a strip of small thumbnails of the frames the model saw. Images
are embedded as data URLs so the page can be mailed or attached to an issue. Later items are one
table row each.

Nothing an item, a model output or a reward holds can stop the page from being written: boxes the
grounding reward refuses (reversed corners, non-finite or malformed numbers) are listed with the
reward's reason instead of drawn, boxes that cannot be read are listed, and an item that cannot be
drawn at all gets a line saying why.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from vlrollout.files import atomic_write_bytes, item_stem, read_outcomes
from vlrollout.frame_strip import strip_image
from vlrollout.geometry import ImageGeometry
from vlrollout.logs import get_logger
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.video_loading import peek_video
from vlrollout.report_drawing import (
    STYLE,
    Box,
    draw_boxes,
    episode_colour,
    grounding_reward,
    hex_colour,
    label_boxes,
    load_report_image,
    png_data_url,
    predicted_boxes,
    prompt_sources,
    report_image,
)
from vlrollout.run.report_summary import overview_html

logger = get_logger("vlrollout.run")

PICTURED = 300
"""Finished items drawn with their images and completions, in data order; the others are rows of
a table (as in ``vlrollout eval``'s report), so a run of many thousands of items still gives a
page a browser opens, written in seconds."""
STRIP_HEIGHT = 56
"""Height of a video's frame thumbnails in the report."""
STRIP_FRAMES = 8
"""Most frames of one video shown in its strip."""


def _prompt_text(item: dict[str, Any]) -> str:
    messages = item.get("messages")
    if isinstance(messages, str):
        return messages
    parts = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict)]
            parts += [p for p in content if isinstance(p, str)]
    return " ".join(str(p) for p in parts if p)


def seen_by_model(
    trajectory_path: Path, processor: Any, n_prompt_images: int
) -> tuple[list[Image.Image], list[list[Image.Image]]]:
    """``(tool images, video frames)`` as the model saw them, from the saved trajectory: the
    images added after the prompt's (tool results), and each prompt video's sampled frames;
    empty when there are none or the family's tensors cannot be turned back."""
    if processor is None or not trajectory_path.exists():
        return [], []
    import torch

    from vlrollout.run.report_images import images_seen_by_model, videos_seen_by_model

    traj = torch.load(trajectory_path, weights_only=False)
    mm = traj.get("multi_modal_input")
    if not mm:
        return [], []
    return images_seen_by_model(mm[0], processor)[n_prompt_images:], videos_seen_by_model(
        mm[0], processor
    )


def sampled_thumbnails(item: dict[str, Any], sampling: Any) -> list[list[Image.Image] | str]:
    """Each of the item's ``videos`` as the preprocessor samples it (``sampling``: its
    :class:`~vlrollout.processors.video_sampling.VideoSampling`), as thumbnails of the source
    frames, or why it cannot be shown: the strip of families whose tensors are not turned back."""
    shown: list[list[Image.Image] | str] = []
    videos = item.get("videos") if isinstance(item.get("videos"), list) else []
    for k, source in enumerate(videos, 1):
        try:
            shown.append(peek_video(source, f"video {k}", sampling).thumbnails())
        except PreprocessError as e:
            shown.append(f"{e.reason}: {e.detail}")
    return shown


def frame_strip(frames: Sequence[Image.Image], height: int = STRIP_HEIGHT) -> str:
    """A data URL of one picture: up to :data:`STRIP_FRAMES` of ``frames`` side by side, each
    ``height`` pixels high (:func:`vlrollout.frame_strip.strip_image`)."""
    return png_data_url(strip_image(frames, height, STRIP_FRAMES))


def _figure(src: str, caption: str) -> str:
    return f"<figure><img src='{src}'><figcaption>{html.escape(caption)}</figcaption></figure>"


def render_item(
    item: dict[str, Any],
    outcome: dict[str, Any],
    read_boxes: BoxReader | None,
    extra_images: Sequence[Image.Image] = (),
    videos: Sequence[Sequence[Image.Image] | str] = (),
    as_seen: bool = True,
) -> str:
    """One item's section: images with boxes (``read_boxes``: the image they are on and how a
    completion's boxes are read; ``None`` draws none), each video's strip of sampled frames
    (``videos``: the frames the model saw, or with ``as_seen=False`` thumbnails of the sampled
    source frames; a string says why a video is not shown), prompt, expected answer,
    completions, rejections."""
    images = [load_report_image(s) for s in prompt_sources(item)]
    boxed = read_boxes.image_index if read_boxes is not None else 0
    gt, notes = label_boxes(item.get("boxes"))
    rows, preds = [], []
    for i, episode in enumerate(outcome.get("episodes", [])):
        turns = [str(t) for t in episode.get("turns", [])]
        problems: list[str] = []
        if read_boxes is not None and turns and boxed < len(images) and images[boxed][0]:
            boxes, problems = read_boxes.read(turns[-1], images[boxed][0].size)
            preds.append((i, boxes))
        swatch = f"<span class=sw style='background:{hex_colour(episode_colour(i))}'></span>"
        unread = (
            f"<div class=rej>boxes not drawn: {html.escape('; '.join(problems))}</div>"
            if problems
            else ""
        )
        text = "\n---\n".join(turns)
        reward = episode.get("reward")
        shown = f"{reward:.3f}" if isinstance(reward, int | float) else html.escape(str(reward))
        rows.append(
            f"<tr><td>{swatch}{i}</td><td><pre>{html.escape(text)}</pre>{unread}</td>"
            f"<td class=r>{shown}</td></tr>"
        )
    counts = Counter(
        (str(r.get("reason", "?")), str(r.get("detail", ""))) for r in outcome.get("rejections", [])
    )
    for (reason, detail), n in counts.items():
        rows.append(
            f"<tr class=rej><td>✗</td><td>{html.escape(reason)}: {html.escape(detail)}</td>"
            f"<td class=r>×{n}</td></tr>"
        )
    pictures = []
    for k, (image, why) in enumerate(images):
        caption = f"image {k + 1}" if len(images) > 1 else "image"
        if image is None:
            pictures.append(f"<p><i>{caption} unavailable: {html.escape(why[:200])}</i></p>")
        elif k == boxed:
            pictures.append(_figure(draw_boxes(image, gt, preds), caption))
        else:
            pictures.append(_figure(draw_boxes(image, [], []), caption))
    for k, frames in enumerate(videos, 1):
        if isinstance(frames, str):
            pictures.append(f"<p><i>video {k} unavailable: {html.escape(frames[:200])}</i></p>")
            continue
        seen = "as the model saw them" if as_seen else "sampled from the source"
        caption = f"video {k}: {len(frames)} frames ({seen})"
        pictures.append(
            f"<figure><img class=strip src='{frame_strip(frames)}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    if not images and not videos:
        pictures.append("<i>no image</i>")
    for k, extra in enumerate(extra_images, 1):
        shown = draw_boxes(report_image(extra), [], [])
        pictures.append(_figure(shown, f"tool image {k} (as the model saw it)"))
    answer = item.get("answer", item.get("captions", item.get("boxes", "")))
    note = "".join(f"<p class=rej>{html.escape(n)}</p>" for n in notes)
    return (
        f"<section><h3>{html.escape(str(item['id']))} "
        f"<small>{html.escape(str(item.get('task', '')))}</small></h3>"
        f"<div class=item><div>{''.join(pictures)}</div>"
        f"<div><p><b>prompt</b> {html.escape(_prompt_text(item))}</p>"
        f"<p><b>expected</b> {html.escape(json.dumps(answer, default=str))}</p>{note}"
        f"<table><tr><th>#</th><th>completion</th><th>reward</th></tr>{''.join(rows)}</table>"
        "</div></div></section>"
    )


@dataclass
class BoxReader:
    """How the report reads an item's predicted boxes: as its grounding reward does, on the image
    the reward reads (``image_index``), through the geometry the item is prepared with
    (``prepare``; without it the model is taken to have seen the original size)."""

    grounding: Any
    item: dict[str, Any]
    prepare: Callable[[dict[str, Any]], Any] | None
    _geometry: Any = None

    @property
    def image_index(self) -> int:
        return self.grounding.image_index

    def read(self, completion: str, size: tuple[int, int]) -> tuple[list[Box], list[str]]:
        """The boxes of ``completion`` on the image of ``size`` (as loaded), and why any was
        not read."""
        if self._geometry is None:
            width, height = size
            self._geometry = (
                self.prepare(self.item).geometry[self.image_index]
                if self.prepare is not None
                else ImageGeometry(width, height, width, height)
            )
        return predicted_boxes(self.grounding, completion, self._geometry)


def _box_reader(item: dict[str, Any], reward: Any, prepare: Any) -> BoxReader | None:
    grounding = grounding_reward(reward, item) if reward is not None else None
    return None if grounding is None else BoxReader(grounding, item, prepare)


def _section(
    output: Path,
    item: dict[str, Any],
    outcome: dict[str, Any],
    boxes: BoxReader | None,
    processor: Any,
    video_sampling: Any = None,
) -> str:
    try:
        n_prompt = len(prompt_sources(item))
        extra, videos = seen_by_model(
            output / "trajectories" / f"{item_stem(item['id'])}.pt", processor, n_prompt
        )
        if videos or video_sampling is None or not item.get("videos"):
            return render_item(item, outcome, boxes, extra, videos)
        sampled = sampled_thumbnails(item, video_sampling)
        return render_item(item, outcome, boxes, extra, sampled, as_seen=False)
    except Exception as e:  # noqa: BLE001 - one item must not cost the whole report
        logger.warning("report: cannot draw item %s", item.get("id"), exc_info=True)
        return (
            f"<section><h3>{html.escape(str(item.get('id')))}</h3>"
            f"<p class=rej>could not draw this item: {html.escape(type(e).__name__)}: "
            f"{html.escape(str(e)[:300])}</p></section>"
        )


def _rewards(outcome: dict[str, Any]) -> list[float]:
    """The rewards of an item's accepted episodes."""
    found = (e.get("reward") for e in outcome.get("episodes", []))
    return [float(r) for r in found if isinstance(r, int | float)]


def _row(item: dict[str, Any], outcome: dict[str, Any], rewards: list[float]) -> str:
    """One item beyond the pictured ones: id, task, accepted episodes of the group, their mean
    reward and each rejection reason with its count."""
    accepted = len(outcome.get("episodes", []))
    reasons = Counter(str(r.get("reason", "?")) for r in outcome.get("rejections", []))
    shown = ", ".join(f"{reason} ×{n}" for reason, n in reasons.items())
    mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
    return (
        f"<tr><td>{html.escape(str(item['id']))}</td>"
        f"<td>{html.escape(str(item.get('task', '')))}</td>"
        f"<td>{accepted} of {accepted + sum(reasons.values())}</td><td>{mean}</td>"
        f"<td class=rej>{html.escape(shown)}</td></tr>"
    )


def _rows_table(rows: list[str]) -> str:
    if not rows:
        return ""
    return (
        f"<h2>{len(rows)} more items, without pictures</h2><table><tr><th>item</th><th>task</th>"
        f"<th>episodes accepted</th><th>mean reward</th><th>rejections</th></tr>"
        f"{''.join(rows)}</table>"
    )


def write_report(
    output: Path,
    items: Sequence[dict[str, Any]],
    summary: dict[str, Any],
    reward: Any = None,
    prepare: Callable[[dict[str, Any]], Any] | None = None,
    processor: Any = None,
    video_sampling: Any = None,
    pictured: int = PICTURED,
) -> Path:
    """Write ``output/report.html`` for every finished item, the first ``pictured`` drawn and
    the others as rows (id, task, episodes accepted, mean reward, rejections); returns its path.

    Predicted boxes are drawn where the run's ``reward`` has a grounding reward for the item
    (:func:`~vlrollout.report_drawing.grounding_reward`), read as it reads them, converted with
    the geometry of the item as ``prepare`` prepares it (the workflow's preprocessor).

    With ``processor`` (Qwen-VL families), images that tools added during an episode are shown
    too, reconstructed from the saved trajectory's ``pixel_values``, and each video as a strip of
    the frames the model saw (``pixel_values_videos``); for other families, with
    ``video_sampling`` (the preprocessor's), thumbnails of the source frames it samples.
    """
    outcomes = read_outcomes(output)
    sections, rows, by_task = [], [], {}
    for item in items:
        outcome = outcomes.get(item["id"])
        if outcome is None:
            continue
        rewards = _rewards(outcome)
        by_task.setdefault(str(item.get("task", "all")), []).extend(rewards)
        if len(sections) == pictured:
            rows.append(_row(item, outcome, rewards))
            continue
        boxes = _box_reader(item, reward, prepare)
        sections.append(_section(output, item, outcome, boxes, processor, video_sampling))
    legend = "".join(
        f"<span style='color:{hex_colour(episode_colour(i))}'>■ {i}</span> " for i in range(4)
    )
    page = (
        f"<!doctype html><meta charset=utf-8><title>vlrollout report</title><style>{STYLE}</style>"
        f"<h1>vlrollout run</h1>{overview_html(summary, by_task)}"
        "<p><span style='color:#f0f'>■ ground truth</span> · predicted, by episode: "
        f"{legend}…</p>{''.join(sections)}{_rows_table(rows)}"
    )
    report = output / "report.html"
    atomic_write_bytes(report, page.encode())
    return report
