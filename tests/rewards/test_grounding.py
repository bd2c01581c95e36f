"""Grounding rewards: frames line up across families; every failure rule has a reason."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlrollout.rewards.grounding import GroundingReward, PointInBoxReward

# A Qwen2.5-VL processor resizes 640x480 to 644x476 (multiples of 28 via smart_resize).
GEO = [{"original_width": 640, "original_height": 480, "model_width": 644, "model_height": 476}]
LABEL = [160, 120, 480, 360]  # original pixels; chosen so both model frames are integral:
# model frame:  x * 644/640 -> 161, 483 ; y * 476/480 -> 119, 357
# 0..1000:      x / 640 * 1000 -> 250, 750 ; y / 480 * 1000 -> 250, 750


def test_same_box_in_each_family_frame_scores_iou_one():
    qwen25 = GroundingReward("qwen2_5_vl", "iou")
    qwen2 = GroundingReward("qwen2_vl", "iou")
    a = qwen25.score("p", '```json\n[{"bbox_2d": [161, 119, 483, 357], "label": "cat"}]\n```',
                     [], [], boxes=LABEL, geometry=GEO)  # fmt: skip
    b = qwen2.score("p", "<|box_start|>(250,250),(750,750)<|box_end|>", [], [], boxes=LABEL,
                    geometry=GEO)  # fmt: skip
    assert a.value == pytest.approx(1.0, abs=1e-6) and a.reason is None
    assert b.value == pytest.approx(1.0, abs=1e-6) and b.reason is None
    # Reading the Qwen2.5-VL box as if it were original pixels (the VLM-R1 #44 bug) is not 1.0.
    wrong = GroundingReward("plain", "iou", plain_frame="original")
    assert wrong("p", "[161, 119, 483, 357]", [], [], boxes=LABEL, geometry=GEO) < 0.99


def test_rounded_model_outputs_stay_within_the_rounding_bound():
    # An arbitrary label box; each model writes integers, so every edge moves by at most half a
    # unit of its frame: Qwen2.5 0.5 model px = 0.5 * 640/644 orig px in x, 0.5 * 480/476 in y;
    # Qwen2 0.5/1000 of the size = 0.32 px in x, 0.24 px in y. For a w x h box with edge errors
    # ex, ey: IoU >= (w - 2ex)(h - 2ey) / ((w + 2ex)(h + 2ey)).
    label = [101.3, 57.9, 333.7, 250.2]
    w, h = label[2] - label[0], label[3] - label[1]
    model = [round(label[0] * 644 / 640), round(label[1] * 476 / 480),
             round(label[2] * 644 / 640), round(label[3] * 476 / 480)]  # fmt: skip
    norm = [round(label[0] / 640 * 1000), round(label[1] / 480 * 1000),
            round(label[2] / 640 * 1000), round(label[3] / 480 * 1000)]  # fmt: skip
    got25 = GroundingReward("qwen2_5_vl")("p", f'{{"bbox_2d": {model}}}', [], [], boxes=label,
                                          geometry=GEO)  # fmt: skip
    got2 = GroundingReward("qwen2_vl")("p", "<|box_start|>({},{}),({},{})<|box_end|>".format(*norm),
                                       [], [], boxes=label, geometry=GEO)  # fmt: skip
    for got, ex, ey in [(got25, 0.5 * 640 / 644, 0.5 * 480 / 476), (got2, 0.32, 0.24)]:
        bound = (w - 2 * ex) * (h - 2 * ey) / ((w + 2 * ex) * (h + 2 * ey))
        assert bound <= got <= 1.0
        assert got > 0.99


@pytest.mark.parametrize(
    ("family", "text"),
    [
        ("qwen3_vl", '{"bbox_2d": [250, 250, 750, 750]}'),
        ("internvl", "<ref>cat</ref><box>[[250, 250, 750, 750]]</box>"),
        ("paligemma", "<loc0256><loc0256><loc0767><loc0767> cat"),  # 0.25*1023 = 255.75 -> 256
        ("florence2", "cat<loc_250><loc_250><loc_750><loc_750>"),  # centres 250.5/1000
        ("plain", "[160, 120, 480, 360]"),
    ],
)
def test_other_families_land_on_the_label(family, text):
    got = GroundingReward(family, "iou").score("p", text, [], [], boxes=LABEL, geometry=GEO)
    # paligemma/florence2 quantise: the box is off by < 1/1000 of the image per edge
    assert got.value > 0.99 and got.reason is None


@pytest.mark.parametrize(
    ("text", "reason", "extra"),
    [
        ("I cannot see it", "no_box", {}),
        ('{"point_2d": [300, 200]}', "no_box:points_only", {}),
        ('{"bbox_2d": [NaN, 1, 2, 3]}', "non_finite_box", {}),
        ('{"bbox_2d": [483, 357, 161, 119]}', "inverted_box", {}),
        ('{"bbox_2d": [700, 500, 800, 600]}', "box_outside_image", {}),
        ('{"bbox_2d": [161, 119, 161, 357]}', "degenerate_box", {}),
    ],
)
def test_failures_have_reasons(text, reason, extra):
    for metric, fail in [("iou", 0.0), ("giou", -1.0), ("acc", 0.0), ("box_f1", 0.0)]:
        r = GroundingReward("qwen2_5_vl", metric).score(
            "p", text, [], [], boxes=LABEL, geometry=GEO
        )
        assert (r.value, r.reason) == (fail, reason)


def test_multiple_boxes_rule():
    text = '[{"bbox_2d": [161, 119, 483, 357]}, {"bbox_2d": [0, 0, 10, 10]}]'
    first = GroundingReward("qwen2_5_vl", on_multiple="first").score(
        "p", text, [], [], boxes=LABEL, geometry=GEO
    )
    assert first.value == pytest.approx(1.0) and first.details["num_boxes"] == 2
    zero = GroundingReward("qwen2_5_vl", on_multiple="zero").score(
        "p", text, [], [], boxes=LABEL, geometry=GEO
    )
    assert (zero.value, zero.reason) == (0.0, "multiple_boxes")


def test_partly_outside_box_is_clipped_and_flagged():
    # model box (161,119)-(700,357) clips to x2 = 644 -> original (160,120)-(640,360):
    # IoU with the label = (320*240) / (480*240) = 2/3
    r = GroundingReward("qwen2_5_vl").score(
        "p", '{"bbox_2d": [161, 119, 700, 357]}', [], [], boxes=LABEL, geometry=GEO
    )
    assert r.value == pytest.approx(2 / 3) and r.details["clipped"] is True


def test_giou_acc_and_multi_box_metrics():
    # half the label box: IoU = 0.5; enclosure = union, so GIoU = IoU
    half = '{"bbox_2d": [161, 119, 322, 357]}'  # original (160,120)-(320,360)
    kw = dict(boxes=LABEL, geometry=GEO)
    assert GroundingReward("qwen2_5_vl", "iou")("p", half, [], [], **kw) == pytest.approx(0.5)
    assert GroundingReward("qwen2_5_vl", "giou")("p", half, [], [], **kw) == pytest.approx(0.5)
    assert GroundingReward("qwen2_5_vl", "acc")("p", half, [], [], **kw) == 1.0
    assert GroundingReward("qwen2_5_vl", "acc", iou_threshold=0.6)("p", half, [], [], **kw) == 0.0
    # two labels, one exact prediction plus one NaN box: precision 1/2 (invalid counts), recall 1/2
    labels = [LABEL, [0, 0, 64, 48]]
    text = '[{"bbox_2d": [161, 119, 483, 357]}, {"bbox_2d": [NaN, 0, 1, 1]}]'
    f1 = GroundingReward("qwen2_5_vl", "box_f1").score(
        "p", text, [], [], boxes=labels, geometry=GEO
    )
    assert f1.value == pytest.approx(0.5) and f1.details["precision"] == 0.5
    miou = GroundingReward("qwen2_5_vl", "mean_iou")("p", text, [], [], boxes=labels, geometry=GEO)
    assert miou == pytest.approx(1.0 * 0.5)  # mean matched IoU 1.0 x recall 1/2


def test_centre_metrics_pay_for_position_not_size():
    kw = dict(boxes=LABEL, geometry=GEO)  # label (160,120)-(480,360) in a 640 x 480 image
    # a miss centred 160 px right of the label's centre (0.25 of the width), two sizes; the model
    # frame's integer coordinates land within 0.5 px of the original boxes named (tolerance 1e-3)
    small = '{"bbox_2d": [443, 218, 523, 258]}'  # original (440,220)-(520,260)
    large = '{"bbox_2d": [362, 99, 604, 377]}'  # original (360,100)-(600,380): overlaps
    far = '{"bbox_2d": [564, 377, 644, 476]}'  # original (560,380)-(640,480)
    centre = GroundingReward("qwen2_5_vl", "centre")
    closeness = 1 - 0.25 / 2**0.5
    assert centre("p", small, [], [], **kw) == pytest.approx(closeness, abs=1e-3)
    assert centre("p", large, [], [], **kw) == pytest.approx(closeness, abs=1e-3)
    assert centre("p", far, [], [], **kw) < closeness
    assert centre("p", '{"bbox_2d": [161, 119, 483, 357]}', [], [], **kw) == pytest.approx(1.0)
    scored = centre.score("p", large, [], [], **kw)
    iou = (120 * 240) / (320 * 240 + 240 * 280 - 120 * 240)
    assert scored.details["iou"] == pytest.approx(iou, abs=1e-3)
    assert scored.details["centre"] == pytest.approx(closeness, abs=1e-3)
    none = centre.score("p", "no box", [], [], **kw)
    assert (none.value, none.reason) == (0.0, "no_box")


def test_answer_tag_and_label_frame():
    r = GroundingReward("qwen3_vl", label_frame="norm1000")
    text = (
        '<think>{"bbox_2d": [0, 0, 1, 1]}</think><answer>{"bbox_2d": [250, 250, 750, 750]}</answer>'
    )
    # label already in 0..1000, no geometry needed
    assert r("p", text, [], [], boxes=[250, 250, 750, 750]) == pytest.approx(1.0)


def test_data_errors_raise_with_the_field_name():
    r = GroundingReward("qwen2_5_vl")
    with pytest.raises(KeyError, match="boxes"):
        r("p", '{"bbox_2d": [1, 2, 3, 4]}', [], [], geometry=GEO)
    with pytest.raises(ValueError, match="invalid box"):
        r("p", '{"bbox_2d": [1, 2, 3, 4]}', [], [], boxes=[5, 5, 1, 1], geometry=GEO)
    with pytest.raises(ValueError, match="geometry"):
        r("p", '{"bbox_2d": [1, 2, 3, 4]}', [], [], boxes=LABEL)
    with pytest.raises(ValueError, match="metric must be one of"):
        GroundingReward("qwen2_5_vl", "ap")


def test_point_in_box():
    r = PointInBoxReward("molmo")
    # 50% / 50% -> (320, 240) original: inside; 10%/10% -> (64, 48): outside
    assert (
        r("p", '<point x="50" y="50" alt="c">c</point>', [], [], boxes=LABEL, geometry=GEO) == 1.0
    )
    assert (
        r("p", '<point x="10" y="10" alt="c">c</point>', [], [], boxes=LABEL, geometry=GEO) == 0.0
    )
    none = r.score("p", "no idea", [], [], boxes=LABEL, geometry=GEO)
    assert (none.value, none.reason) == (0.0, "no_point")
    q = PointInBoxReward("qwen2_5_vl")  # point_2d in model pixels: (322, 238) -> (320, 240)
    assert q("p", '{"point_2d": [322, 238]}', [], [], boxes=LABEL, geometry=GEO) == 1.0


FRAGMENTS = ['{"bbox_2d": [', "]", "}", ",", "NaN", "-5", "161", "1e9", "700", "[", "<answer>",
             "</answer>", "```json", '"point_2d": [', " ", "x"]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
    ),
    st.sampled_from(["iou", "giou", "acc", "centre", "box_f1", "mean_iou"]),
)
def test_grounding_never_raises_and_stays_in_range(text, metric):
    r = GroundingReward("qwen2_5_vl", metric).score("p", text, [], [], boxes=LABEL, geometry=GEO)
    low = -1.0 if metric == "giou" else 0.0
    assert low <= r.value <= 1.0 and math.isfinite(r.value)
    if r.value == low:
        # no silent zeros: a minimal value without a reason must come from a real, valid box
        assert r.reason is not None or r.details["num_boxes"] > 0


def test_mean_iou_reward_takes_the_better_matched_pair():
    r = GroundingReward("plain", "mean_iou", plain_frame="norm1000", label_frame="norm1000")
    text = "[2, 5, 5, 9] [3, 8, 6, 12]"
    assert r("p", text, [], [], boxes=[[2, 5, 5, 7], [2, 6, 6, 9]]) == pytest.approx(0.30)


@pytest.mark.parametrize("metric", ["iou", "giou", "acc"])
def test_empty_label_list_for_a_single_box_metric_names_the_field(metric):
    r = GroundingReward("plain", metric, plain_frame="norm1000", label_frame="norm1000",
                        boxes_key="gt_boxes")  # fmt: skip
    with pytest.raises(ValueError, match=r"task_data\['gt_boxes'\] is empty") as e:
        r("p", "[1, 2, 3, 4]", [], [], gt_boxes=[])
    assert "zero-size" not in str(e.value)
    with pytest.raises(ValueError, match=r"task_data\['boxes'\] is empty"):
        PointInBoxReward("molmo", label_frame="norm1000")("p", '<point x="1" y="2">a</point>', [],
                                                          [], boxes=[])  # fmt: skip


@pytest.mark.parametrize("metric", ["box_f1", "mean_iou"])
def test_empty_label_list_for_a_multi_box_metric_gives_a_reason(metric):
    r = GroundingReward("plain", metric, plain_frame="norm1000", label_frame="norm1000")
    wrong = r.score("p", "[1, 2, 3, 4]", [], [], boxes=[])
    assert (wrong.value, wrong.reason) == (0.0, "empty_labels:boxes")
    right = r.score("p", "nothing to see", [], [], boxes=[])
    assert (right.value, right.reason) == (1.0, "empty_labels:boxes")


def test_label_boxes_and_geometry_from_numpy_columns_read_as_lists():
    import numpy as np

    from vlrollout.rewards.plain import PlainReward

    geometry = [
        {"original_width": 168, "original_height": 126, "model_width": 168, "model_height": 126}
    ]
    reward = PlainReward("iou", family="qwen2_vl")
    want = reward.score("(310,95),(470,310)", boxes=[[52, 12, 79, 39]], geometry=geometry)
    assert want[1] is None and want[0] > 0.9
    parquet_boxes = np.empty(1, dtype=object)
    parquet_boxes[0] = np.array([52.0, 12.0, 79.0, 39.0])
    for boxes in (np.array([[52, 12, 79, 39]]), [np.array([52, 12, 79, 39])], parquet_boxes):
        for geo in (geometry, np.array(geometry, dtype=object)):
            assert reward.score("(310,95),(470,310)", boxes=boxes, geometry=geo) == want


def test_mean_iou_charges_extra_boxes_as_it_charges_missing_ones():
    """Spraying boxes must not pay: one right box among 46 scores 1/46, as one right box of 46
    labels does (the matched IoUs over the larger of the two counts)."""
    r = GroundingReward("plain", "mean_iou", plain_frame="norm1000", label_frame="norm1000")
    junk = " ".join(f"[{i}, {i}, {i + 1}, {i + 1}]" for i in range(100, 145))
    assert r("p", f"[2, 5, 5, 9] {junk}", [], [], boxes=[[2, 5, 5, 9]]) == pytest.approx(1 / 46)
    labels = [[2, 5, 5, 9]] + [[i, i, i + 1, i + 1] for i in range(500, 545)]
    assert r("p", "[2, 5, 5, 9]", [], [], boxes=labels) == pytest.approx(1 / 46)


@pytest.mark.parametrize("metric", ["iou", "giou", "acc", "box_f1", "mean_iou"])
def test_a_zero_area_label_box_is_refused_naming_it(metric):
    r = GroundingReward("plain", metric, plain_frame="norm1000", label_frame="norm1000")
    with pytest.raises(ValueError, match=r"zero-area box \(2.0, 5.0, 2.0, 9.0\)"):
        r("p", "[2, 5, 5, 9]", [], [], boxes=[[2, 5, 2, 9]])


@pytest.mark.parametrize("metric", ["iou", "giou"])
def test_a_label_box_wholly_outside_the_image_is_refused_naming_it(metric):
    """Every box the model can draw on the image has IoU 0 with it: a data error, as a zero-area
    label is, not a 0 for the completion."""
    geo = [{"original_width": 640, "original_height": 480, "model_width": 644, "model_height": 476}]
    r = GroundingReward("qwen2_5_vl", metric)
    completion = '{"bbox_2d": [100, 100, 300, 300]}'
    with pytest.raises(
        ValueError, match=r"box \(700.0, 500.0, 900.0, 700.0\) that lies outside the 640x480 image"
    ):
        r("p", completion, [], [], boxes=[700, 500, 900, 700], geometry=geo)
    partly_inside = r("p", completion, [], [], boxes=[600, 400, 900, 700], geometry=geo)
    assert -1.0 < partly_inside < 0.0 if metric == "giou" else partly_inside == 0.0


@pytest.mark.parametrize(
    "completion",
    ["I cannot see it.", '{"bbox_2d": [100, 100, 300, 300]}', "[]"],
    ids=["no box", "a box", "empty list"],
)
def test_a_label_no_completion_can_be_scored_against_fails_every_completion_alike(completion):
    """A label off the image, written in fractions, or an item without the image: the item is
    broken whatever the model writes. A completion without a box scored 0 (accepted) while one
    with a box raised, so the group kept only its failures."""
    r = GroundingReward("qwen2_5_vl", "iou")
    geo = [{"original_width": 300, "original_height": 200, "model_width": 308, "model_height": 196}]
    for boxes, geometry, words in (
        ([320, 10, 400, 90], geo, "outside the 300x200 image"),
        ([0.25, 0.1, 0.75, 0.6], geo, "fractions"),
        ([30, 10, 90, 60], None, "geometry"),
    ):
        with pytest.raises(ValueError, match=words):
            r("p", completion, [], [], boxes=boxes, **({"geometry": geometry} if geometry else {}))


def test_a_label_partly_off_the_image_is_clipped_as_the_prediction_is():
    """On a 300 x 200 image, the label [250, 50, 350, 150] shows as [250, 50, 300, 150]. The
    prediction is clipped to the image, so the label is too: drawing the label, or its visible
    part, is IoU 1 (it was 0.5). Hand-derived: a prediction [275, 50, 300, 150] covers half the
    visible part, IoU 0.5."""
    r = GroundingReward("plain", "iou", plain_frame="original")
    geo = [{"original_width": 300, "original_height": 200, "model_width": 300, "model_height": 200}]
    label = [250, 50, 350, 150]
    for pred, want in (("[250, 50, 350, 150]", 1.0), ("[250, 50, 300, 150]", 1.0),
                       ("[275, 50, 300, 150]", 0.5)):  # fmt: skip
        assert r("p", pred, [], [], boxes=label, geometry=geo) == pytest.approx(want), pred
    giou = GroundingReward("plain", "giou", plain_frame="original")
    assert giou("p", "[250, 50, 300, 150]", [], [], boxes=label, geometry=geo) == pytest.approx(1.0)


def test_labels_in_a_fraction_frame_are_not_fractions_by_mistake():
    """0-1 labels are right when the label frame is norm1: only pixel frames refuse them."""
    r = GroundingReward("plain", "iou", plain_frame="norm1", label_frame="norm1")
    assert r("p", "[0.25, 0.1, 0.75, 0.6]", [], [], boxes=[0.25, 0.1, 0.75, 0.6]) == 1.0


@pytest.mark.parametrize("completion", ["Nothing there.", '{"point_2d": [120, 80]}'])
def test_point_in_box_refuses_an_item_it_cannot_score_for_every_completion(completion):
    """As the box rewards: no geometry, or a label off the image, fails with or without a point."""
    r = PointInBoxReward("qwen2_5_vl")
    geo = [{"original_width": 300, "original_height": 200, "model_width": 308, "model_height": 196}]
    for boxes, kwargs, words in (
        ([30, 10, 90, 60], {}, "geometry"),
        ([310, 10, 400, 90], {"geometry": geo}, "outside the 300x200 image"),
    ):
        with pytest.raises(ValueError, match=words):
            r("p", completion, [], [], boxes=boxes, **kwargs)


@pytest.mark.parametrize("box", [[True, 43, 83, 81], [1, 2, "3", 4]], ids=["bool", "text"])
def test_a_label_coordinate_that_is_not_a_number_is_refused(box):
    """``true`` read as 1.0 scored against a box the annotation never gave; validate-data
    already refuses it, and the box parser refuses it in a prediction."""
    r = GroundingReward("plain", "iou", plain_frame="norm1000", label_frame="norm1000")
    with pytest.raises(ValueError, match=r"task_data\['boxes'\]"):
        r("p", "[1, 2, 3, 4]", [], [], boxes=box)


@pytest.mark.parametrize("family", ["qwen2_vl", "internvl", "glm4v", "paligemma", "florence2"])
def test_a_point_reward_for_a_family_that_writes_no_points_is_refused(family):
    """Its parser never yields a point: every completion scored 0 (no_point), silently."""
    with pytest.raises(ValueError, match="writes no points"):
        PointInBoxReward(family)


def test_a_box_reward_for_a_family_that_writes_only_points_is_refused():
    with pytest.raises(ValueError, match="writes points, not boxes"):
        GroundingReward("molmo", "iou")


@pytest.mark.parametrize("family", ["qwen3_vl_moe", "Qwen3-VL", "qwen2.5-vl", "qwen3_5", "Molmo"])
def test_a_point_reward_takes_every_name_of_a_family_whose_parser_reads_points(family):
    """The check reads the family's parser, as ``get_parser`` resolves the name."""
    PointInBoxReward(family)


@pytest.mark.parametrize("family", ["Molmo", "MOLMO"])
def test_a_box_reward_for_a_points_only_family_is_refused_in_any_spelling(family):
    with pytest.raises(ValueError, match="writes points, not boxes"):
        GroundingReward(family, "iou")


@pytest.mark.parametrize(
    "completion", ["I cannot see it.", '{"bbox_2d": [1, 2, 300, 400]}', '{"point_2d": [375, 350]}']
)
def test_a_conversion_without_its_geometry_fails_every_completion_alike(completion):
    """A pixel-frame answer against norm1000 labels needs the image geometry: refused before the
    completion is read, not only for completions that hold a box."""
    for reward in (
        GroundingReward("qwen2_5_vl", "iou", label_frame="norm1000"),
        GroundingReward("plain", "iou", plain_frame="model", label_frame="norm1000"),
        PointInBoxReward("qwen2_5_vl", label_frame="norm1000"),
    ):
        with pytest.raises(ValueError, match="needs the image geometry"):
            reward("p", completion, [], [], boxes=[250, 200, 500, 500])


@pytest.mark.parametrize("completion", ["None here.", '{"point_2d": [375, 350]}'])
def test_point_in_box_refuses_fraction_labels_in_a_pixel_frame(completion):
    geo = [{"original_width": 400, "original_height": 300, "model_width": 800, "model_height": 600}]
    with pytest.raises(ValueError, match="fractions"):
        PointInBoxReward("qwen3_vl")(
            "p", completion, [], [], boxes=[0.25, 0.2, 0.5, 0.5], geometry=geo
        )


@pytest.mark.parametrize("completion", ["None here.", '{"bbox_2d": [0, 0, 1000, 1000]}'])
def test_pixel_labels_declared_in_fractions_are_refused(completion):
    """A whole-image answer had scored 1.0 against a pixel label clipped to the 1x1 frame."""
    for reward, box in (
        (GroundingReward("qwen3_vl", "iou", label_frame="norm1"), [0, 0, 200, 150]),
        (GroundingReward("qwen3_vl", "iou", label_frame="norm1"), [20, 30, 200, 150]),
        (PointInBoxReward("qwen3_vl", label_frame="norm1"), [0, 0, 200, 150]),
    ):
        with pytest.raises(ValueError, match="above 1"):
            reward("p", completion, [], [], boxes=box)


@pytest.mark.parametrize("image_index", [-1, 1.5, "0", True])
def test_an_image_index_that_is_not_a_non_negative_int_is_refused(image_index):
    with pytest.raises(ValueError, match="image_index"):
        GroundingReward("qwen2_5_vl", "iou", image_index=image_index)
    with pytest.raises(ValueError, match="image_index"):
        PointInBoxReward("qwen2_5_vl", image_index=image_index)
