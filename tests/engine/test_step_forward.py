"""Decode steps through the text decoder and LM head: taken only where the logits are the
model's own, and then the engine's results are bit-identical to steps through the full forward."""

from __future__ import annotations

import types

import pytest
import torch

from tests.engine.batches import generate_all, shrinking_requests
from vlrollout.engine import LocalInferenceEngine
from vlrollout.engine.inputs import uses_mrope
from vlrollout.engine.step_forward import DirectStep, FullStep, choose_step
from vlrollout.testing.tiny_families import tiny_vlm
from vlrollout.testing.tiny_model import tiny_qwen2_text, tiny_qwen2vl

CPU = torch.device("cpu")


@pytest.mark.parametrize("impl, prepared_mask", [("sdpa", True), ("eager", False)])
def test_the_direct_step_is_taken_where_it_matches(impl, prepared_mask):
    vlm, _ = tiny_qwen2vl(seed=0)
    vlm.set_attn_implementation(impl)
    assert isinstance(choose_step(vlm, CPU, mrope=True, prepared_mask=prepared_mask), DirectStep)
    text = tiny_qwen2_text(num_key_value_heads=1)
    text.set_attn_implementation(impl)
    assert isinstance(choose_step(text, CPU, mrope=False, prepared_mask=prepared_mask), DirectStep)


@pytest.mark.parametrize("family", ["qwen3_vl", "llava", "mistral3"])
def test_decoders_that_build_their_own_masks_take_the_direct_step_too(family):
    """Their decoders call transformers' mask builder whatever the mask, so the prepared 4-D
    mask goes in as a tensor (which the builder returns as given), not as a mapping."""
    model, _ = tiny_vlm(family)
    assert isinstance(choose_step(model, CPU, uses_mrope(model), prepared_mask=True), DirectStep)


def test_a_model_whose_forward_does_more_keeps_its_forward():
    """Logits scaled (or soft-capped) after the LM head: the decoder + head would be wrong."""
    model, _ = tiny_qwen2vl(seed=0)
    plain = type(model).forward

    def scaled(self, *args, **kwargs):
        out = plain(self, *args, **kwargs)
        out.logits = out.logits / 2
        return out

    model.forward = types.MethodType(scaled, model)
    assert isinstance(choose_step(model, CPU, mrope=True, prepared_mask=True), FullStep)


def test_a_model_without_a_separate_decoder_keeps_its_forward():
    class Bare(torch.nn.Module):
        def get_decoder(self):
            raise NotImplementedError

    assert isinstance(choose_step(Bare(), CPU, mrope=False, prepared_mask=False), FullStep)


def test_engine_results_equal_those_of_full_forward_steps(tiny, vision_prompt):
    """A shrinking batch that later admits queued requests: tokens and logprobs of the direct
    steps are those of steps through the model's forward (to 1e-5: which rows share a step
    depends on timing, and a batch's shape moves the last float bits)."""
    model, processor = tiny
    reqs = shrinking_requests(vision_prompt, 10)
    results = {}
    for kind in ("direct", "full"):
        with LocalInferenceEngine(model, processor, max_batch_size=4) as engine:
            if kind == "full":
                engine._worker._step_forward = FullStep(model)
            results[kind] = generate_all(engine, reqs)
            step = engine._worker._step_forward
            assert isinstance(step, DirectStep if kind == "direct" else FullStep)
            assert engine.stats()["prefill_batches"] > 1  # rows joined a running batch
    for a, b in zip(results["direct"], results["full"], strict=True):
        assert a.output_tokens == b.output_tokens
        torch.testing.assert_close(a.output_logprobs, b.output_logprobs, atol=1e-5, rtol=0)


def test_the_step_is_chosen_when_the_engine_starts_not_in_a_request(tiny, vision_prompt):
    """The probe that chooses the step runs in ``initialize``: a request's time holds its own
    forwards only (one prefill and a decode step per later token), which is what a request's
    latency and a benchmark of decode steps measure."""
    model, processor = tiny
    calls = []
    hook = model.get_decoder().register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        with LocalInferenceEngine(model, processor) as engine:
            started = len(calls)
            generate_all(engine, shrinking_requests(vision_prompt, 1))  # 3 new tokens
    finally:
        hook.remove()
    assert started > 0 and len(calls) - started == 3
