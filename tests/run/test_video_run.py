"""A video item through ``vlrollout run`` on the shipped tiny model, as a user runs it: the
episodes are accepted with the video's tensors (placeholder tokens as many as the grid implies,
not a text-only prompt), the report shows the frame strip, and a broken video is a rejection
counted with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.workflows.test_video_workflows import write_clip
from vlrollout import cli
from vlrollout.files import item_stem

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny-qwen2vl"


def _row(item_id: str, clip: str) -> dict:
    question = "<video>How many shapes appear? Answer with a number."
    return {"id": item_id, "messages": question, "videos": [clip], "answer": "1", "task": "count"}


@pytest.mark.slow
def test_a_video_item_runs_end_to_end(tmp_path):
    write_clip(tmp_path / "clip.mp4")
    (tmp_path / "broken.mp4").write_bytes(b"\x00" * 64)
    data = tmp_path / "data.jsonl"
    rows = [_row("clip", "clip.mp4"), _row("broken", "broken.mp4")]  # relative to the data file
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    flags = ["--data", str(data), "--output", str(out), "--model", str(MODEL), "--seed", "1"]
    flags += ["--group-size", "2", "--max-new-tokens", "4", "--reward", "count", "--no-progress"]
    settings = ["video_min_pixels=3136", "video_max_pixels=3136", "video_max_frames=4"]
    assert cli.main(["run", *flags, *settings]) == 0

    summary = json.loads((out / "summary.json").read_text())
    assert summary["items"] == {"total": 2, "done": 2, "accepted": 1, "rejected": 1}
    assert summary["episodes"]["accepted"] == 2
    assert {r["id"] for r in summary["rejections"]} == {"broken"}
    assert sum(summary["episodes"]["rejected_by_reason"].values()) == 2

    traj = torch.load(out / "trajectories" / f"{item_stem('clip')}.pt", weights_only=False)
    mm = traj["multi_modal_input"][0]
    assert mm["video_grid_thw"].tolist() == [[2, 4, 4]]  # 4 frames of 56x56
    video_token_id = json.loads((MODEL / "config.json").read_text())["video_token_id"]
    for row in traj["input_ids"]:
        assert row.tolist().count(video_token_id) == int(mm["video_grid_thw"].prod()) // 4

    report = (out / "report.html").read_text()
    assert "video 1: 4 frames (as the model saw them)" in report
    assert "<img class=strip src='data:image/png;base64," in report
