"""Referring-expression grounding scored as lmms-eval's ``refcoco_bbox_rec``, boxes read per family.

lmms-eval (``lmms_eval/tasks/refcoco/utils_rec.py``) normalises the true box to 0-1 corners of the
original image (``x / width``, ``y / height``), reads the prediction as the first ``[a, b, c, d]``
in the text, taken as 0-1 corners, and scores each row with, ``t`` in {0.1, 0.3, 0.5, 0.7, 0.9}:

- ``IoU``: ``inter / (area_true + area_pred - inter)``, ``inter`` the overlap's width times height,
  each clamped at 0; the boxes are not clipped to the image;
- ``ACC@t``: 1 when ``IoU >= t``;
- ``Center_ACC``: 1 when the predicted box's centre lies inside the true box, edges included.

Every metric is the mean over rows, and a row whose text holds no box stays in the denominator.

Here the prediction is read in the model family's own convention (:data:`BOX_FORMATS`: Qwen2-VL,
Qwen3-VL and InternVL write 0-1000, Qwen2.5-VL pixels of its resized image, lmms-eval's prompt asks
for 0-1 of the image), converted to original pixels with the image's recorded geometry, then
normalised by the original size and scored with the formulas above. Where the conventions coincide
(a prediction written as 0-1 corners), the values are lmms-eval's (``tests/eval/test_metrics_boxes.py``
runs lmms-eval's own scoring functions when the package is installed, and a transcription of them
always). Two cases differ on purpose:

- no box (lmms-eval scores its placeholder ``[0, 0, 0, 0]``, whose centre, the image corner,
  counts as a hit when the true box starts at the corner): every metric 0, with a reason;
- reversed corners (``x2 < x1``) or a NaN: every metric 0 with the reason (lmms-eval's IoU is 0 too,
  its Center_ACC takes the centre of the reversed box), the rule of the grounding rewards.

lmms-eval's later ``refcoco_grounding`` task reads pixels, tries every predicted box both as pixels
and as 0-1000 and keeps the reading with the highest IoU against the true box: an oracle choice
this module does not make (the family says which reading is meant).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vlrollout.geometry import Box, Frame, ImageGeometry, convert_boxes
from vlrollout.rewards.box_parsing import PARSERS, get_parser
from vlrollout.rewards.box_scores import TIE
from vlrollout.rewards.grounding import box_problem
from vlrollout.rewards.text_extract import answer_region

REC_THRESHOLDS = (0.1, 0.3, 0.5, 0.7, 0.9)
REC_METRICS = ("IoU", *(f"ACC@{t}" for t in REC_THRESHOLDS), "Center_ACC")
"""The metric names, as lmms-eval reports them (without its ``refcoco_`` prefix)."""

# TIE (rewards.box_scores): how far below a bound a value may fall and still count as on it
# (``ACC@t``: IoU >= t; ``Center_ACC``: the edges). lmms-eval compares the floats as they come,
# so its ACC@0.5 misses an exact tie that computes a rounding error short; here a tie counts.


def rec_iou(true: Sequence[float], pred: Sequence[float]) -> float:
    """IoU of two ``[x1, y1, x2, y2]`` boxes as lmms-eval's ``compute_iou`` (no clipping).

    A zero union (two empty boxes) is 0 here; lmms-eval divides by zero. Tasks refuse empty true
    boxes, so scores never meet that case.

    >>> rec_iou([0, 0, 0.5, 1], [0.25, 0, 1, 1])
    0.25
    """
    inter = max(0.0, min(true[2], pred[2]) - max(true[0], pred[0])) * max(
        0.0, min(true[3], pred[3]) - max(true[1], pred[1])
    )
    union = (
        (true[2] - true[0]) * (true[3] - true[1])
        + (pred[2] - pred[0]) * (pred[3] - pred[1])
        - inter
    )
    return inter / union if union > 0 else 0.0


def rec_center_hit(true: Sequence[float], pred: Sequence[float]) -> bool:
    """Whether ``pred``'s centre is inside ``true``, edges included (lmms-eval's
    ``compute_center_accuracy``; a centre within :data:`TIE` of an edge is on it).

    >>> rec_center_hit([0, 0, 0.5, 0.5], [0, 0, 1, 1]), rec_center_hit([0, 0, 0.5, 0.5], [0, 0, 1.2, 1])
    (True, False)
    """
    cx = (pred[0] + pred[2]) / 2
    cy = (pred[1] + pred[3]) / 2
    return true[0] - TIE <= cx <= true[2] + TIE and true[1] - TIE <= cy <= true[3] + TIE


def rec_values(true: Sequence[float], pred: Sequence[float]) -> dict[str, float]:
    """Every metric of :data:`REC_METRICS` for one row (0-1 boxes), each 0.0 or 1.0 but IoU.

    >>> rec_values([0, 0, 0.5, 1], [0.25, 0, 1, 1])["ACC@0.3"]
    0.0
    """
    iou = rec_iou(true, pred)
    values = {"IoU": iou}
    values.update({f"ACC@{t}": float(iou >= t - TIE) for t in REC_THRESHOLDS})
    values["Center_ACC"] = float(rec_center_hit(true, pred))
    return values


MISSED = dict.fromkeys(REC_METRICS, 0.0)
"""The values of a row without a usable box."""


def normalise_box(box: Sequence[float], width: float, height: float) -> Box:
    """``box`` in pixels of a ``width`` x ``height`` image as 0-1 corners (lmms-eval's reading).

    >>> normalise_box([64, 48, 320, 240], 640, 480)
    (0.1, 0.1, 0.5, 0.5)
    """
    return (box[0] / width, box[1] / height, box[2] / width, box[3] / height)


@dataclass(frozen=True)
class BoxFormat:
    """How a model family writes a box: a :mod:`~vlrollout.rewards.box_parsing` parser key and,
    for ``plain`` lists that carry no frame, the frame they are in."""

    parser: str
    plain_frame: Frame = Frame.NORM1
    of_original: bool = False  # normalised over the original image, not the model frame


_QWEN3 = BoxFormat("qwen3_vl")
_GLM = BoxFormat("glm4v")
_LMMS_EVAL = BoxFormat("plain", Frame.NORM1, of_original=True)
BOX_FORMATS: dict[str, BoxFormat] = {
    "qwen2_vl": BoxFormat("qwen2_vl"),
    "qwen2_5_vl": BoxFormat("qwen2_5_vl"),
    "qwen3_vl": _QWEN3,
    "qwen3_vl_moe": _QWEN3,
    "qwen3_5": _QWEN3,
    "qwen3_5_moe": _QWEN3,
    "internvl": BoxFormat("internvl"),
    "glm4v": _GLM,
    "glm46v": _GLM,
    "paligemma": BoxFormat("paligemma"),
    "florence2": BoxFormat("florence2"),
    "molmo": BoxFormat("molmo"),
}
"""Box convention per :mod:`vlrollout.families` name (the config's ``model_type``), with the
sources of :mod:`vlrollout.rewards.box_parsing`. Qwen3-VL-MoE and Qwen3.5 are read as Qwen3-VL
(JSON ``bbox_2d`` in 0-1000; Qwen3.5 is assumed to keep Qwen3-VL's convention); GLM-4.1V/4.6V
write ``[x1, y1, x2, y2]`` in 0-1000 between ``<|begin_of_box|>`` tokens (GLM-4.5V model card).
Families without a grounding format of their own (LLaVA, Gemma 3, Idefics3, SmolVLM, Mistral 3,
LFM2-VL, ...) are read as lmms-eval's prompt asks and its scorer reads: the first
``[x1, y1, x2, y2]`` as 0-1 corners of the original image, whatever crop or padding the model's
processor applied."""


def box_format(family: str) -> BoxFormat:
    """The :class:`BoxFormat` of ``family``.

    ``family`` is a :mod:`vlrollout.families` name (:data:`BOX_FORMATS`; any other family reads
    lmms-eval's 0-1 lists), a parser key of :mod:`vlrollout.rewards.box_parsing`, or
    ``plain:<frame>`` for ``[x1, y1, x2, y2]`` lists in ``original``, ``model``, ``norm1000`` or
    ``norm1``.

    >>> box_format("plain:norm1000").plain_frame.value, box_format("llava").of_original
    ('norm1000', True)
    """
    key = family.lower().replace("-", "_").replace(".", "_")
    if key in BOX_FORMATS:
        return BOX_FORMATS[key]
    if family.startswith("plain:"):
        frame = family.partition(":")[2]
        if frame not in {f.value for f in Frame}:
            raise ValueError(
                f"box format {family!r}: the frame after 'plain:' must be one of "
                f"{[f.value for f in Frame]}"
            )
        return BoxFormat("plain", Frame(frame))
    try:
        get_parser(key)
    except ValueError:
        return _LMMS_EVAL
    return BoxFormat(key)


def check_box_format(name: str) -> BoxFormat:
    """:func:`box_format` of a name a user typed (``vlrollout eval --box-format``): a
    :data:`BOX_FORMATS` family, a parser key or ``plain:<frame>``, never the silent lmms-eval
    fallback :func:`box_format` gives families without a format of their own.

    Raises:
        ValueError: naming the known formats.

    >>> check_box_format("qwen2_vl").parser
    'qwen2_vl'
    """
    key = name.lower().replace("-", "_").replace(".", "_")
    if key == "plain":
        raise ValueError(
            "'plain' needs its frame: plain:original, plain:model, plain:norm1000 or "
            "plain:norm1 (plain lists carry none)"
        )
    if key in BOX_FORMATS or name.startswith("plain:"):
        return box_format(name)
    try:
        get_parser(key)
    except ValueError:
        known = sorted({*BOX_FORMATS, *PARSERS} - {"plain"})  # plain takes its frame
        raise ValueError(
            f"unknown box format {name!r}; expected one of {known} or plain:FRAME with FRAME one "
            f"of {[f.value for f in Frame]}"
        ) from None
    return BoxFormat(key)


@dataclass(frozen=True)
class BoxReading:
    """The first box of a completion, in original pixels, or why there is none.

    Attributes:
        box: ``(x1, y1, x2, y2)`` in pixels of the original image, or ``None``.
        reason: ``None``, or ``no_box``, ``no_box:points_only``, ``non_finite_box``,
            ``inverted_box`` (:func:`~vlrollout.rewards.grounding.box_problem`, judged in the frame
            the model wrote).
        written: The box as the model wrote it (its frame), or ``None``.
        frame: The frame the model's boxes are in.
        num_boxes: How many boxes the text holds (the first is scored, as lmms-eval does).
    """

    box: Box | None
    reason: str | None
    written: Box | None
    frame: Frame
    num_boxes: int


def read_box(text: str, family: str, geometry: Mapping[str, Any] | Any) -> BoxReading:
    """Read the first box of ``text`` in ``family``'s convention into original pixels.

    The ``<answer>`` block is read when the text has one, else the whole text.

    Args:
        text: The completion.
        family: See :func:`box_format`.
        geometry: The image's geometry (an :meth:`ImageGeometry.to_dict` dict).
    """
    fmt = box_format(family)
    parsed = get_parser(fmt.parser, fmt.plain_frame)(answer_region(text, True))
    n = len(parsed.boxes)
    if not parsed.boxes:
        reason = "no_box:points_only" if parsed.points else "no_box"
        return BoxReading(None, reason, None, parsed.frame, 0)
    written = tuple(float(v) for v in parsed.boxes[0])
    problem = box_problem(written)
    if problem is not None:
        return BoxReading(None, problem, written, parsed.frame, n)  # type: ignore[arg-type]
    if fmt.of_original:  # lmms-eval's reading: 0-1 corners of the original image
        width, height = original_size(geometry)
        box = (written[0] * width, written[1] * height, written[2] * width, written[3] * height)
    else:
        box = convert_boxes([written], parsed.frame, Frame.ORIGINAL, geometry)[0]
    return BoxReading(box, None, written, parsed.frame, n)  # type: ignore[arg-type]


def original_size(geometry: Any) -> tuple[int, int]:
    """Width and height of the original image of an image geometry."""
    geo = ImageGeometry.from_any(geometry)
    return geo.original_width, geo.original_height
