"""IoU, GIoU, Acc@tau, centre closeness, point-in-box and Hungarian matching: hand-computed values."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vlrollout.rewards import PlainReward
from vlrollout.rewards.box_scores import (
    _match,
    acc_at,
    centre_closeness,
    giou,
    iou,
    match_boxes,
    match_points,
    pairwise_giou,
    pairwise_iou,
    point_in_box,
)


def test_iou_and_giou_hand_computed():
    # (0,0,4,4) vs (2,2,6,6): intersection 4, union 16 + 16 - 4 = 28 -> 1/7
    assert iou((0, 0, 4, 4), (2, 2, 6, 6)) == pytest.approx(4 / 28)
    # enclosure (0,0,6,6) = 36 -> GIoU = 1/7 - (36 - 28) / 36
    assert giou((0, 0, 4, 4), (2, 2, 6, 6)) == pytest.approx(4 / 28 - 8 / 36)
    # disjoint: IoU 0; GIoU = -(enclosure - union) / enclosure = -(3 - 2) / 3
    assert iou((0, 0, 1, 1), (2, 0, 3, 1)) == 0.0
    assert giou((0, 0, 1, 1), (2, 0, 3, 1)) == pytest.approx(-1 / 3)
    assert iou((1, 2, 3, 4), (1, 2, 3, 4)) == 1.0 and giou((1, 2, 3, 4), (1, 2, 3, 4)) == 1.0


def test_zero_area_pairs_are_defined_not_nan():
    assert iou((1, 1, 1, 1), (1, 1, 1, 1)) == 0.0
    assert giou((1, 1, 1, 1), (1, 1, 1, 1)) == -1.0


@pytest.mark.parametrize("score", [iou, giou])
@pytest.mark.parametrize(
    ("a", "b", "says"),
    [
        ((10, 10, 0, 0), (0, 0, 10, 10), "box 0 of the first boxes is inverted (x2 < x1)"),
        ((0, 0, 10, 10), (0, 8, 10, 2), "box 0 of the second boxes is inverted (y2 < y1)"),
        ((0, 0, 1), (0, 0, 1, 1), "box 0 of the first boxes has 3 values"),
        ((0, 0, float("nan"), 1), (0, 0, 1, 1), "box 0 of the first boxes is not finite"),
    ],
)
def test_a_box_that_is_no_box_is_refused_naming_it(score, a, b, says):
    """An inverted box scored GIoU 1.0 against its mirror (the enclosure equals the union), and
    a 3-value box failed in NumPy's reshape: both are the caller's error, named."""
    with pytest.raises(ValueError) as e:
        score(a, b)
    assert says in str(e.value) and "(x1, y1, x2, y2)" in str(e.value)


def test_large_matrices_refuse_an_inverted_box_too():
    good = [(0.0, 0.0, 1.0, 1.0)] * 70
    with pytest.raises(ValueError, match="box 69 of the second boxes is inverted"):
        pairwise_giou(good, good[:69] + [(1.0, 1.0, 0.0, 0.0)])


def test_acc_and_point_in_box():
    assert acc_at(0.5) == 1.0 and acc_at(0.4999) == 0.0 and acc_at(0.7, tau=0.75) == 0.0
    assert point_in_box((0, 0), (0, 0, 1, 1))  # edges included
    assert point_in_box((1, 0.5), (0, 0, 1, 1))
    assert not point_in_box((1.0001, 0.5), (0, 0, 1, 1))


def test_match_boxes_hand_computed():
    # pred: exact copy of gt0 (IoU 1), half of gt1 (IoU 1/2), a stray box (no overlap)
    pred = [(0, 0, 1, 1), (5, 5, 6, 6), (9, 9, 10, 10)]
    gt = [(0, 0, 1, 1), (5, 5, 6, 7)]
    r = match_boxes(pred, gt, iou_threshold=0.5)
    assert (r.precision, r.recall) == (pytest.approx(2 / 3), 1.0)
    assert r.f1 == pytest.approx(2 * (2 / 3) / (2 / 3 + 1))  # 0.8
    assert r.mean_iou == pytest.approx(0.75)
    assert sorted((p, g) for p, g, _ in r.matches) == [(0, 0), (1, 1)]
    # at threshold 0.6 the half-overlap no longer counts
    assert match_boxes(pred, gt, iou_threshold=0.6).recall == 0.5


def test_one_gt_box_cannot_reward_two_predictions():
    r = match_boxes([(0, 0, 1, 1)] * 3, [(0, 0, 1, 1)])
    assert (r.precision, r.recall) == (pytest.approx(1 / 3), 1.0)


def test_matching_maximises_hits_before_total_iou():
    # Max-sum assignment would pick (0,0) + (1,1) = 0.95 + 0.45 = 1.40 with one hit; the
    # lexicographic objective picks (0,1) + (1,0) = 0.55 + 0.55 with two hits at tau = 0.5.
    q = np.array([[0.95, 0.55], [0.55, 0.45]])
    r = _match(q >= 0.5, q, 2, 2)
    assert r.recall == 1.0 and r.mean_iou == pytest.approx(0.55)


def test_empty_cases():
    assert match_boxes([], []).f1 == 1.0
    assert match_boxes([], [(0, 0, 1, 1)]).f1 == 0.0
    assert match_boxes([(0, 0, 1, 1)], []).f1 == 0.0
    assert pairwise_iou([], [(0, 0, 1, 1)]).shape == (0, 1)


def test_match_points():
    # two points inside the one box: only one can match -> precision 1/2, recall 1
    r = match_points([(0.5, 0.5), (0.6, 0.6)], [(0, 0, 1, 1)])
    assert (r.precision, r.recall) == (0.5, 1.0)
    r = match_points([(0.5, 0.5), (5.5, 5.5)], [(5, 5, 6, 6), (0, 0, 1, 1)])
    assert r.f1 == 1.0


boxes = st.tuples(*[st.floats(0, 100, allow_nan=False)] * 4).map(
    lambda b: (min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3]))
)


@given(st.lists(boxes, max_size=5), st.lists(boxes, max_size=5))
def test_scores_in_range(pred, gt):
    ious = pairwise_iou(pred, gt)
    gious = pairwise_giou(pred, gt)
    assert np.all((ious >= 0) & (ious <= 1 + 1e-12))
    assert np.all((gious >= -1) & (gious <= 1))
    assert np.all(gious <= ious + 1e-12)  # GIoU never exceeds IoU
    r = match_boxes(pred, gt)
    assert 0 <= r.precision <= 1 and 0 <= r.recall <= 1 and 0 <= r.f1 <= 1


@given(st.lists(boxes, min_size=1, max_size=6), st.lists(boxes, min_size=1, max_size=6))
def test_numpy_fast_path_equals_torchvision(pred, gt):
    import torch
    from torchvision.ops import box_iou, generalized_box_iou

    tp = torch.tensor(pred, dtype=torch.float64)
    tg = torch.tensor(gt, dtype=torch.float64)
    want_iou = np.nan_to_num(box_iou(tp, tg).numpy(), nan=0.0)
    want_giou = np.clip(np.nan_to_num(generalized_box_iou(tp, tg).numpy(), nan=-1.0), -1, 1)
    np.testing.assert_allclose(pairwise_iou(pred, gt), want_iou, rtol=0, atol=1e-12)
    np.testing.assert_allclose(pairwise_giou(pred, gt), want_giou, rtol=0, atol=1e-12)


def test_large_inputs_use_torchvision_and_agree():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 100, size=(70, 2))
    wh = rng.uniform(1, 50, size=(70, 2))
    big = [tuple(b) for b in np.concatenate([xy, xy + wh], axis=1)]
    assert len(big) ** 2 > 4096  # above TORCH_MIN_PAIRS: the torchvision path
    from vlrollout.rewards.box_scores import _np_giou, _np_iou

    arr = np.asarray(big)
    np.testing.assert_allclose(pairwise_iou(big, big), _np_iou(arr, arr), atol=1e-12)
    np.testing.assert_allclose(pairwise_giou(big, big), _np_giou(arr, arr), atol=1e-12)


def test_tie_break_uses_only_pairs_that_pass_the_threshold():
    # pred 0 hits gt 0 (IoU 0.5) and gt 1 (IoU 0.6); pred 1 hits nothing (IoU 0 and
    # 1/7 are below 0.5). One hit either way; the matched pair must be the 0.6 one, not the one
    # whose sub-threshold partner (1,1) = 1/7 inflates the total.
    pred, gt = [(2, 5, 5, 9), (3, 8, 6, 12)], [(2, 5, 5, 7), (2, 6, 6, 9)]
    ious = pairwise_iou(pred, gt)
    assert ious[0, 0] == pytest.approx(0.5) and ious[0, 1] == pytest.approx(0.6)
    r = match_boxes(pred, gt)
    assert [(p, g) for p, g, _ in r.matches] == [(0, 1)]
    assert r.mean_iou == pytest.approx(0.6)


def test_centre_closeness_is_normalised_by_the_image_and_blind_to_box_size():
    label = (40, 40, 60, 60)  # centre (50, 50) in a 200 x 100 image
    # centre (150, 50): 100 px in x = 0.5 of the width, so 1 - 0.5 / sqrt(2)
    assert centre_closeness((140, 40, 160, 60), label, 200, 100) == pytest.approx(
        1 - 0.5 / np.sqrt(2)
    )
    # the same centre distance in pixels along y is 1.0 of the height: scaled per axis
    assert centre_closeness((40, 140, 60, 160), label, 200, 100) == pytest.approx(
        1 - 1 / np.sqrt(2)
    )
    # growing a missing box around its centre changes nothing (GIoU would rise)
    small, big = (140, 40, 160, 60), (100, 0, 200, 100)
    assert centre_closeness(small, label, 200, 100) == centre_closeness(big, label, 200, 100)
    assert giou(big, label) > giou(small, label)
    assert centre_closeness(label, label, 200, 100) == 1.0
    assert centre_closeness((0, 0, 0, 0), (200, 100, 200, 100), 200, 100) == 0.0
    with pytest.raises(ValueError, match="width and height"):
        centre_closeness(label, label, 0, 100)


def test_acc_at_counts_a_tie_as_the_eval_does():
    """IoU exactly 1/2 that computes a rounding error short (0.49999999999999994) is a hit for
    the training reward as for `vlrollout eval`'s ACC@0.5."""
    from vlrollout.eval.metrics.boxes import rec_values

    geometry = [
        {"original_width": 97, "original_height": 97, "model_width": 97, "model_height": 97}
    ]
    score, reason = PlainReward("acc@iou", family="qwen3_vl").score(
        '{"bbox_2d": [0, 0, 75.0, 1000]}', boxes=[0, 0, 14.55, 97], geometry=geometry
    )
    assert reason is None and score == 1.0
    assert acc_at(0.5 - 1e-12) == 1.0 and acc_at(0.5 - 1e-6) == 0.0
    assert rec_values([0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.5 - 1e-12])["ACC@0.5"] == 1.0
