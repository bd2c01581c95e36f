"""The temporal reward on the committed video samples, with the timing the preprocessors record.

The frames a model sees are a sample of the clip (here 2 of every 4 per second); a frame answer is
converted with the sampled frames' timestamps, so "the frames that hold the crossing" scores the
IoU of those frames' time span with the label.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vlrollout.jsonl import read_jsonl
from vlrollout.processors.video_loading import load_video
from vlrollout.processors.video_sampling import VideoSampling
from vlrollout.rewards.registry import get_reward
from vlrollout.rewards.temporal import TemporalIoUReward

SAMPLES = Path(__file__).resolve().parents[2] / "assets" / "samples"
ITEMS = [row for row in read_jsonl(SAMPLES / "video.jsonl") if row["task"] == "temporal"]


@pytest.mark.parametrize("row", ITEMS, ids=[row["id"] for row in ITEMS])
def test_frame_answers_on_the_sampled_frames_of_a_sample_clip(row):
    clip = load_video(str(SAMPLES / row["videos"][0]), row["id"], VideoSampling(fps=2.0)).clip
    timing = clip.to_dict()
    assert timing["timestamps_s"] == [k / 2 for k in range(8)] and timing["duration_s"] == 4.0
    ((start, end),) = row["segments"]
    # The sampled frames whose time spans hold the segment: [a / 2, (b + 1) / 2] covers it.
    a, b = math.floor(start * 2), math.ceil(end * 2) - 1
    want = (end - start) / ((b + 1 - a) / 2)
    task = {"segments": row["segments"], "video_timing": [timing]}
    frames = TemporalIoUReward(unit="frames")
    assert frames("p", f"[{a}, {b}]", [], [], **task) == pytest.approx(want)
    assert frames("p", f"frames {a + 1} to {b + 1}", [], [], **task) < want  # one frame late
    one_based = TemporalIoUReward(unit="frames", first_frame=1)
    assert one_based("p", f"[{a + 1}, {b + 1}]", [], [], **task) == pytest.approx(want)
    # The reference answer in seconds, through the reward the samples name.
    video_task = get_reward("video_task")
    assert video_task("p", row["solution"], [], [], task="temporal", **task) == 1.0
