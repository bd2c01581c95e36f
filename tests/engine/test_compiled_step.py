"""Decode steps through ``torch.compile`` (``LocalInferenceEngine(compile_decode=True)``): taken
only where the compiled step agrees with the model's own forward, compiled once at the first
decode step, and still right after rows leave and join and after a weight update."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from tests.engine.batches import generate_all, shrinking_requests
from tests.records import Records
from vlrollout.engine import LocalInferenceEngine, step_forward
from vlrollout.engine.step_forward import CompiledStep, DirectStep, choose_step
from vlrollout.testing.tiny_model import tiny_qwen2_text, tiny_qwen2vl

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]


class _Perturbed(torch.nn.Module):
    """Stands in for a compiled decoder: the decoder's output, its hidden states shifted."""

    def __init__(self, decoder: torch.nn.Module, shift: float):
        super().__init__()
        self.decoder, self.shift = decoder, shift

    def forward(self, **kwargs):
        out = self.decoder(**kwargs)
        out.last_hidden_state = out.last_hidden_state + self.shift
        return out


class _Failing(torch.nn.Module):
    def forward(self, **kwargs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")


def test_a_compile_that_fails_leaves_the_uncompiled_step_with_a_warning(monkeypatch):
    model, _ = tiny_qwen2vl(seed=0)
    monkeypatch.setattr(torch, "compile", lambda module, **kw: _Failing())
    with Records(step_forward.logger) as warnings:
        step = choose_step(model, CPU, mrope=True, prepared_mask=True, compile=True)
    assert isinstance(step, DirectStep)
    assert "not compiled" in warnings.text and "No working C++ compiler" in warnings.text


@pytest.mark.parametrize("shift, taken", [(0.0, True), (0.5, False)])
def test_a_compiled_step_is_taken_only_within_the_tolerance(monkeypatch, shift, taken):
    """The acceptance rule alone (no real compiling): logprobs within 1e-4 of the model's own
    forward and the same greedy tokens, over one row and three."""
    model, _ = tiny_qwen2vl(seed=0)
    monkeypatch.setattr(torch, "compile", lambda module, **kw: _Perturbed(module, shift))
    with Records(step_forward.logger) as warnings:
        step = choose_step(model, CPU, mrope=True, prepared_mask=True, compile=True)
    assert isinstance(step, CompiledStep) is taken
    if not taken:
        assert isinstance(step, DirectStep)
        assert "logprobs differ" in warnings.text


def test_compiled_engine_matches_the_uncompiled_one_and_never_recompiles(vision_prompt):
    """Real ``torch.compile`` on the CPU (inductor, C++): a batch that shrinks to one row and
    admits queued requests, then a weight update. Tokens equal the uncompiled engine's, logprobs
    within 1e-4, and every graph is compiled when the engine is built (none later: not for
    other row counts or lengths, merged or trimmed caches, nor new weights)."""
    model, processor = tiny_qwen2vl(seed=0)
    reference, _ = tiny_qwen2vl(seed=0)
    new_weights = tiny_qwen2vl(seed=1)[0].state_dict()
    reqs = shrinking_requests(vision_prompt, 7)
    tokens = {}
    with (
        LocalInferenceEngine(model, processor, max_batch_size=4, compile_decode=True) as fast,
        LocalInferenceEngine(reference, processor, max_batch_size=4) as slow,
    ):
        fast.initialize()
        slow.initialize()
        assert isinstance(fast._worker._step_forward, CompiledStep)  # compiled when built
        generate_all(fast, reqs[:2])
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        for update in (False, True):
            if update:
                fast.update_weights_from_state_dict(new_weights).result()
                slow.update_weights_from_state_dict(new_weights).result()
            compiled, eager = generate_all(fast, reqs), generate_all(slow, reqs)
            for a, b in zip(compiled, eager, strict=True):
                assert a.output_tokens == b.output_tokens
                torch.testing.assert_close(a.output_logprobs, b.output_logprobs, atol=1e-4, rtol=0)
            tokens[update] = [r.output_tokens for r in compiled]
        assert fast.stats()["prefill_batches"] > 4  # queued rows joined running batches
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    assert tokens[True] != tokens[False]  # the compiled step decodes with the new weights


def test_training_in_the_same_process_after_compiling_on_the_worker_thread():
    """A compiled engine, used and destroyed before the process's first backward: a training
    step after it must not crash (compiling on the engine's worker thread, which ends with the
    engine, made torch 2.10 segfault in that backward's autograd thread start-up)."""
    script = """
import asyncio, torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest
from vlrollout.engine import LocalInferenceEngine
from vlrollout.engine.step_forward import CompiledStep
from vlrollout.testing.tiny_model import tiny_qwen2vl
model, processor = tiny_qwen2vl(seed=0)
g = GenerationHyperparameters(max_new_tokens=3, min_new_tokens=3, greedy=True)
with LocalInferenceEngine(model, processor, compile_decode=True) as engine:
    req = ModelRequest(input_ids=[1, 100, 101], gconfig=g)
    asyncio.run(engine.agenerate(req))
    assert isinstance(engine._worker._step_forward, CompiledStep)
trained, _ = tiny_qwen2vl(seed=1)
trained.train()
loss = trained(input_ids=torch.randint(20, 400, (2, 16))).logits.logsumexp(-1).mean()
loss.backward()
print("trained", float(loss))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "trained" in done.stdout


def test_a_text_only_model_compiles_and_matches_too():
    """A text-only causal LM (1-D positions, grouped KV heads): the compiled engine's tokens and
    logprobs are the uncompiled one's, prompts and lengths of different sizes in one batch."""
    model = tiny_qwen2_text(num_key_value_heads=1)
    reference = tiny_qwen2_text(num_key_value_heads=1)
    reference.load_state_dict(model.state_dict())
    reqs = [
        ModelRequest(
            input_ids=[1, 5 + i, 7, 9][: 2 + i % 3],
            gconfig=GenerationHyperparameters(
                max_new_tokens=3 + 2 * i, min_new_tokens=3 + 2 * i, greedy=True
            ),
        )
        for i in range(6)
    ]
    with (
        LocalInferenceEngine(model, None, max_batch_size=4, compile_decode=True) as fast,
        LocalInferenceEngine(reference, None, max_batch_size=4) as slow,
    ):
        assert isinstance(fast._worker._step_forward, CompiledStep)
        for a, b in zip(generate_all(fast, reqs), generate_all(slow, reqs), strict=True):
            assert a.output_tokens == b.output_tokens
            torch.testing.assert_close(a.output_logprobs, b.output_logprobs, atol=1e-4, rtol=0)
