"""The SGLang ``video_data`` path hands the engine every video tensor the served processor makes,
Qwen2.5-VL's seconds per temporal patch included (its M-RoPE spaces the frames by them)."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import torch

from tests.workflows.test_video_workflows import write_clip
from vlrollout.serve.state import ServerState
from vlrollout.testing.offline_processors import build_offline_processor
from vlrollout.workflows import FrameSampling


def test_video_data_keeps_second_per_grid_ts(tmp_path):
    processor = build_offline_processor("qwen2_5_vl")
    engine = SimpleNamespace(
        model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=4096)),
        processor=processor,
    )
    frames = FrameSampling(fps=2.0, max_frames=4, min_pixels=56 * 56, max_pixels=56 * 56)
    state = ServerState(engine, frames=frames)
    clip = write_clip(tmp_path / "clip.mp4", frames=4, fps=2)
    url = "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode()
    mm = state.video_tensors([url], "request")
    assert set(mm) == {"pixel_values_videos", "video_grid_thw", "second_per_grid_ts"}
    # Two frames per temporal patch at 2 sampled frames a second: one second per patch.
    assert torch.allclose(mm["second_per_grid_ts"].float(), torch.tensor([1.0]))
