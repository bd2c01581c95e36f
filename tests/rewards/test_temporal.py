"""The temporal IoU reward: answer forms, frame conversion, failure reasons, label checks."""

from __future__ import annotations

import math

import pytest

from vlrollout.rewards.temporal import TemporalIoUReward, label_segments, temporal_iou
from vlrollout.rewards.temporal_parsing import parse_segments

# 8 sampled frames at 2 fps (timestamps 0.0 .. 3.5): the clip is 4 s long.
TIMING = [{"timestamps_s": [i / 2 for i in range(8)], "fps": 2.0}]


def _score(text, reward=None, **task):
    task.setdefault("segments", [1.0, 2.0])
    return (reward or TemporalIoUReward()).score("p", text, [], [], **task)


def _read(text):
    return [(a.value, a.unit, b.value, b.unit) for a, b in parse_segments(text).segments]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("[1.5, 3.0]", [(1.5, None, 3.0, None)]),
        ("(1.5,3)", [(1.5, None, 3.0, None)]),
        ("from 1.5s to 3.0s", [(1.5, "seconds", 3.0, "seconds")]),
        ("1.5-3.0", [(1.5, None, 3.0, None)]),
        ("1.5 \u2013 3.0 s", [(1.5, None, 3.0, "seconds")]),
        ("between 1.5 and 3 seconds.", [(1.5, None, 3.0, "seconds")]),
        ("1500ms until 3000 ms", [(1.5, "seconds", 3.0, "seconds")]),
        ("0:01.5 - 0:03", [(1.5, "seconds", 3.0, "seconds")]),
        ("1:00:00 to 1:00:02", [(3600.0, "seconds", 3602.0, "seconds")]),
        ("frames 3 to 7", [(3.0, "frames", 7.0, None)]),
        ("frame 3 to frame 7", [(3.0, "frames", 7.0, "frames")]),
        ("frames [3, 7]", [(3.0, "frames", 7.0, None)]),
        ("3-7 frames", [(3.0, None, 7.0, "frames")]),
        ("[-1, 2]", [(-1.0, None, 2.0, None)]),
        ("[1, 2] and [3, 4]", [(1.0, None, 2.0, None), (3.0, None, 4.0, None)]),
        ("[1, 2, 3, 4]", []),  # a box, not a segment
        ("1.5 3.0", []),  # no separator
        ("at 1.5 the square, at 3.0", []),  # words between the values
        ("no numbers here", []),
    ],
)
def test_answer_forms(text, want):
    assert _read(text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2-3s, 5-6s", [(2.0, None, 3.0, "seconds"), (5.0, None, 6.0, "seconds")]),
        (
            "1.5s to 3s and 2s to 3s",
            [(1.5, "seconds", 3.0, "seconds"), (2.0, "seconds", 3.0, "seconds")],
        ),
        ("between 1 and 2, 3 and 4", [(1.0, None, 2.0, None), (3.0, None, 4.0, None)]),
        ("1-2, 3-4, 5-6", [(1.0, None, 2.0, None), (3.0, None, 4.0, None), (5.0, None, 6.0, None)]),
        ("1, 2, 3, 4", []),  # one separator throughout: a list, not segments
        ("1-2, 3-4, 5", []),  # an odd value out
        ("1-2, 3, 4-5", []),  # separators that do not alternate
    ],
)
def test_segments_joined_by_another_separator_are_each_read(text, want):
    """``2-3s, 5-6s``: a run whose separators alternate between a join inside each pair and
    another between pairs is a list of segments; any other run of more than two is not."""
    assert _read(text) == want
    assert bool(parse_segments(text).issues) == (not want)


def test_lists_are_named_in_issues():
    assert parse_segments("[1, 2, 3, 4]").issues == ["a list of 4 numbers is not a segment"]
    assert len(parse_segments("[1, 2, 3] " * 100).issues) == 16  # bounded


def test_temporal_iou_values():
    assert temporal_iou((0.0, 2.0), (1.0, 3.0)) == pytest.approx(1 / 3)
    assert temporal_iou((0.0, 1.0), (2.0, 3.0)) == 0.0
    assert temporal_iou((1.0, 2.0), (1.0, 2.0)) == 1.0
    assert temporal_iou((0.0, 4.0), (1.0, 2.0)) == 0.25
    assert temporal_iou((1.0, 1.0), (1.0, 1.0)) == 0.0


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("<answer>[1.0, 2.0]</answer>", 1.0),
        ("<think>maybe [0, 4]</think><answer>from 1.5s to 2.5s</answer>", 1 / 3),
        ("1-3 s", 0.5),
        ("0:01 - 0:02", 1.0),
        ("[2.0, 3.0]", 0.0),
    ],
)
def test_seconds_answers(text, value):
    res = _score(text)
    assert res.reason is None and res.value == pytest.approx(value)


def test_best_of_several_labels():
    res = _score("[2.5, 3.5]", segments=[[0.0, 1.0], [2.0, 3.0], [3.0, 4.0]])
    assert res.value == pytest.approx(1 / 3)
    assert _score("[3, 4]", segments=[[0.0, 1.0], [3.0, 4.0]]).value == 1.0


def test_frame_answers_convert_with_the_sampled_timestamps():
    frames = {"answer_unit": "frames", "video_timing": TIMING}
    # frames 2..3 cover [1.0, 2.0): one frame is 1 / fps long, the end frame included.
    assert _score("[2, 3]", **frames).value == 1.0
    assert _score("frame 2 to frame 2", **frames).value == pytest.approx(0.5)
    # Explicit seconds keep their unit in a frames task; explicit frames in a seconds task.
    assert _score("1.0s - 2.0s", **frames).value == 1.0
    assert _score("frames 2-3", video_timing=TIMING).value == 1.0
    # Uneven timestamps are used as given, not as index / fps.
    uneven = [{"timestamps_s": [0.0, 0.4, 1.0, 1.7], "fps": 2.0}]
    res = _score("[1, 2]", answer_unit="frames", video_timing=uneven, segments=[0.4, 1.5])
    assert res.value == 1.0 and res.details["segment_s"] == [0.4, 1.5]


def test_first_frame_and_video_index():
    one_based = TemporalIoUReward(unit="frames", first_frame=1)
    assert _score("[3, 4]", one_based, video_timing=TIMING).value == 1.0
    second = TemporalIoUReward(unit="frames", video_index=1)
    timing = [{"timestamps_s": [0.0, 10.0], "fps": 0.1}, TIMING[0]]
    assert _score("[2, 3]", second, video_timing=timing).value == 1.0
    with pytest.raises(ValueError, match="video_index=1 but task_data\\['video_timing'\\] has 1"):
        _score("[2, 3]", second, video_timing=TIMING)


def test_frame_length_without_fps_is_the_median_gap():
    timing = {"timestamps_s": [0.0, 0.5, 1.0, 1.5]}
    assert _score("[2, 3]", answer_unit="frames", video_timing=timing).value == 1.0


@pytest.mark.parametrize(
    ("text", "task", "reason"),
    [
        ("no answer", {}, "no_segment"),
        ("[1, 2, 3, 4]", {}, "no_segment"),
        ("[3, 1]", {}, "inverted_segment"),
        ("[2, 2]", {}, "degenerate_segment"),
        ("[" + "9" * 400 + ", 1]", {}, "non_finite_segment"),
        ("[5, 6]", {"video_timing": TIMING}, "segment_outside_video"),
        ("[-3, -1]", {}, "segment_outside_video"),
        ("[5, 6]", {"duration_s": 4.0}, "segment_outside_video"),
        ("frames 1-2", {}, "frames_without_timing"),
        ("[1.5, 3]", {"answer_unit": "frames", "video_timing": TIMING}, "non_integer_frame"),
        ("[6, 8]", {"answer_unit": "frames", "video_timing": TIMING}, "frame_out_of_range"),
        ("[-1, 2]", {"answer_unit": "frames", "video_timing": TIMING}, "frame_out_of_range"),
        ("[3, 2]", {"answer_unit": "frames", "video_timing": TIMING}, "inverted_segment"),
        ("frame 5 to 1s", {"video_timing": TIMING}, "inverted_segment"),
    ],
)
def test_failure_reasons(text, task, reason):
    res = _score(text, **task)
    assert (res.value, res.reason) == (0.0, reason)


def test_partly_outside_is_clipped_and_scored():
    res = _score("[-1, 2]")
    assert res.value == 1 / 2 and res.details["clipped"] is True
    res = _score("[1, 9]", video_timing=TIMING)  # the clip ends at 3.5 + 0.5 s
    assert res.details["segment_s"] == [1.0, 4.0] and res.value == pytest.approx(1 / 3)
    assert _score("[1, 9]", video_timing=[{**TIMING[0], "duration_s": 3.0}]).value == 0.5


def test_multiple_segments():
    assert _score("[1, 2] or [5, 6]").value == 1.0
    res = _score("[1, 2] or [5, 6]", TemporalIoUReward(on_multiple="zero"))
    assert (res.value, res.reason, res.details["num_segments"]) == (0.0, "multiple_segments", 2)


def test_acc_metric_thresholds_the_iou():
    acc = TemporalIoUReward("acc", iou_threshold=0.5)
    assert _score("[1.0, 3.0]", acc).value == 1.0  # IoU 0.5
    res = _score("[1.0, 3.5]", acc)
    assert res.value == 0.0 and res.reason is None and res.details["iou"] == pytest.approx(0.4)


def test_dataset_errors_raise_naming_the_field():
    with pytest.raises(KeyError, match="TemporalIoUReward needs task_data\\['segments'\\]"):
        TemporalIoUReward()("p", "[1, 2]", [], [])
    for bad in ([2, 1], [1, math.inf], [1, 2, 3], [], "x", [-1, 2]):
        with pytest.raises(ValueError, match="task_data\\['segments'\\]"):
            label_segments(bad)
    with pytest.raises(KeyError, match="frame answer needs task_data\\['video_timing'\\]"):
        _score("[1, 2]", answer_unit="frames")
    with pytest.raises(ValueError, match="answer_unit"):
        _score("[1, 2]", answer_unit="hours")
    with pytest.raises(ValueError, match="timestamps_s"):
        _score("[1, 2]", answer_unit="frames", video_timing=[{"fps": 2.0}])
    with pytest.raises(ValueError, match="one frame is unknown"):
        _score("[0, 0]", answer_unit="frames", video_timing=[{"timestamps_s": [0.0]}])


def test_a_label_that_starts_past_the_end_of_the_clip_is_a_data_error():
    """No answer inside the video could score it, so every episode would score 0 unnoticed."""
    with pytest.raises(ValueError, match=r"segment \[10.0, 12.0\] starts past the 4.0 s clip"):
        _score("[1, 2]", segments=[[1, 2], [10, 12]], video_timing=TIMING)
    with pytest.raises(ValueError, match="starts past the 3.0 s clip"):
        _score("[1, 2]", segments=[3, 4], duration_s=3.0)
    assert _score("[1, 2]", segments=[[1, 2], [3, 9]], video_timing=TIMING).value == 1.0


def test_constructor_rejects_bad_options():
    for kwargs, match in (
        ({"metric": "giou"}, "metric"),
        ({"unit": "hours"}, "unit"),
        ({"on_multiple": "last"}, "on_multiple"),
        ({"iou_threshold": 0.0}, "iou_threshold"),
        ({"unit": "frames", "first_frame": 2}, "first_frame"),
        ({"unit": "frames", "first_frame": -1}, "first_frame"),
        ({"unit": "frames", "first_frame": 0.5}, "first_frame"),
        ({"unit": "frames", "first_frame": "1"}, "first_frame"),
        ({"unit": "frames", "first_frame": True}, "first_frame"),
        ({"video_index": -1}, "video_index"),
        ({"video_index": 1.0}, "video_index"),
    ):
        with pytest.raises(ValueError, match=match):
            TemporalIoUReward(**kwargs)


@pytest.mark.parametrize(
    "text",
    [
        "from 1 to 2 minutes",
        "1-2 min",
        "from 1 min to 2",
        "between 60000 and 120000 ms",
        "60000 - 120000 milliseconds",
        "[60, 120] s",
    ],
)
def test_a_unit_written_on_one_end_scales_both(text):
    res = TemporalIoUReward().score("p", text, [], [], segments=[[60.0, 120.0]])
    assert res.reason is None and res.value == pytest.approx(1.0), (res, res.details)


def test_numbers_in_exponent_form_are_read_whole():
    """``2e0-3e0`` is the segment [2, 3], not [0, 3]; ``1e400`` is infinite, not 400."""
    ((start, end),) = parse_segments("2e0-3e0").segments
    assert (start.value, end.value) == (2.0, 3.0)
    ((start, end),) = parse_segments("[1e400, 3]").segments
    assert math.isinf(start.value) and end.value == 3.0
    reward = TemporalIoUReward()
    result = reward.score("p", "[1e400, 3]", [], [], segments=[[1.0, 3.0]])
    assert (result.value, result.reason) == (0.0, "non_finite_segment")


def test_a_label_running_past_the_clip_is_clipped_as_the_answer_is():
    """A 2.5 s clip labelled [1.25, 4.0]: the answer is clipped to the clip, so the label is too.
    The answer [1.25, 2.5] (all of the label the video shows) scores 1, and [1.25, 4.0] as well
    (it was 0.5); [1.875, 2.5] covers half of the shown part (hand-derived IoU 0.5)."""
    task = {"segments": [1.25, 4.0], "duration_s": 2.5}
    assert _score("[1.25, 2.5]", **task).value == pytest.approx(1.0)
    assert _score("[1.25, 4.0]", **task).value == pytest.approx(1.0)
    assert _score("[1.875, 2.5]", **task).value == pytest.approx(0.5)
    acc = TemporalIoUReward(metric="acc", iou_threshold=0.7)
    assert _score("[1.25, 2.5]", acc, **task).value == 1.0
