"""Drawing shared by the HTML reports (``vlrollout run`` and ``vlrollout eval``): thumbnails with
ground-truth and predicted boxes, one colour per episode, images as data URLs, the page style.

Boxes are judged by the grounding reward's own rules (:func:`~vlrollout.rewards.grounding.label_boxes`,
:func:`~vlrollout.rewards.grounding.box_problem`), so a box is drawn exactly when the reward would
score it; anything refused is returned with its reason for the page to list.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image, ImageDraw

from vlrollout.geometry import Frame, convert_boxes
from vlrollout.processors.messages import paired_image_sources, part_source
from vlrollout.rewards.combine import ByTask, WeightedSum
from vlrollout.rewards.grounding import GroundingReward, box_problem

THUMB = 224
GT_COLOUR = (255, 0, 255)  # magenta
#: One colour per episode (a colour-blind-safe palette, none of them magenta), cycling.
EPISODE_COLOURS = [
    (0, 114, 178),
    (230, 159, 0),
    (0, 158, 115),
    (213, 94, 0),
    (86, 180, 233),
    (240, 228, 66),
    (0, 0, 0),
    (150, 150, 150),
]

Box = tuple[float, float, float, float]


def episode_colour(index: int) -> tuple[int, int, int]:
    return EPISODE_COLOURS[index % len(EPISODE_COLOURS)]


def hex_colour(colour: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*colour)


@dataclass(frozen=True)
class ReportImage:
    """An image as a report shows it: a thumbnail at most :data:`THUMB` a side, and the size of
    the image it was made from (the coordinates boxes are in)."""

    thumb: Image.Image
    size: tuple[int, int]


def report_image(image: Image.Image) -> ReportImage:
    """``image``'s thumbnail and size."""
    image = image.convert("RGB")
    scale = THUMB / max(image.size)
    thumb = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    return ReportImage(thumb, image.size)


def load_report_image(image: Any) -> tuple[ReportImage | None, str]:
    """The image as the report shows it, or ``None`` and why not (the report says so instead of
    failing). The full-size image is dropped once its thumbnail is made, so a report holds one
    at a time, however many images an item has."""
    from vlrollout.processors.image_loading import load_image

    try:
        loaded = load_image(image).image
    except Exception as e:  # noqa: BLE001 - shown in the report instead of the image
        return None, str(e)
    return report_image(loaded), ""


def label_boxes(value: Any) -> tuple[list[Box], list[str]]:
    """Ground-truth boxes (one box or a list of boxes) and a note for each entry the reward refuses.

    Entries are read one by one with the grounding reward's
    :func:`~vlrollout.rewards.grounding.label_boxes`, so a box is drawn exactly when the reward
    accepts it; a refused one (not 4 numbers, not finite, reversed corners) is not drawn and its
    note carries the reward's own message. The reward refuses the whole field for one such entry;
    the report still draws the others, for looking.
    """
    from vlrollout.rewards.grounding import label_boxes as reward_label_boxes

    if value is None or value == []:
        return [], []
    rows = value if isinstance(value, list) and isinstance(value[0], list | tuple) else [value]
    good, bad = [], []
    for row in rows:
        try:
            good += reward_label_boxes(row)
        except ValueError as e:
            bad.append(f"label box {json.dumps(row, default=str)[:80]} refused: {e}")
    return good, bad


def grounding_reward(reward: Any, item: dict[str, Any]) -> Any:
    """The :class:`~vlrollout.rewards.grounding.GroundingReward` that scores ``item`` under
    ``reward``: the reward itself, the route of the item's task in a
    :class:`~vlrollout.rewards.combine.ByTask`, or the first one among a
    :class:`~vlrollout.rewards.combine.WeightedSum`'s terms; ``None`` if there is none."""
    if isinstance(reward, GroundingReward):
        return reward
    if isinstance(reward, ByTask):
        route = reward.rewards.get(item.get(reward.key))
        return None if route is None else grounding_reward(route, item)
    if isinstance(reward, WeightedSum):
        for term, _ in reward.terms:
            found = grounding_reward(term, item)
            if found is not None:
                return found
    return None


def predicted_boxes(grounding: Any, completion: str, geometry: Any) -> tuple[list[Box], list[str]]:
    """The boxes of ``completion`` in the image's original pixels, read the way ``grounding``
    reads them (its parser, frame and answer region, converted through ``geometry``), and what
    could not be read or was refused.

    A box the reward's :func:`~vlrollout.rewards.grounding.box_problem` refuses (judged in the
    frame it was written in, as the reward does) is not among the boxes but listed with the
    reason.
    """
    parsed = grounding.parse(completion)
    boxes, problems = [], list(parsed.issues)
    for box in parsed.boxes:
        problem = box_problem(box)
        if problem is None:
            boxes.append(convert_boxes([box], parsed.frame, Frame.ORIGINAL, geometry)[0])
        else:
            problems.append(f"box {[float(v) for v in box]}: {problem}")
    return boxes, problems


def png_data_url(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def draw_boxes(
    image: ReportImage, gt: Sequence[Box], preds: Sequence[tuple[int, Sequence[Box]]]
) -> str:
    """The thumbnail with ground-truth boxes and each episode's numbered boxes, as a data URL."""
    shown = image.thumb.copy()
    scale = THUMB / max(image.size)
    draw = ImageDraw.Draw(shown)
    for b in gt:
        draw.rectangle([v * scale for v in b], outline=GT_COLOUR, width=2)
    for episode, boxes in preds:
        colour = episode_colour(episode)
        for b in boxes:
            x1, y1, x2, y2 = (v * scale for v in b)
            draw.rectangle([x1, y1, x2, y2], outline=colour, width=2)
            draw.text((x1 + 2, y1 + 1), str(episode), fill=colour)
    return png_data_url(shown)


def prompt_sources(item: dict[str, Any]) -> list[Any]:
    """Every prompt image source of an item in prompt order, as the preprocessor pairs them
    (so image ``k`` is the one ``geometry[k]`` describes); for an item whose messages do not
    pair up, ``images`` and then those inside messages."""
    paired = paired_image_sources(item)
    if paired is not None:
        return paired
    messages = item.get("messages")
    sources = list(item["images"]) if isinstance(item.get("images"), list) else []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "image_url":
                url = part.get("image_url")
                sources.append(url.get("url") if isinstance(url, dict) else url)
            elif part.get("type", "image") == "image":
                sources.append(part_source(part, "image"))
    return [s for s in sources if s is not None]


STYLE = """
body{font-family:sans-serif;margin:2em;max-width:1100px}
.item{display:flex;gap:1.5em;align-items:flex-start}
img{border:1px solid #ccc;image-rendering:pixelated;width:224px}
img.strip{width:auto;max-width:560px}
figure{margin:0 0 .5em 0}figcaption{font-size:small;color:#555}
pre{margin:0;white-space:pre-wrap}
table{border-collapse:collapse}td,th{border-bottom:1px solid #eee;padding:2px 8px;vertical-align:top}
.r{text-align:right}.rej{color:#b00}
.sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em}
.hist{vertical-align:middle}
"""
