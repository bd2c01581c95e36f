"""The synthetic video generator: determinism, labels checked against the decoded clips, files.

The labels are checked independently of the generator: each clip is decoded with PyAV, the red
square is located in every frame, and the crossing segment is computed from those positions.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import av
import numpy as np
import pytest

from vlrollout.jsonl import read_jsonl
from vlrollout.rewards.answer import CountReward
from vlrollout.rewards.temporal import TemporalIoUReward
from vlrollout.tiny.synthetic import SAMPLES_SEED
from vlrollout.tiny.synthetic import main as make_samples
from vlrollout.tiny.synthetic_video import (
    COLOURS,
    FPS,
    FRAME_SIZE,
    NUM_FRAMES,
    VIDEO_DATA_NAME,
    generate_video_items,
    make_video_item,
    write_video_dataset,
)

SAMPLES = Path(__file__).resolve().parents[2] / "assets" / "samples"


def _decode(data: bytes) -> list[tuple[float, np.ndarray]]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "mpeg4"
        return [(float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(stream)]


def _mask(frame: np.ndarray, rgb) -> np.ndarray:
    """Pixels within a small distance of ``rgb`` (the codec is lossy)."""
    return np.abs(frame.astype(int) - np.array(rgb)).max(axis=-1) <= 40


def _crossing_from_pixels(frames) -> tuple[float, float]:
    """The seconds during which the decoded red square covers the vertical centre line.

    Its centre (the middle of its pixels' bounding box) and width are measured in each frame;
    between frames it moves linearly (the generator's contract), so the covered times are found on
    a 1 ms grid of the interpolation.
    """
    times, centres, widths = [], [], []
    for t, frame in frames:
        ys, xs = np.nonzero(_mask(frame, COLOURS["red"]))
        times.append(t)
        centres.append((xs.min() + xs.max() + 1) / 2)  # pixel x covers [x, x + 1)
        widths.append(xs.max() + 1 - xs.min())
    width = float(np.median(widths))
    grid = np.arange(0.0, times[-1], 0.001)
    covered = np.abs(np.interp(grid, times, centres) - FRAME_SIZE / 2) <= width / 2
    return float(grid[covered][0]), float(grid[covered][-1])


def _without_videos(item):
    return {k: v for k, v in item.items() if k != "videos"}


def test_same_seed_same_items_and_bytes():
    a, b = generate_video_items(6, seed=5), generate_video_items(6, seed=5)
    assert [_without_videos(x) for x in a] == [_without_videos(x) for x in b]
    assert [x["videos"] for x in a] == [x["videos"] for x in b]
    c = generate_video_items(6, seed=6)
    assert sum(x["videos"] != y["videos"] for x, y in zip(a, c, strict=True)) >= 5
    assert make_video_item("temporal", 5, 4)["videos"] == a[4]["videos"]


@pytest.mark.parametrize("seed", [0, 1])
def test_crossing_segment_matches_the_decoded_motion(seed):
    items = generate_video_items(16, seed=seed, tasks=("temporal",))
    for item in items:
        frames = _decode(item["videos"][0])
        assert [t for t, _ in frames] == [i / FPS for i in range(NUM_FRAMES)]
        assert frames[0][1].shape == (FRAME_SIZE, FRAME_SIZE, 3)
        ((start, end),) = item["segments"]
        got = _crossing_from_pixels(frames)
        assert got == pytest.approx((start, end), abs=0.002), item["id"]
        assert 0 < start < end < NUM_FRAMES / FPS
    # Both directions and both speeds occur.
    steps = {item["shapes"][0]["motion"]["step"] for item in items}
    assert {s > 0 for s in steps} == {True, False} and {abs(s) for s in steps} == {2, 4}


def test_count_matches_the_colours_seen_in_the_decoded_frames():
    items = generate_video_items(20, seed=3, tasks=("video_count",))
    for item in items:
        frames = _decode(item["videos"][0])
        seen = {}
        for colour, rgb in COLOURS.items():
            present = [i for i, (_, f) in enumerate(frames) if _mask(f, rgb).sum() >= 30]
            if present:
                seen[colour] = [present[0], present[-1]]
        want = {s["colour"]: s["frames"] for s in item["shapes"]}
        assert seen == want, item["id"]
        assert item["answer"] == len(seen) and item["solution"] == str(len(seen))
    assert {item["answer"] for item in items} == {1, 2, 3, 4}


def test_reference_answers_score_full_marks():
    for item in generate_video_items(6, seed=2):
        task = {k: v for k, v in item.items() if k not in ("messages", "videos")}
        reward = TemporalIoUReward() if item["task"] == "temporal" else CountReward()
        assert reward("p", item["solution"], [], [], **task) == 1.0, item["id"]


def test_write_video_dataset(tmp_path):
    items = generate_video_items(4, seed=9)
    path = write_video_dataset(items, tmp_path)
    rows = read_jsonl(path)
    for item, row in zip(items, rows, strict=True):
        assert row["videos"] == [f"videos/{item['id']}.mp4"]
        assert (tmp_path / row["videos"][0]).read_bytes() == item["videos"][0]
        assert _without_videos(row) == json.loads(json.dumps(_without_videos(item)))
        assert row["messages"][0]["content"][0] == {"type": "video"}


def test_make_samples_writes_images_and_videos(tmp_path):
    make_samples(["--out", str(tmp_path), "-n", "2", "--videos", "3"])
    assert len(read_jsonl(tmp_path / "data.jsonl")) == 2
    assert len(read_jsonl(tmp_path / VIDEO_DATA_NAME)) == 3
    assert len(list((tmp_path / "videos").glob("*.mp4"))) == 3
    make_samples(["--out", str(tmp_path / "none"), "-n", "1", "--videos", "0"])
    assert not (tmp_path / "none" / VIDEO_DATA_NAME).exists()


def test_committed_samples_are_the_generators_output(tmp_path):
    # Regenerate with: vlrollout make-samples --out assets/samples
    make_samples(["--out", str(tmp_path)])
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file():
            rel = path.relative_to(tmp_path)
            assert (SAMPLES / rel).read_bytes() == path.read_bytes(), rel
    sizes = [p.stat().st_size for p in (SAMPLES / "videos").glob("*.mp4")]
    assert len(sizes) == 6 and max(sizes) < 8_000


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown video task"):
        make_video_item("detect", 0, 0)
    with pytest.raises(ValueError, match="n must be >= 0"):
        generate_video_items(-1, seed=0)
    assert SAMPLES_SEED == 2
