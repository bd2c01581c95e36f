"""The embedded engine on video prompts, for every tiny family that takes video.

Per family (a tiny random model of the real transformers class): the rollout's logprobs equal a
teacher-forced forward (:func:`vlrollout.checks.logprob_consistency`) within 1e-4 in float32, and
greedy tokens equal ``model.generate``'s, on a video prompt and on an image + video prompt.
Qwen2.5-VL's frames are 2 s apart in M-RoPE time (``second_per_grid_ts`` 2.0), so a position
rule that drops it puts every token after the video elsewhere; Qwen3-VL writes a timestamp before
each temporal patch, so its video is several placeholder runs.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from tests.engine.batches import assert_as_if_alone, generate_all
from tests.train.video_inputs import (
    IMAGE_BEFORE_VIDEO_MISBUILT,
    VIDEO_FAMILIES,
    video_prompt,
    vision_of,
)
from vlrollout.checks import logprob_consistency
from vlrollout.engine.inputs import PlaceholderMismatchError, check_placeholders
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.families import family_of, modality_runs, rope_grids
from vlrollout.testing.tiny_families import tiny_vlm

ATOL = 1e-4
TEMPERATURE = 0.7
NEW_TOKENS = 6
PROMPTS = {"video": {}, "image_video": {"image": True}}


def _skip_misbuilt(name: str, kind: str, engine, prompt) -> bool:
    """For an image + video prompt the family's processor builds wrong
    (:data:`IMAGE_BEFORE_VIDEO_MISBUILT`), check the engine refuses it; ``True`` when it was
    one."""
    if kind != "image_video" or name not in IMAGE_BEFORE_VIDEO_MISBUILT:
        return False
    with pytest.raises(PlaceholderMismatchError, match="image_grid_thw implies"):
        asyncio.run(engine.agenerate(_request(prompt, greedy=True)))
    return True


@pytest.fixture(scope="module", params=VIDEO_FAMILIES)
def family(request):
    """``(name, model, processor, engine)`` for one family, the engine running."""
    torch.set_num_threads(1)
    model, processor = tiny_vlm(request.param, seed=0)
    engine = LocalInferenceEngine(model, processor, seed=0).initialize()
    yield request.param, model, processor, engine
    engine.destroy()


def _request(prompt, **gen) -> ModelRequest:
    return ModelRequest(
        input_ids=prompt["input_ids"][0].tolist(),
        metadata={"multi_modal_input": vision_of(prompt)},
        gconfig=GenerationHyperparameters(max_new_tokens=NEW_TOKENS, **gen),
    )


def _trajectory(prompt, resp) -> dict:
    """The trajectory a workflow would record for ``resp`` (one row, prompt + completion)."""
    n_in, n_out = len(resp.input_tokens), len(resp.output_tokens)
    ids = torch.tensor([resp.input_tokens + resp.output_tokens])
    traj = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "loss_mask": torch.tensor([[0] * n_in + [1] * n_out]),
        "logprobs": torch.tensor([[0.0] * n_in + list(resp.output_logprobs)]),
        "multi_modal_input": [vision_of(prompt)],
    }
    if "mm_token_type_ids" in prompt:
        types = prompt["mm_token_type_ids"]
        traj["mm_token_type_ids"] = torch.nn.functional.pad(types, (0, n_out))
    return traj


@pytest.mark.parametrize("kind", list(PROMPTS))
def test_rollout_logprobs_equal_teacher_forced(family, kind):
    name, model, processor, engine = family
    prompt = video_prompt(processor, "What moves?", seed=1, **PROMPTS[kind])
    if _skip_misbuilt(name, kind, engine, prompt):
        return
    resp = asyncio.run(
        engine.agenerate(_request(prompt, temperature=TEMPERATURE, min_new_tokens=NEW_TOKENS))
    )
    report = logprob_consistency(model, _trajectory(prompt, resp), temperature=TEMPERATURE)
    assert report.n_tokens == NEW_TOKENS and report.ok(ATOL), report
    stripped = {k: v for k, v in _trajectory(prompt, resp).items() if k != "mm_token_type_ids"}
    assert logprob_consistency(model, stripped, temperature=TEMPERATURE).ok(ATOL)


def _generate(model, engine, prompt) -> list[int]:
    """``model.generate``'s greedy tokens on the processor's output (video grids per run, the
    form transformers 5.3's ``get_rope_index`` reads: :func:`rope_grids`)."""
    inputs = dict(prompt)
    if family_of(model.config).positions == "mrope":
        inputs.update(rope_grids(vision_of(prompt), prompt["mm_token_type_ids"]))
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            suppress_tokens=sorted(engine.banned_token_ids),
            eos_token_id=sorted(engine.eos_token_ids),
            pad_token_id=engine.tokenizer.pad_token_id,
        )
    return out[0, prompt["input_ids"].shape[1] :].tolist()


@pytest.mark.parametrize("kind", list(PROMPTS))
def test_greedy_tokens_equal_generate(family, kind):
    name, model, processor, engine = family
    prompt = video_prompt(processor, "Where is the red square?", seed=2, **PROMPTS[kind])
    if _skip_misbuilt(name, kind, engine, prompt):
        return
    resp = asyncio.run(engine.agenerate(_request(prompt, greedy=True)))
    expected = _generate(model, engine, prompt)
    assert resp.output_tokens == expected[: len(resp.output_tokens)]
    assert len(resp.output_tokens) == len(expected) or (
        resp.output_tokens[-1] in engine.eos_token_ids
    )


def test_video_features_are_the_same_per_frame_grid():
    """Qwen3-VL's vision tower encodes each temporal patch alone: the per-run grid that
    :func:`rope_grids` gives ``get_rope_index`` encodes the video exactly as the processor's."""
    model, processor = tiny_vlm("qwen3_vl")
    prompt = video_prompt(processor, "?", n_frames=6)
    grids = rope_grids(vision_of(prompt), prompt["mm_token_type_ids"])
    assert prompt["video_grid_thw"].tolist() == [[3, 4, 4]]
    assert grids["video_grid_thw"].tolist() == [[1, 4, 4]] * 3
    with torch.no_grad():
        whole = model.model.get_video_features(
            prompt["pixel_values_videos"], prompt["video_grid_thw"]
        )
        per = model.model.get_video_features(prompt["pixel_values_videos"], grids["video_grid_thw"])
    assert torch.equal(torch.cat(whole.pooler_output), torch.cat(per.pooler_output))


def test_rope_grids_align_frame_spacing_with_every_run():
    """An image before a video: transformers 5.3's Qwen2.5-VL ``get_rope_index`` reads one
    ``second_per_grid_ts`` entry per image or video run, so the image gets 1.0 before the
    video's 2.0, and a second call changes nothing."""
    types = torch.tensor([[0, 1, 1, 0, 2, 2, 2, 0]])
    vision = {
        "video_grid_thw": torch.tensor([[2, 2, 2]]),
        "second_per_grid_ts": torch.tensor([2.0]),
    }
    assert modality_runs(types) == [1, 2]
    once = rope_grids(vision, types)
    assert once["second_per_grid_ts"].tolist() == [1.0, 2.0]
    assert once["video_grid_thw"].tolist() == [[2, 2, 2]]  # one run: one video row stays
    again = rope_grids(once, types)
    assert all(torch.equal(again[k], once[k]) for k in once)


def test_video_placeholders_must_match_the_grid():
    """Per-run grids pass the placeholder check; a video run short of its grid's tokens fails."""
    grid = {"video_grid_thw": torch.tensor([[1, 2, 2], [1, 2, 2]])}
    check_placeholders([7, 5, 8, 3, 7, 5, 8], grid, None, 5, 2)
    with pytest.raises(PlaceholderMismatchError, match="video_grid_thw implies 2 tokens"):
        check_placeholders([7, 5, 8, 3, 7, 8], grid, None, 5, 2)


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl", "llava_onevision"])
def test_batched_video_requests_equal_each_alone(name):
    """Videos of different lengths, with and without an image, prefilled and decoded together:
    each row's tokens and logprobs are those of its request run alone."""
    model, processor = tiny_vlm(name, seed=0)
    prompts = [
        video_prompt(processor, "What moves?", seed=4),
        video_prompt(processor, "And now?", seed=5, n_frames=6),
        video_prompt(processor, "Which first?", seed=6, image=True),
        video_prompt(processor, "What moves?", seed=4),
    ]
    reqs = [_request(p, greedy=True) for p in prompts]
    with LocalInferenceEngine(model, processor, seed=0) as engine:
        together = generate_all(engine, reqs)
        stats = engine.stats()
    assert stats["decode_rows"] > stats["decode_steps"], stats  # rows decoded together
    assert_as_if_alone(model, processor, reqs, together)
