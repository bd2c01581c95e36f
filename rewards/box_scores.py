"""Box and point scores: IoU, GIoU, Acc@tau, centre closeness, point-in-box, and one-to-one multi-box matching.

Boxes are ``(x1, y1, x2, y2)`` with ``x1 <= x2`` and ``y1 <= y2``, all in the same frame (IoU and
GIoU do not depend on which frame, as long as both boxes share it). IoU/GIoU use
the formulas of ``torchvision.ops.box_iou`` / ``generalized_box_iou`` in float64; the 0/0 of two
zero-area boxes is defined as IoU 0 and GIoU -1 (those functions return NaN there). Matching uses
``scipy.optimize.linear_sum_assignment``.

Which code computes them: up to ``TORCH_MIN_PAIRS`` pairs (every per-sample reward) NumPy does,
because a torch call's dispatch costs an order of magnitude more than the NumPy arithmetic on so
few pairs; larger matrices call torchvision itself. ``tests/rewards/test_box_scores.py`` checks both paths
agree to 1e-12.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .frames import Box, Point

TORCH_MIN_PAIRS = 4096


def checked_boxes(boxes: Sequence[Box], which: str) -> np.ndarray:
    """``boxes`` as float64 ``[N, 4]``, or a ``ValueError`` naming the first box that is none:
    not four values, not finite, or inverted (an inverted box and its mirror have an enclosure
    equal to their union, so GIoU would score the pair 1.0).

    >>> checked_boxes([(0, 0, 2, 1)], "predicted").tolist()
    [[0.0, 0.0, 2.0, 1.0]]
    """
    for i, box in enumerate(boxes):
        if len(box) != 4:
            raise ValueError(f"box {i} of {which} has {len(box)} values; a box is (x1, y1, x2, y2)")
    arr = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    finite = np.isfinite(arr).all(axis=1)
    inverted = (arr[:, 2] < arr[:, 0]) | (arr[:, 3] < arr[:, 1])
    if finite.all() and not inverted.any():
        return arr
    i = int(np.flatnonzero(~finite | inverted)[0])
    x1, y1, x2, y2 = arr[i]
    what = (
        "not finite" if not finite[i] else "inverted (x2 < x1)" if x2 < x1 else "inverted (y2 < y1)"
    )
    raise ValueError(f"box {i} of {which} is {what}: {tuple(boxes[i])}; a box is (x1, y1, x2, y2)")


def _np_terms(a: np.ndarray, b: np.ndarray):
    a, b = a[:, None, :], b[None, :, :]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    wi = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    hi = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = wi * hi
    union = area_a + area_b - inter
    return a, b, inter, union


def _np_iou(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    _, _, inter, union = _np_terms(pred, gt)
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / union


def _np_giou(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    a, b, inter, union = _np_terms(pred, gt)
    we = np.clip(np.maximum(a[..., 2], b[..., 2]) - np.minimum(a[..., 0], b[..., 0]), 0, None)
    he = np.clip(np.maximum(a[..., 3], b[..., 3]) - np.minimum(a[..., 1], b[..., 1]), 0, None)
    enclosure = we * he
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / union - (enclosure - union) / enclosure


def pairwise_iou(pred: Sequence[Box], gt: Sequence[Box]) -> np.ndarray:
    """IoU matrix, float64 ``[len(pred), len(gt)]`` (NumPy when small, else ``box_iou``).

    Raises:
        ValueError: A box is not four finite values with ``x1 <= x2`` and ``y1 <= y2``.
    """
    if len(pred) == 0 or len(gt) == 0:
        return np.zeros((len(pred), len(gt)))
    a, b = checked_boxes(pred, "the first boxes"), checked_boxes(gt, "the second boxes")
    if len(a) * len(b) <= TORCH_MIN_PAIRS:
        return np.nan_to_num(_np_iou(a, b), nan=0.0)
    import torch
    from torchvision.ops import box_iou

    out = box_iou(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    return np.nan_to_num(out, nan=0.0)


def pairwise_giou(pred: Sequence[Box], gt: Sequence[Box]) -> np.ndarray:
    """GIoU matrix, float64 ``[len(pred), len(gt)]`` in [-1, 1] (NumPy when small, else
    ``torchvision.ops.generalized_box_iou``).

    Raises:
        ValueError: As :func:`pairwise_iou`.
    """
    if len(pred) == 0 or len(gt) == 0:
        return np.zeros((len(pred), len(gt)))
    a, b = checked_boxes(pred, "the first boxes"), checked_boxes(gt, "the second boxes")
    if len(a) * len(b) <= TORCH_MIN_PAIRS:
        return np.clip(np.nan_to_num(_np_giou(a, b), nan=-1.0), -1.0, 1.0)
    import torch
    from torchvision.ops import generalized_box_iou

    out = generalized_box_iou(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    return np.clip(np.nan_to_num(out, nan=-1.0), -1.0, 1.0)


def iou(a: Box, b: Box) -> float:
    """IoU of two boxes.

    >>> iou((0, 0, 2, 2), (1, 0, 3, 2))  # overlap 2, union 6
    0.3333333333333333
    """
    return float(pairwise_iou([a], [b])[0, 0])


def giou(a: Box, b: Box) -> float:
    """Generalized IoU (Rezatofighi et al. 2019): IoU - (enclosure - union) / enclosure.

    >>> round(giou((0, 0, 1, 1), (2, 0, 3, 1)), 6)  # IoU 0, union 2, enclosure 3
    -0.333333
    """
    return float(pairwise_giou([a], [b])[0, 0])


TIE = 1e-9
"""How far below a bound a value may fall and still count as on it. Boxes divided by the image
size leave exact ties a rounding error short: on a 100 x 80 image, [10, 20, 25, 60] against
[10, 20, 40, 60] has IoU 1/2 but computes as 0.4999999999999999. A tie counts, and no value
further than ``TIE`` from a bound is read differently."""


def acc_at(iou_value: float, tau: float = 0.5) -> float:
    """1.0 when ``iou_value >= tau`` up to :data:`TIE` (the usual "Acc@0.5" of referring
    expression grounding, as ``vlrollout eval`` counts it)."""
    return 1.0 if iou_value >= tau - TIE else 0.0


def centre_closeness(a: Box, b: Box, width: float, height: float) -> float:
    """1 minus the distance between the two boxes' centres in image-normalised coordinates (x over
    ``width``, y over ``height``), divided by the image diagonal's normalised length sqrt(2).

    A dense grounding score in [0, 1] that does not depend on either box's size: unlike GIoU,
    whose penalty term is normalised by the boxes' enclosure (so a bigger miss costs less), it
    cannot be raised by growing the box. 1.0 for equal centres, 0.0 for opposite image corners.

    >>> round(centre_closeness((0, 0, 2, 2), (8, 0, 10, 2), 10, 10), 6)  # centres 0.8 apart in x
    0.434315
    >>> centre_closeness((4, 4, 6, 6), (0, 0, 10, 10), 10, 10)  # same centre, any size
    1.0
    """
    if not (width > 0 and height > 0):
        raise ValueError(f"image width and height must be > 0, got {width} and {height}")
    dx = ((a[0] + a[2]) - (b[0] + b[2])) / 2 / width
    dy = ((a[1] + a[3]) - (b[1] + b[3])) / 2 / height
    return max(0.0, 1.0 - (dx * dx + dy * dy) ** 0.5 / 2**0.5)


def point_in_box(point: Point, box: Box) -> bool:
    """Whether ``point`` lies in ``box`` (edges included)."""
    x, y = point
    return box[0] <= x <= box[2] and box[1] <= y <= box[3]


@dataclass(frozen=True)
class MatchResult:
    """One-to-one matching of predictions to ground truth.

    Attributes:
        precision: true positives / predictions (1.0 when both are empty).
        recall: true positives / ground-truth items (1.0 when both are empty).
        f1: harmonic mean of precision and recall (0 when both are 0).
        mean_iou: mean IoU over true-positive pairs (0 when there are none; 1.0 for points).
        matches: ``(pred_index, gt_index, iou)`` for every true-positive pair.
    """

    precision: float
    recall: float
    f1: float
    mean_iou: float
    matches: list[tuple[int, int, float]] = field(default_factory=list)


def _f1(p: float, r: float) -> float:
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def _match(hit: np.ndarray, quality: np.ndarray, n_pred: int, n_gt: int) -> MatchResult:
    if n_pred == 0 and n_gt == 0:
        return MatchResult(1.0, 1.0, 1.0, 1.0)
    if n_pred == 0 or n_gt == 0:
        return MatchResult(0.0, 0.0, 0.0, 0.0)
    from scipy.optimize import linear_sum_assignment

    # Lexicographic objective: first the number of hits, then the total quality of the pairs that
    # *are* hits. quality <= 1 per pair and at most min(P, G) pairs, so the tie-break term stays
    # below one hit. A pair below the threshold earns nothing: counting its quality would prefer
    # a worse hit whose partner happens to overlap a little.
    weight = np.where(hit, 1.0 + quality / (min(n_pred, n_gt) + 1), 0.0)
    rows, cols = linear_sum_assignment(weight, maximize=True)
    matches = [
        (int(r), int(c), float(quality[r, c])) for r, c in zip(rows, cols, strict=True) if hit[r, c]
    ]
    tp = len(matches)
    precision, recall = tp / n_pred, tp / n_gt
    mean_iou = sum(m[2] for m in matches) / tp if tp else 0.0
    return MatchResult(precision, recall, _f1(precision, recall), mean_iou, matches)


def match_boxes(pred: Sequence[Box], gt: Sequence[Box], iou_threshold: float = 0.5) -> MatchResult:
    """Hungarian matching of predicted to ground-truth boxes; a pair counts when IoU >= threshold.

    The assignment maximises the number of pairs above the threshold, then the total IoU of those
    pairs only (pairs below the threshold do not break ties), so one ground-truth box can never
    reward two predictions (VLM-R1 #261 matched only one box).

    >>> r = match_boxes([(0, 0, 1, 1), (5, 5, 6, 6), (9, 9, 10, 10)], [(0, 0, 1, 1), (5, 5, 6, 7)])
    >>> (round(r.precision, 4), r.recall, round(r.f1, 4), r.mean_iou)
    (0.6667, 1.0, 0.8, 0.75)
    """
    ious = pairwise_iou(pred, gt)
    return _match(ious >= iou_threshold, ious, len(pred), len(gt))


def match_points(points: Sequence[Point], boxes: Sequence[Box]) -> MatchResult:
    """One-to-one matching of points to boxes; a pair counts when the point is inside the box.

    >>> match_points([(0.5, 0.5), (0.6, 0.6)], [(0, 0, 1, 1)]).precision
    0.5
    """
    hit = np.array([[point_in_box(p, b) for b in boxes] for p in points], dtype=bool).reshape(
        len(points), len(boxes)
    )
    return _match(hit, hit.astype(np.float64), len(points), len(boxes))


def box_area(box: Box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])
