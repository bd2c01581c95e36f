"""Rollout logprobs from the local engine equal a training-style forward pass over the trajectory.

Tolerance 1e-4 in float32 on CPU: the engine decodes with a KV cache one token at a time while the
check runs one full forward pass, so the two differ only by float reassociation (measured ~3e-6).
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from PIL import Image

from vlrollout.checks import logprob_consistency
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.testing.tiny_model import tiny_qwen2vl
from vlrollout.workflows import RLVRWorkflow, VisionMultiAttemptWorkflow, VisionRLVRWorkflow
from vlrollout.workflows.preparation import FrameSampling

ATOL = 1e-4
REWARD = "tests.workflows.reward_fns.contains_answer"
TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def model_and_engine():
    model, processor = tiny_qwen2vl(seed=0)
    engine = LocalInferenceEngine(model, processor, seed=0)
    engine.initialize()
    yield model, processor, engine
    engine.destroy()


def _gconfig():
    return GenerationHyperparameters(max_new_tokens=8, min_new_tokens=8, temperature=TEMPERATURE)


def _vision_item():
    return {
        "id": "v",
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many?"}]}
        ],
        "images": [Image.new("RGB", (90, 60), (200, 30, 30))],
        "answer": "never-matches",
    }


def test_text_trajectory(model_and_engine):
    model, processor, engine = model_and_engine
    wf = RLVRWorkflow(REWARD, _gconfig(), processor.tokenizer)
    item = {"id": "t", "messages": [{"role": "user", "content": "Say something."}], "answer": "x"}
    traj = asyncio.run(wf.arun_episode(engine, item))
    report = logprob_consistency(model, traj, temperature=TEMPERATURE)
    assert report.n_tokens == 8 and report.ok(ATOL), report


def test_vision_trajectory(model_and_engine):
    model, processor, engine = model_and_engine
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    traj = asyncio.run(wf.arun_episode(engine, _vision_item()))
    report = logprob_consistency(model, traj, temperature=TEMPERATURE)
    assert report.n_tokens == 8 and report.ok(ATOL), report


def test_multi_turn_vision_trajectory(model_and_engine):
    model, processor, engine = model_and_engine
    wf = VisionMultiAttemptWorkflow(
        REWARD, _gconfig(), processor.tokenizer, processor, max_turns=3, turn_discount=0.9
    )
    traj = asyncio.run(wf.arun_episode(engine, _vision_item()))
    report = logprob_consistency(model, traj, temperature=TEMPERATURE)
    assert report.n_tokens == 24 and report.ok(ATOL), report


def test_shifted_loss_mask_is_caught(model_and_engine):
    model, processor, engine = model_and_engine
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    traj = asyncio.run(wf.arun_episode(engine, _vision_item()))
    shifted = dict(traj)
    shifted["loss_mask"] = torch.roll(traj["loss_mask"], shifts=-1, dims=1)
    shifted["logprobs"] = torch.roll(traj["logprobs"], shifts=-1, dims=1)
    report = logprob_consistency(model, shifted, temperature=TEMPERATURE)
    assert not report.ok(ATOL) and report.max_abs_diff > 100 * ATOL


def test_wrong_temperature_is_caught(model_and_engine):
    model, processor, engine = model_and_engine
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    traj = asyncio.run(wf.arun_episode(engine, _vision_item()))
    assert not logprob_consistency(model, traj, temperature=1.0).ok(ATOL)


def test_trajectory_without_modality_ids_gets_them_derived(model_and_engine):
    """Without mm_token_type_ids transformers 5 silently uses 1-D positions; the check derives them."""
    from vlrollout.checks import modality_ids

    model, processor, engine = model_and_engine
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    traj = asyncio.run(wf.arun_episode(engine, _vision_item()))
    assert torch.equal(modality_ids(model, traj["input_ids"]), traj["mm_token_type_ids"])
    stripped = {k: v for k, v in traj.items() if k != "mm_token_type_ids"}
    assert logprob_consistency(model, stripped, temperature=TEMPERATURE).ok(ATOL)


# Two frames of 56 x 56 pixels: one temporal patch of 4 x 4 merged tokens.
SMALL_FRAMES = FrameSampling(min_pixels=56 * 56, max_pixels=56 * 56)


def _video_item():
    from tests.train.video_inputs import frames

    return {
        "id": "video",
        "messages": [{"role": "user", "content": "<video>Where does the red square go?"}],
        "videos": [[Image.fromarray(f) for f in frames(seed=3, n=4, px=56)]],
        "answer": "never-matches",
    }


def test_video_trajectory(model_and_engine):
    model, processor, engine = model_and_engine
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor, frames=SMALL_FRAMES)
    traj = asyncio.run(wf.arun_episode(engine, _video_item()))
    assert traj is not None, list(wf.ctx.ledger.records)
    assert "pixel_values_videos" in traj["multi_modal_input"][0]
    assert 2 in traj["mm_token_type_ids"].tolist()[0]
    report = logprob_consistency(model, traj, temperature=TEMPERATURE)
    assert report.n_tokens == 8 and report.ok(ATOL), report
    without_video = dict(traj, multi_modal_input=[{}])
    assert not logprob_consistency(model, without_video, temperature=TEMPERATURE).ok(ATOL)


def test_multi_turn_video_trajectory(model_and_engine):
    """Later turns re-prefill the video prompt and the earlier turns: positions continue."""
    model, processor, engine = model_and_engine
    wf = VisionMultiAttemptWorkflow(
        REWARD,
        _gconfig(),
        processor.tokenizer,
        processor,
        max_turns=2,
        turn_discount=0.9,
        frames=SMALL_FRAMES,
    )
    traj = asyncio.run(wf.arun_episode(engine, _video_item()))
    report = logprob_consistency(model, traj, temperature=TEMPERATURE)
    assert report.n_tokens == 16 and report.ok(ATOL), report
