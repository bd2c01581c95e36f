"""A few held-out rollouts of each evaluation, for people to look at.

The evaluation's means say how well the policy does; these say what it does: per shown rollout the
item's image, the completion, the reward and, for grounding items, the true boxes (green) and the
predicted ones (red) drawn on the image in original pixels. The boxes are read with the grounding
reward that scored the item (its parser, label field and frames, :mod:`vlrollout.rewards`) and
converted with the geometry the preprocessor recorded (:mod:`vlrollout.geometry`), so a drawn box
is the box the reward compared.

Files under the run's output: ``eval_rollouts.jsonl`` (one record per shown rollout, see
:meth:`HeldOutRollout.to_record`) and ``eval_rollouts/step_N/K.png`` (the drawn images). The
training report embeds them (:func:`section_html`); :mod:`vlrollout.train.loggers` sends them to
TensorBoard, W&B and SwanLab.
"""

from __future__ import annotations

import asyncio
import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from vlrollout.frame_strip import strip_image
from vlrollout.geometry import Box, Frame, convert_boxes
from vlrollout.jsonl import append_jsonl, read_jsonl
from vlrollout.processors.image_loading import load_image
from vlrollout.report_drawing import grounding_reward, predicted_boxes
from vlrollout.rewards.grounding import box_problem, label_boxes

ROLLOUTS_FILE = "eval_rollouts.jsonl"
IMAGES_DIR = "eval_rollouts"
TRUE_COLOUR = (0, 170, 0)
PREDICTED_COLOUR = (220, 0, 0)
STRIP_FRAMES = 8
"""Most frames of a held-out video shown in its strip."""

Episode = tuple[dict[str, Any], dict[str, Any] | None]
"""A held-out item and its trajectory (``None``: the episode was rejected)."""


@dataclass
class HeldOutRollout:
    """One shown rollout of a held-out evaluation.

    Attributes:
        step: Training steps completed when it was rolled out (``eval.jsonl``'s ``step``).
        index: Position among the evaluation's shown rollouts (the same item at every evaluation).
        item_id: The item's ``id``.
        task: The item's ``task`` field, if it has one.
        completion: The generated text as the reward read it; ``None`` when the episode was
            rejected (it scored 0; the reason is in the log).
        reward: The reward of the episode (0 for a rejected one, as in the evaluation's mean).
        true_boxes, predicted_boxes: Boxes in the image's original pixels (empty unless a
            grounding reward scored the item).
        box_problems: Predicted boxes left out of ``predicted_boxes`` and why, by the grounding
            reward's rule (:func:`~vlrollout.rewards.grounding.box_problem`: non-finite or
            reversed corners), plus what its parser could not read.
        image: The item's image with the boxes drawn, ``None`` for a text item or a rejected
            episode.
    """

    step: int
    index: int
    item_id: str
    task: str | None
    completion: str | None
    reward: float
    true_boxes: list[Box] = field(default_factory=list)
    predicted_boxes: list[Box] = field(default_factory=list)
    box_problems: list[str] = field(default_factory=list)
    image: Image.Image | None = field(default=None, repr=False, compare=False)

    @property
    def title(self) -> str:
        """``"item ground-200-0 (ground): reward 0.412"``."""
        task = f" ({self.task})" if self.task else ""
        return f"item {self.item_id}{task}: reward {self.reward:.3f}"

    def markdown(self) -> str:
        """The rollout as Markdown (TensorBoard renders text summaries as Markdown)."""
        lines = [f"**{self.title}**", ""]
        if self.completion is None:
            lines.append("rejected: no completion (scored 0; the reason is in the log)")
        else:
            lines += ["completion:", "", *(f"    {line}" for line in self.completion.split("\n"))]
        if self.true_boxes or self.predicted_boxes:
            lines += ["", f"true boxes (green): {_boxes_text(self.true_boxes)}"]
            lines += [f"predicted boxes (red): {_boxes_text(self.predicted_boxes)}"]
        lines += [f"not drawn: {problem}" for problem in self.box_problems]
        return "\n".join(lines)

    def to_record(self, image_path: str | None) -> dict[str, Any]:
        """The ``eval_rollouts.jsonl`` record; ``image_path`` is relative to the output folder."""
        return {
            "step": self.step,
            "index": self.index,
            "id": self.item_id,
            "task": self.task,
            "completion": self.completion,
            "reward": self.reward,
            "true_boxes": [list(b) for b in self.true_boxes],
            "predicted_boxes": [list(b) for b in self.predicted_boxes],
            "box_problems": self.box_problems,
            "image": image_path,
        }


def collect(
    step: int, episodes: Sequence[Episode], workflow: Any, reward: Any, count: int
) -> list[HeldOutRollout]:
    """The first ``count`` episodes of an evaluation as :class:`HeldOutRollout` (item order is the
    held-out set's, so every evaluation shows the same items). An item with images shows its
    (grounding) image with the boxes drawn; a video item, its first video's sampled frames.

    Args:
        step: Training steps completed.
        episodes: ``(item, trajectory or None)`` in the evaluation's order.
        workflow: The single-turn workflow that rolled them out: its ``ctx`` decodes the
            completion as the reward read it and prepares the item again for its image geometry.
        reward: The evaluation's reward (a grounding reward is looked for inside it, see
            :func:`grounding_reward`).
        count: How many to show.
    """
    out = []
    for index, (item, traj) in enumerate(episodes[:count]):
        shown = HeldOutRollout(step, index, str(item.get("id", index)), item.get("task"), None, 0.0)
        out.append(shown)
        if traj is None:
            continue
        generated = traj["input_ids"][0][traj["loss_mask"][0].bool()].tolist()
        shown.completion = workflow.ctx.decode_completion(generated)
        shown.reward = float(traj["rewards"].flatten()[0])
        images = item.get("images") or []
        if not images:
            shown.image = _video_strip(workflow, item)
            continue
        grounding = grounding_reward(reward, item)
        which = grounding.image_index if grounding is not None else 0
        image = load_image(images[which], f"item {shown.item_id}, image {which}").image
        if grounding is not None:
            geometry = asyncio.run(workflow.ctx.prepare(item)).geometry[which]
            shown.true_boxes, shown.predicted_boxes, shown.box_problems = grounding_boxes(
                grounding, item, shown.completion, geometry
            )
        shown.image = draw(image, shown.true_boxes, shown.predicted_boxes)
    return out


def _video_strip(workflow: Any, item: dict[str, Any]) -> Image.Image | None:
    """The first video's sampled frames as one strip (its report thumbnails), ``None`` without."""
    if not item.get("videos"):
        return None
    clips = asyncio.run(workflow.ctx.prepare(item)).videos
    if not clips or not clips[0].thumbnails:
        return None
    return strip_image(clips[0].thumbnails, clips[0].thumbnails[0].height, STRIP_FRAMES)


def grounding_boxes(
    grounding: Any, item: dict[str, Any], completion: str, geometry: Any
) -> tuple[list[Box], list[Box], list[str]]:
    """``(true boxes, predicted boxes, problems)``, boxes in original pixels, read the way
    ``grounding`` reads them (its label field and frame, its parser and answer region). A predicted
    box the reward's :func:`~vlrollout.rewards.grounding.box_problem` refuses (judged in the frame
    it was written in, as the reward does) is not among the boxes but in ``problems`` with the
    reason, as is what the parser could not read."""
    truth = label_boxes(item[grounding.boxes_key], grounding.boxes_key)
    truth = convert_boxes(truth, grounding.label_frame, Frame.ORIGINAL, geometry)
    predicted, problems = predicted_boxes(grounding, completion, geometry)
    return truth, predicted, problems


def draw(image: Image.Image, true_boxes: Sequence[Box], predicted: Sequence[Box]) -> Image.Image:
    """An RGB copy of ``image`` (same size) with ``true_boxes`` green and ``predicted`` red.

    A box the grounding reward's :func:`~vlrollout.rewards.grounding.box_problem` refuses is not
    drawn; parts outside the image are cut off by the image's edge.
    """
    out = image.convert("RGB")  # a copy, also when the image is RGB already
    pen = ImageDraw.Draw(out)
    width = max(1, round(min(out.size) / 70))
    for boxes, colour in ((true_boxes, TRUE_COLOUR), (predicted, PREDICTED_COLOUR)):
        for box in boxes:
            if box_problem(box) is None:
                pen.rectangle(tuple(box), outline=colour, width=width)
    return out


def save(out: Path, rollouts: Sequence[HeldOutRollout]) -> None:
    """Write the images under ``out/eval_rollouts/step_N/`` and append the records to
    ``out/eval_rollouts.jsonl``."""
    for shown in rollouts:
        rel = None
        if shown.image is not None:
            rel = f"{IMAGES_DIR}/step_{shown.step}/{shown.index}.png"
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shown.image.save(out / rel)
        append_jsonl(out / ROLLOUTS_FILE, shown.to_record(rel))


def section_html(out: Path) -> str:
    """The report's section of shown rollouts: those of the first and of the last evaluation
    (before training and now), images embedded as PNG data URLs. Empty when there are none."""
    records = read_jsonl(out / ROLLOUTS_FILE)
    if not records:
        return ""
    steps = sorted({r["step"] for r in records})
    parts = [
        "<h2>Held-out rollouts</h2><p>Greedy completions of the first held-out items; "
        "true boxes green, predicted boxes red (original pixels).</p>"
    ]
    for step in dict.fromkeys((steps[0], steps[-1])):
        cards = "".join(_card(out, r) for r in records if r["step"] == step)
        parts.append(f'<h3>step {step}</h3><div class="rollouts">{cards}</div>')
    return "".join(parts)


#: CSS of :func:`section_html`'s cards, for the report's ``<style>``.
SECTION_CSS = (
    ".rollouts{display:flex;flex-wrap:wrap}.rollouts figure{margin:0 1em 1em 0;width:300px}"
    ".rollouts img{width:280px;image-rendering:pixelated;border:1px solid #eee}"
    ".rollouts pre{white-space:pre-wrap;word-break:break-all;text-align:left}"
)


def _card(out: Path, record: dict[str, Any]) -> str:
    image = ""
    if record.get("image") and (out / record["image"]).exists():
        data = base64.b64encode((out / record["image"]).read_bytes()).decode("ascii")
        image = f'<img alt="item {html.escape(record["id"])}" src="data:image/png;base64,{data}">'
    task = f" ({html.escape(str(record['task']))})" if record.get("task") else ""
    completion = record.get("completion")
    text = "rejected: no completion (scored 0)" if completion is None else completion
    boxes = ""
    if record.get("true_boxes") or record.get("predicted_boxes"):
        boxes = (
            f"<br>true {_boxes_text(record['true_boxes'])}; "
            f"predicted {_boxes_text(record['predicted_boxes'])}"
        )
    for problem in record.get("box_problems") or []:
        boxes += f"<br>not drawn: {html.escape(problem)}"
    return (
        f"<figure>{image}<figcaption>item {html.escape(record['id'])}{task}: reward "
        f"{record['reward']:.3f}{boxes}<pre>{html.escape(text)}</pre></figcaption></figure>"
    )


def _boxes_text(boxes: Sequence[Sequence[float]]) -> str:
    """``"[39, 2, 67, 30]"`` per box (rounded to pixels), ``"none"`` without any."""
    if not boxes:
        return "none"
    return ", ".join("[" + ", ".join(f"{v:.0f}" for v in b) + "]" for b in boxes)
