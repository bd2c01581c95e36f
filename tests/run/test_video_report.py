"""The run report shows each video as a strip of the frames the model saw, recovered from the
saved trajectory's ``pixel_values_videos`` (Qwen2-VL, Qwen2.5-VL and Qwen3-VL layouts)."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
import pytest
import torch
from PIL import Image

from tests.workflows.test_video_workflows import write_clip
from vlrollout.files import atomic_write_json, item_stem
from vlrollout.processors.video_sampling import VideoSampling
from vlrollout.run.report import STRIP_FRAMES, STRIP_HEIGHT, frame_strip, write_report
from vlrollout.run.report_images import videos_seen_by_model
from vlrollout.run.runner import summarize
from vlrollout.testing.offline_processors import build_offline_processor

COLOURS = [(250, 0, 0), (0, 250, 0), (0, 0, 250), (250, 250, 0)]


def _video_tensors(processor, colours=COLOURS, size=56):
    frames = [np.full((size, size, 3), c, np.uint8) for c in colours]
    return dict(
        processor.video_processor(
            videos=[frames],
            size={"shortest_edge": size * size, "longest_edge": size * size},
            do_sample_frames=False,
            return_tensors="pt",
        )
    )


def _mean_colours(strip: Image.Image, n: int) -> list[tuple[int, ...]]:
    """The mean colour of each of the ``n`` thumbnails (square, 2 px apart) in ``strip``."""
    array = np.asarray(strip.convert("RGB")).astype(float)
    h = strip.height
    return [
        tuple(int(round(v / 10) * 10) for v in array[:, k * (h + 2) : k * (h + 2) + h].mean((0, 1)))
        for k in range(n)
    ]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_video_frames_come_back_from_the_trainer_tensors(family):
    processor = build_offline_processor(family)
    (frames,) = videos_seen_by_model(_video_tensors(processor, size=64), processor)
    assert [np.asarray(f)[10, 10].tolist() for f in frames] == [list(c) for c in COLOURS]
    assert videos_seen_by_model({}, processor) == []


def test_the_report_shows_a_strip_of_the_frames(qwen2vl_processor, tmp_path):
    item = {"id": "clip", "messages": "<video>Where does it go?", "videos": ["clip.mp4"]}
    mm = _video_tensors(qwen2vl_processor)
    (tmp_path / "trajectories").mkdir()
    torch.save({"multi_modal_input": [mm]}, tmp_path / "trajectories" / f"{item_stem('clip')}.pt")
    outcome = {"id": "clip", "status": "accepted", "generated_tokens": 1, "rejections": []}
    outcome["episodes"] = [{"turns": ["left"], "reward": 1.0}]
    atomic_write_json(tmp_path / "items" / f"{item_stem('clip')}.json", outcome)
    page = write_report(
        tmp_path, [item], summarize(tmp_path, [item], 0.0), processor=qwen2vl_processor
    ).read_text()
    assert "video 1: 4 frames (as the model saw them)" in page
    (src,) = re.findall(r"<img class=strip src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    strip = Image.open(io.BytesIO(base64.b64decode(src)))
    assert strip.height == STRIP_HEIGHT and strip.width == 4 * STRIP_HEIGHT + 3 * 2
    assert _mean_colours(strip, 4) == [tuple(round(v / 10) * 10 for v in c) for c in COLOURS]


def test_a_long_video_shows_at_most_the_strip_frames_with_its_first_and_last():
    frames = [Image.new("RGB", (20, 10), (k, 0, 0)) for k in range(0, 200, 10)]  # 20 frames
    strip = Image.open(io.BytesIO(base64.b64decode(frame_strip(frames).split(",", 1)[1])))
    shown = (strip.width + 2) // (2 * STRIP_HEIGHT + 2)
    assert 2 <= shown <= STRIP_FRAMES
    array = np.asarray(strip)
    assert array[0, 0, 0] == 0 and array[0, -1, 0] == 190


def test_without_model_tensors_the_strip_shows_the_sampled_source_frames(tmp_path):
    """Families whose video tensors are not turned back (LLaVA-OneVision, ...) show thumbnails
    of the frames the preprocessor samples; a video that cannot be read says why."""
    write_clip(tmp_path / "clip.mp4", frames=8)
    (tmp_path / "bad.mp4").write_bytes(b"\x00" * 32)
    items = [
        {"id": "ok", "messages": "<video>Go?", "videos": [str(tmp_path / "clip.mp4")]},
        {"id": "bad", "messages": "<video>Go?", "videos": [str(tmp_path / "bad.mp4")]},
    ]
    for item in items:
        outcome = {"id": item["id"], "status": "accepted", "generated_tokens": 1}
        outcome |= {"rejections": [], "episodes": [{"turns": ["left"], "reward": 0.0}]}
        atomic_write_json(tmp_path / "items" / f"{item_stem(item['id'])}.json", outcome)
    sampling = VideoSampling(fps=2.0, max_frames=4)
    summary = summarize(tmp_path, items, 0.0)
    page = write_report(tmp_path, items, summary, video_sampling=sampling).read_text()
    assert "video 1: 4 frames (sampled from the source)" in page
    assert page.count("<img class=strip") == 1
    assert "video 1 unavailable: video_" in page
    assert "frames (sampled" not in write_report(tmp_path, items, summary).read_text()
