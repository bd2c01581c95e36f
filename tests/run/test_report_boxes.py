"""The run report and the grounding reward judge boxes by one rule: a reversed box (``x2 < x1`` or
``y2 < y1``) is refused by both, with the reward's reason, and never drawn as a clean box."""

from __future__ import annotations

import pytest

from vlrollout.report_drawing import predicted_boxes
from vlrollout.rewards.grounding import GroundingReward
from vlrollout.run import report

GEOMETRY = [
    {"original_width": 200, "original_height": 100, "model_width": 200, "model_height": 100}
]
GOOD = "<|box_start|>(100,100),(500,500)<|box_end|>"  # qwen2_vl: 0..1000 of the image
QWEN2_VL = GroundingReward("qwen2_vl", "iou")


def test_a_reversed_label_box_is_refused_by_report_and_reward():
    labels = [[30, 10, 10, 40]]  # x2 < x1
    with pytest.raises(ValueError) as reward:
        GroundingReward("qwen2_vl", "iou").score("p", GOOD, [], [], boxes=labels, geometry=GEOMETRY)
    boxes, notes = report.label_boxes(labels)
    assert boxes == []  # not drawn: the reward never scored against it
    assert len(notes) == 1 and str(reward.value) in notes[0]
    assert "inverted_box" in notes[0]


def test_only_the_refused_label_box_is_left_out():
    boxes, notes = report.label_boxes([[10, 10, 30, 40], [30, 10, 10, 40], [1, 2, 3]])
    assert boxes == [(10.0, 10.0, 30.0, 40.0)]
    assert ["inverted_box" in n for n in notes] == [True, False]
    assert "[1, 2, 3]" in notes[1]


def test_a_reversed_predicted_box_is_refused_by_report_and_reward():
    reversed_box = "<|box_start|>(500,500),(100,100)<|box_end|>"
    result = GroundingReward("qwen2_vl", "iou").score(
        "p", reversed_box, [], [], boxes=[10, 10, 100, 50], geometry=GEOMETRY
    )
    boxes, problems = predicted_boxes(QWEN2_VL, reversed_box, GEOMETRY[0])
    assert result.reason == "inverted_box"
    assert boxes == []
    assert len(problems) == 1 and result.reason in problems[0]


def test_a_clean_predicted_box_is_drawn_in_image_pixels():
    assert predicted_boxes(QWEN2_VL, GOOD, GEOMETRY[0]) == ([(20.0, 10.0, 100.0, 50.0)], [])
