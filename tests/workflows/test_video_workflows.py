"""Video items through the single-turn and multi-attempt workflows (offline-built Qwen2-VL
processor, scripted engine): the video tensors reach the engine and the trajectory, the frame
sampling settings reach the preprocessor, each video's timing reaches the reward, and a bad video
is a rejection with its reason."""

from __future__ import annotations

import asyncio

import av
import numpy as np
import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.workflow_executor import check_trajectory_format

from vlrollout.engine.factory import remote_engine
from vlrollout.testing.offline_processors import build_offline_processor
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import FrameSampling, VisionMultiAttemptWorkflow, VisionRLVRWorkflow

GCONFIG = GenerationHyperparameters(max_new_tokens=8)
SMALL = {"min_pixels": 56 * 56, "max_pixels": 56 * 56}  # 4 tokens (2x2 merged) per 2 frames
HERE = "tests.workflows.test_video_workflows"


def write_clip(path, frames: int = 4, size: int = 56, fps: int = 2):
    """A ``frames``-frame MPEG-4 clip at ``fps``: a red square moving left to right."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for k in range(frames):
            pixels = np.zeros((size, size, 3), np.uint8)
            x = k * (size - 16) // max(1, frames - 1)
            pixels[20:36, x : x + 16] = (255, 0, 0)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def frames_timed(prompt, completions, prompt_ids, completion_ids, video_timing=(), **kw):
    """How many sampled frames the first video's timing lists (-1: no timing reached us)."""
    return float(len(video_timing[0]["timestamps_s"])) if video_timing else -1.0


def never(prompt, completions, prompt_ids, completion_ids, **kw):
    return 0.0


def _item(clip, item_id="vid"):
    content = [{"type": "video"}, {"type": "text", "text": "Where does the square go?"}]
    return {"id": item_id, "messages": [{"role": "user", "content": content}], "videos": [clip]}


def _check_format(traj) -> bool:
    """AReaL's ``check_trajectory_format``, but for ``multi_modal_input``: AReaL 1.0.4 requires
    ``pixel_values`` in it, which a video-only prompt does not have (its tensors are
    ``pixel_values_videos`` and ``video_grid_thw``, checked by the callers)."""
    rows = traj["multi_modal_input"]
    assert rows and all(set(mm) >= {"pixel_values_videos", "video_grid_thw"} for mm in rows)
    return check_trajectory_format({k: v for k, v in traj.items() if k != "multi_modal_input"})


def _video_tokens_match_grid(ids, mm, processor) -> int:
    n = list(ids).count(processor.video_token_id)
    assert n == int(mm["video_grid_thw"].prod()) // processor.video_processor.merge_size**2
    return n


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return str(write_clip(tmp_path_factory.mktemp("video") / "clip.mp4"))


def test_single_turn_video_reaches_engine_trajectory_and_reward(tokenizer, qwen2vl_processor, clip):
    wf = VisionRLVRWorkflow(
        f"{HERE}.frames_timed", GCONFIG, tokenizer, qwen2vl_processor, frames=FrameSampling(**SMALL)
    )
    engine = ScriptedEngine([tokenizer.encode("right", add_special_tokens=False)])
    traj = asyncio.run(wf.arun_episode(engine, _item(clip)))
    assert wf.ledger.summary()["rejected_by_reason"] == {}
    assert _check_format(traj)
    mm = traj["multi_modal_input"][0]
    assert _video_tokens_match_grid(traj["input_ids"][0].tolist(), mm, qwen2vl_processor) > 0
    sent = engine.requests[0].metadata["multi_modal_input"]
    assert torch.equal(sent["pixel_values_videos"], mm["pixel_values_videos"])
    assert int(mm["video_grid_thw"][0, 0]) * 2 == 4  # 4 frames, 2 per temporal patch
    assert float(traj["rewards"][0]) == 4.0  # the reward read four timestamps


def test_multi_attempt_keeps_the_video_in_every_turn(tokenizer, qwen2vl_processor, clip):
    wf = VisionMultiAttemptWorkflow(
        f"{HERE}.never",
        GCONFIG,
        tokenizer,
        qwen2vl_processor,
        2,
        0.9,
        frames=FrameSampling(**SMALL),
    )
    answer = tokenizer.encode("left", add_special_tokens=False) + [tokenizer.eos_token_id]
    engine = ScriptedEngine([answer, answer])
    traj = asyncio.run(wf.arun_episode(engine, _item(clip)))
    assert _check_format(traj)
    assert len(engine.requests) == 2
    for req in engine.requests:
        mm = req.metadata["multi_modal_input"]
        _video_tokens_match_grid(req.input_ids, mm, qwen2vl_processor)


def test_frame_settings_reach_the_preprocessor(tokenizer, qwen2vl_processor, clip):
    def grid(frames):
        wf = VisionRLVRWorkflow(
            f"{HERE}.never", GCONFIG, tokenizer, qwen2vl_processor, frames=frames
        )
        engine = ScriptedEngine([[tokenizer.eos_token_id]])
        asyncio.run(wf.arun_episode(engine, _item(clip)))
        return engine.requests[0].metadata["multi_modal_input"]["video_grid_thw"][0].tolist()

    assert grid(FrameSampling(**SMALL)) == [2, 4, 4]  # 14-pixel patches of 56x56 frames
    assert grid(FrameSampling(max_frames=2, **SMALL)) == [1, 4, 4]
    assert grid(FrameSampling(min_pixels=112 * 112, max_pixels=112 * 112)) == [2, 8, 8]


def test_a_bad_video_is_rejected_with_its_reason(tokenizer, qwen2vl_processor, tmp_path):
    (tmp_path / "broken.mp4").write_bytes(b"not a video at all")
    wf = VisionRLVRWorkflow(
        f"{HERE}.never", GCONFIG, tokenizer, qwen2vl_processor, frames=FrameSampling(**SMALL)
    )
    engine = ScriptedEngine([[tokenizer.eos_token_id]])
    assert asyncio.run(wf.arun_episode(engine, _item(str(tmp_path / "broken.mp4"), "bad"))) is None
    summary = wf.ledger.summary()
    assert summary["accepted"] == 0 and summary["rejected"] == 1
    (rejection,) = summary["rejections"]
    assert rejection["item"] == "item bad" and "video" in rejection["reason"] + rejection["detail"]
    assert engine.requests == []  # never run as a text-only prompt


def test_frame_settings_without_a_processor_are_refused(tokenizer):
    with pytest.raises(ValueError, match="video frame settings need a multimodal processor"):
        VisionRLVRWorkflow(f"{HERE}.never", GCONFIG, tokenizer, None, frames=FrameSampling(fps=1.0))
    with pytest.raises(ValueError, match="video fps must be a positive finite number"):
        FrameSampling(fps=float("nan"))


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_a_video_for_areal_remote_clients_is_rejected_not_sent_blind(
    tokenizer, qwen2vl_processor, clip, kind
):
    wf = VisionRLVRWorkflow(
        f"{HERE}.never", GCONFIG, tokenizer, qwen2vl_processor, frames=FrameSampling(**SMALL)
    )
    engine = remote_engine(kind)  # never connected: the episode must stop before any request
    assert asyncio.run(wf.arun_episode(engine, _item(clip))) is None
    (rejection,) = wf.ledger.summary()["rejections"]
    assert rejection["reason"] == "video_unsupported"
    assert "no video field" in rejection["detail"]


@pytest.mark.parametrize("family", ["glm4v", "internvl"])
def test_families_that_spell_frames_as_images_run_video_items(family, clip):
    """GLM-4.1V and InternVL write each video frame with their image placeholder: a video item
    is accepted (never counted as images missing) and its tensors reach the engine."""
    processor = build_offline_processor(family)
    wf = VisionRLVRWorkflow(f"{HERE}.never", GCONFIG, processor.tokenizer, processor)
    engine = ScriptedEngine([[processor.tokenizer.eos_token_id]])
    traj = asyncio.run(wf.arun_episode(engine, _item(clip)))
    assert wf.ledger.summary()["rejected_by_reason"] == {}
    assert traj is not None
    sent = engine.requests[0].metadata["multi_modal_input"]
    # GLM-4.1V sends the clip as video patches; InternVL as one pixel_values tile per frame.
    frames = {"glm4v": ("pixel_values_videos", 32), "internvl": ("pixel_values", 4)}[family]
    assert sent[frames[0]].shape[0] == frames[1]


def test_the_tool_workflow_runs_a_video_only_item(tokenizer, qwen2vl_processor, clip):
    from vlrollout.workflows import ToolUseWorkflow

    wf = ToolUseWorkflow(
        f"{HERE}.frames_timed", GCONFIG, tokenizer, qwen2vl_processor, frames=FrameSampling(**SMALL)
    )
    answer = tokenizer.encode("right", add_special_tokens=False) + [tokenizer.eos_token_id]
    engine = ScriptedEngine([answer])
    traj = asyncio.run(wf.arun_episode(engine, _item(clip)))
    assert wf.ledger.summary()["rejected_by_reason"] == {}
    assert _check_format(traj)
    assert float(traj["rewards"][0]) == 4.0  # the reward read the four frames' timestamps
