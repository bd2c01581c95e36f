"""Grounding rewards: parse the model's boxes/points, convert frames, score against labels.

``task_data`` fields read:

- ``boxes`` (name configurable): the label box ``[x1, y1, x2, y2]`` or a list of them, in
  ``label_frame`` (default: original pixels);
- ``geometry``: the preprocessor's per-image geometry, a list of
  ``{"original_width", "original_height", "model_width", "model_height"}`` dicts (or one dict);
  needed whenever the prediction or label frame is ``original``/``model``.

Failure rules (each returns the metric's failure value, 0 or -1 for GIoU, with the reason):

==========================  =================================================================
reason                      when
==========================  =================================================================
``no_box``                  the parser found no box (``no_box:points_only`` if it found points)
``multiple_boxes``          several boxes for a single-box metric and ``on_multiple="zero"``
``non_finite_box``          a coordinate is NaN or infinite
``inverted_box``            ``x2 < x1`` or ``y2 < y1`` (not silently swapped: the convention is
                            part of what is learned)
``box_outside_image``       nothing of the box is left after clipping to the image
``degenerate_box``          zero width or height after clipping
``empty_labels:<field>``    ``box_f1``/``mean_iou`` with an empty label list: 1.0 when no box
                            was predicted, else 0.0 (single-box metrics raise ``ValueError``
                            naming the field instead: there is nothing to take the IoU with)
==========================  =================================================================

A box partly outside the image is clipped and scored (``details["clipped"] = True``). With several
boxes and ``on_multiple="first"`` (default) the first box is scored (``details["num_boxes"]``).
With several label boxes, single-box metrics score the best-matching label. Multi-box metrics
(``box_f1``, ``mean_iou``) count invalid predicted boxes as unmatched predictions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .box_parsing import ParsedOutput, get_parser, parser_name
from .box_scores import (
    acc_at,
    box_area,
    centre_closeness,
    match_boxes,
    match_points,
    pairwise_giou,
    pairwise_iou,
)
from .frames import Box, Frame, check_conversion, convert_boxes, convert_points, frame_size
from .result import Reward, RewardResult, label_number, option_index, require_field
from .text_extract import answer_region

BOX_METRICS = ("iou", "giou", "acc", "centre", "box_f1", "mean_iou")


def box_problem(box: Sequence[float]) -> str | None:
    """Why ``box`` cannot be scored, else ``None``: ``not_4_numbers``, ``non_finite_box`` (NaN or
    infinite) or ``inverted_box`` (``x2 < x1`` or ``y2 < y1``).

    The one rule for label and predicted boxes, used by the rewards and by anything that shows
    boxes next to their rewards (the run report): reversed corners are refused, never swapped,
    because the corner convention is part of what the model learns.

    >>> box_problem((1, 2, 3, 4)), box_problem((3, 2, 1, 4)), box_problem((1, 2, 3))
    (None, 'inverted_box', 'not_4_numbers')
    """
    if len(box) != 4:
        return "not_4_numbers"
    if not all(math.isfinite(v) for v in box):
        return "non_finite_box"
    x1, y1, x2, y2 = box
    if x2 < x1 or y2 < y1:
        return "inverted_box"
    return None


def label_boxes(value: Any, field_name: str = "boxes") -> list[Box]:
    """Read label boxes from a dataset field: one ``[x1, y1, x2, y2]`` or a list of them.

    Raises ``ValueError`` naming the field and the :func:`box_problem` of the first box that
    breaks the rule, or for anything that is not boxes (a data bug, not a model mistake).
    """
    try:
        items = list(value)
        if items and not isinstance(items[0], (list, tuple, np.ndarray)):
            items = [items]  # one box
        boxes = [tuple(label_number(v) for v in b) for b in items]
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"task_data[{field_name!r}] must be [x1, y1, x2, y2] or a list of them"
        ) from e
    for b in boxes:
        problem = box_problem(b)
        if problem is not None:
            raise ValueError(
                f"task_data[{field_name!r}] has an invalid box {b}: {problem} (need 4 finite "
                f"numbers with x1 <= x2 and y1 <= y2)"
            )
    return boxes  # type: ignore[return-value]


def image_geometry(task_data: dict[str, Any], image_index: int) -> Any:
    """The geometry of image ``image_index`` from ``task_data["geometry"]`` (list or dict)."""
    geo = task_data.get("geometry")
    if isinstance(geo, np.ndarray):  # a parquet or pandas column: an object array of dicts
        geo = list(geo)
    if isinstance(geo, (list, tuple)):
        if not geo:
            return None
        if image_index >= len(geo):
            raise ValueError(
                f"image_index={image_index} but task_data['geometry'] has {len(geo)} entries"
            )
        return geo[image_index]
    return geo


def overlaps(box: Box, width: float, height: float) -> bool:
    """Whether ``box`` covers any of the ``width`` x ``height`` image."""
    return box[0] < width and box[1] < height and box[2] > 0 and box[3] > 0


def _clip(box: Box, width: float, height: float) -> Box:
    """``box`` clipped to the ``width`` x ``height`` image."""
    x1, y1, x2, y2 = box
    return (min(max(x1, 0.0), width), min(max(y1, 0.0), height),
            min(max(x2, 0.0), width), min(max(y2, 0.0), height))  # fmt: skip


def _check_box(box: Box, width: float, height: float) -> tuple[Box | None, str | None, bool]:
    """Validate and clip one box already in the label frame: (box, reason, clipped)."""
    problem = box_problem(box)
    if problem is not None:
        return None, problem, False
    clipped_box = _clip(box, width, height)
    clipped = clipped_box != tuple(box)
    if box_area(clipped_box) == 0.0:
        outside = not overlaps(box, width, height)
        return None, "box_outside_image" if outside else "degenerate_box", clipped
    return clipped_box, None, clipped


def label_frame_problem(box: Sequence[float], frame: Frame | str) -> str | None:
    """Why a label ``box`` is not written in its declared ``frame``, else ``None``: in a pixel
    frame, every coordinate in 0-1 and not all whole (fractions of the image, under one pixel as
    pixels); in the ``norm1`` frame, a coordinate above 1 (pixels, which the 1x1 frame would clip
    to the whole image).

    >>> label_frame_problem([0.2, 0.1, 0.6, 0.5], "original")
    'looks like fractions of the image (under one pixel as pixels); write it in pixels'
    >>> label_frame_problem([0, 0, 200, 150], "norm1")
    'has coordinates above 1, so it is not in fractions of the image (label_frame norm1)'
    >>> label_frame_problem([0.2, 0.1, 0.6, 0.5], "norm1"), label_frame_problem([0, 0, 1, 1], "original")
    (None, None)
    """
    frame = Frame(frame)
    if frame is Frame.NORM1:
        if any(v > 1 for v in box):
            return "has coordinates above 1, so it is not in fractions of the image (label_frame norm1)"
        return None
    if frame not in (Frame.ORIGINAL, Frame.MODEL):
        return None
    if all(0 <= v <= 1 for v in box) and not all(float(v).is_integer() for v in box):
        return "looks like fractions of the image (under one pixel as pixels); write it in pixels"
    return None


def check_label_frames(gt: Sequence[Box], frame: Frame, boxes_key: str) -> None:
    """Raise a ``ValueError`` naming the field and the first label box not written in ``frame``
    (:func:`label_frame_problem`)."""
    for box in gt:
        if (problem := label_frame_problem(box, frame)) is not None:
            raise ValueError(f"task_data[{boxes_key!r}] has a box {box} that {problem}")


def _empty_labels_message(field_name: str, metric: str) -> str:
    return (
        f"task_data[{field_name!r}] is empty; metric {metric!r} scores against a label box, so "
        f"the row needs at least one (use 'box_f1' or 'mean_iou' for images with no objects)"
    )


POINT_FAMILIES = frozenset({"molmo", "qwen2_5_vl", "qwen3_vl"})
"""Box parsers that read points (Molmo's ``<point>``, Qwen's ``point_2d``)."""

POINTS_ONLY = frozenset({"molmo"})
"""Box parsers that read points and never a box."""


class GroundingReward(Reward):
    """Box reward for one model family's output format.

    Args:
        family: Output format, a key of ``box_parsing.PARSERS`` (``qwen2_vl``, ``qwen2_5_vl``,
            ``qwen3_vl``, ``internvl``, ``paligemma``, ``florence2``, ``plain``).
        metric: ``iou``, ``giou``, ``acc`` (Acc@``iou_threshold``), ``centre``
            (:func:`~.box_scores.centre_closeness`: 1 minus the centre distance over the image
            diagonal, in the label frame's image size; dense and blind to box size: a pointing
            reward for boxes), ``box_f1`` or ``mean_iou`` (Hungarian matching; ``mean_iou`` is the
            matched pairs' IoUs summed over the larger of the predicted and label box counts,
            so a missing box and an extra one, invalid ones included, each cost a pair). With several label
            boxes ``centre`` scores the best label.
        label_frame: Frame of the label boxes in ``task_data``.
        plain_frame: Frame of the model's boxes when ``family="plain"``.
        boxes_key: ``task_data`` field holding the label boxes.
        image_index: Which image's geometry to use.
        iou_threshold: Threshold for ``acc`` and for a match in ``box_f1``/``mean_iou``.
        on_multiple: ``"first"`` scores the first of several boxes for single-box metrics;
            ``"zero"`` returns the failure value with reason ``multiple_boxes``.
        use_answer_tag: Parse only ``<answer>...</answer>`` when present.
        failure_value: Value for parse failures; default the metric's minimum (-1 for GIoU).

    >>> geo = [{"original_width": 640, "original_height": 480, "model_width": 644,
    ...         "model_height": 476}]
    >>> r = GroundingReward("qwen2_5_vl", "iou")
    >>> r("p", '{"bbox_2d": [161, 119, 483, 357]}', [], [], boxes=[160, 120, 480, 360],
    ...   geometry=geo)
    1.0
    """

    def __init__(
        self,
        family: str = "qwen2_5_vl",
        metric: str = "iou",
        *,
        label_frame: Frame | str = Frame.ORIGINAL,
        plain_frame: Frame | str = Frame.ORIGINAL,
        boxes_key: str = "boxes",
        image_index: int = 0,
        iou_threshold: float = 0.5,
        on_multiple: str = "first",
        use_answer_tag: bool = True,
        failure_value: float | None = None,
    ) -> None:
        if metric not in BOX_METRICS:
            raise ValueError(f"metric must be one of {BOX_METRICS}, got {metric!r}")
        if on_multiple not in ("first", "zero"):
            raise ValueError(f"on_multiple must be 'first' or 'zero', got {on_multiple!r}")
        if not 0.0 < iou_threshold <= 1.0:
            raise ValueError(f"iou_threshold must be in (0, 1], got {iou_threshold}")
        option_index(image_index, "image_index")
        # Validates the family now, not at the first call; its answers' frame is fixed.
        self._answer_frame = get_parser(family, plain_frame)("").frame
        if parser_name(family) in POINTS_ONLY:
            raise ValueError(
                f"family {family!r} writes points, not boxes, so every completion would score "
                "the failure value (no_box:points_only); use the point_in_box reward"
            )
        self.family = family
        self.metric = metric
        self.label_frame = Frame(label_frame)
        self.plain_frame = Frame(plain_frame)
        self.boxes_key = boxes_key
        self.image_index = image_index
        self.iou_threshold = iou_threshold
        self.on_multiple = on_multiple
        self.use_answer_tag = use_answer_tag
        self.failure_value = (
            float(failure_value)
            if failure_value is not None
            else (-1.0 if metric == "giou" else 0.0)
        )
        self.name = f"{metric}"

    def parse(self, completions: str) -> ParsedOutput:
        parser = get_parser(self.family, self.plain_frame)
        return parser(answer_region(completions, self.use_answer_tag))

    def _fail(self, reason: str, **details: Any) -> RewardResult:
        return RewardResult(self.failure_value, reason, details)

    def _labels_on_image(self, gt: list[Box], width: float, height: float) -> list[Box]:
        """The label boxes clipped to the ``width`` x ``height`` image, as predictions are (the
        part the model can draw); a label no prediction can be scored against raises.

        Raises:
            ValueError: a label not written in its frame (:func:`label_frame_problem`), or (except for ``centre``) one wholly
                outside the image, naming the field and the box.
        """
        check_label_frames(gt, self.label_frame, self.boxes_key)
        outside = next((b for b in gt if not overlaps(b, width, height)), None)
        if outside is not None and self.metric != "centre":
            raise ValueError(
                f"task_data[{self.boxes_key!r}] has a box {outside} that lies outside the "
                f"{width:g}x{height:g} image: its IoU with any box on the image is 0"
            )
        return [_clip(b, width, height) if overlaps(b, width, height) else b for b in gt]

    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        gt = label_boxes(
            require_field(task_data, self.boxes_key, type(self).__name__), self.boxes_key
        )
        if self.metric != "centre" and any(box_area(b) == 0.0 for b in gt):
            flat = next(b for b in gt if box_area(b) == 0.0)
            raise ValueError(
                f"task_data[{self.boxes_key!r}] has a zero-area box {flat}: its IoU with any "
                f"box is 0, so {self.metric!r} cannot score it (vlrollout eval refuses it too)"
            )
        geometry = image_geometry(task_data, self.image_index)
        if gt:  # before the completion is read: a broken label fails every completion alike
            width, height = frame_size(self.label_frame, geometry)
            gt = self._labels_on_image(gt, width, height)
            check_conversion(self._answer_frame, self.label_frame, geometry)
        parsed = self.parse(completions)
        details: dict[str, Any] = {"num_boxes": len(parsed.boxes)}
        if not gt:
            if self.metric not in ("box_f1", "mean_iou"):
                raise ValueError(_empty_labels_message(self.boxes_key, self.metric))
            # No objects in the image: finding none is right, every predicted box is a false
            # positive. A rule decides, so the reason names the field.
            value = 0.0 if parsed.boxes else 1.0
            return RewardResult(value, f"empty_labels:{self.boxes_key}", details)
        if parsed.issues:
            details["issues"] = parsed.issues
        if not parsed.boxes:
            return self._fail("no_box:points_only" if parsed.points else "no_box", **details)
        multi = self.metric in ("box_f1", "mean_iou")
        pred = parsed.boxes if multi else parsed.boxes[:1]
        if not multi and len(parsed.boxes) > 1 and self.on_multiple == "zero":
            return self._fail("multiple_boxes", **details)
        valid: list[Box] = []
        first_reason = None
        for box in pred:
            converted = (
                convert_boxes([box], parsed.frame, self.label_frame, geometry)[0]
                if all(math.isfinite(v) for v in box)
                else box
            )
            checked, reason, clipped = _check_box(converted, width, height)
            details["clipped"] = details.get("clipped", False) or clipped
            if checked is None:
                first_reason = first_reason or reason
            else:
                valid.append(checked)
        if not valid:
            return self._fail(first_reason or "no_box", **details)
        if multi:
            m = match_boxes(valid, gt, self.iou_threshold)
            tp = len(m.matches)
            precision = tp / len(pred)
            f1 = 0.0 if tp == 0 else 2 * precision * m.recall / (precision + m.recall)
            details.update(precision=precision, recall=m.recall, mean_matched_iou=m.mean_iou)
            matched = sum(iou for _, _, iou in m.matches)
            value = f1 if self.metric == "box_f1" else matched / max(len(pred), len(gt))
            return RewardResult(value, None, details)
        if self.metric == "giou":
            return RewardResult(float(pairwise_giou(valid, gt).max()), None, details)
        if self.metric == "centre":
            ious = pairwise_iou(valid, gt)[0]
            closeness = [centre_closeness(valid[0], g, width, height) for g in gt]
            k = int(max(range(len(gt)), key=lambda j: closeness[j]))
            details.update(iou=float(ious[k]), centre=closeness[k])
            return RewardResult(closeness[k], None, details)
        best = float(pairwise_iou(valid, gt).max())
        if self.metric == "acc":
            details["iou"] = best
            return RewardResult(acc_at(best, self.iou_threshold), None, details)
        return RewardResult(best, None, details)


class PointInBoxReward(Reward):
    """Point reward: F1 of a one-to-one matching of predicted points to label boxes.

    A single point and a single label box give 1.0 when the point is inside (edges included),
    else 0.0. Reasons: ``no_point`` (nothing parsed), ``non_finite_point`` (all points NaN/inf).

    Args:
        family: One of :data:`POINT_FAMILIES`: ``molmo``, ``qwen2_5_vl`` or ``qwen3_vl``
            (``point_2d``).
        label_frame, boxes_key, image_index, use_answer_tag: as :class:`GroundingReward`.
    """

    def __init__(
        self,
        family: str = "molmo",
        *,
        label_frame: Frame | str = Frame.ORIGINAL,
        boxes_key: str = "boxes",
        image_index: int = 0,
        use_answer_tag: bool = True,
    ) -> None:
        option_index(image_index, "image_index")
        self._answer_frame = get_parser(family)("").frame
        if parser_name(family) not in POINT_FAMILIES:
            raise ValueError(
                f"family {family!r} writes no points its parser reads, so every completion would "
                f"score 0 (no_point); point_in_box reads {', '.join(sorted(POINT_FAMILIES))}"
            )
        self.family = family
        self.label_frame = Frame(label_frame)
        self.boxes_key = boxes_key
        self.image_index = image_index
        self.use_answer_tag = use_answer_tag
        self.name = "point_in_box"

    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        gt = label_boxes(
            require_field(task_data, self.boxes_key, type(self).__name__), self.boxes_key
        )
        if not gt:
            raise ValueError(_empty_labels_message(self.boxes_key, "point_in_box"))
        geometry = image_geometry(task_data, self.image_index)
        width, height = frame_size(self.label_frame, geometry)  # before the completion is read
        check_conversion(self._answer_frame, self.label_frame, geometry)
        check_label_frames(gt, self.label_frame, self.boxes_key)
        outside = next((b for b in gt if not overlaps(b, width, height)), None)
        if outside is not None:
            raise ValueError(
                f"task_data[{self.boxes_key!r}] has a box {outside} that lies outside the "
                f"{width:g}x{height:g} image: no point on the image is inside it"
            )
        parsed = get_parser(self.family)(answer_region(completions, self.use_answer_tag))
        details: dict[str, Any] = {"num_points": len(parsed.points)}
        if not parsed.points:
            return RewardResult(0.0, "no_point", details)
        finite = [p for p in parsed.points if all(math.isfinite(v) for v in p)]
        if not finite:
            return RewardResult(0.0, "non_finite_point", details)
        points = convert_points(finite, parsed.frame, self.label_frame, geometry)
        m = match_points(points, gt)
        tp = len(m.matches)
        precision = tp / len(parsed.points)
        f1 = 0.0 if tp == 0 else 2 * precision * m.recall / (precision + m.recall)
        details.update(precision=precision, recall=m.recall)
        return RewardResult(f1, None, details)
