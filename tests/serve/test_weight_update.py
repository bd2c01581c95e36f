"""Weight updates over HTTP the way AReaL's trainer drives them, and aborts mid-generation.

The trainer side mirrors ``FSDPEngine._update_weights_from_disk`` (areal 1.0.4):
``pause_generation()`` → ``fut = rollout.update_weights_from_disk(meta)`` → save → publish the
name_resolve key for the version → ``fut.result()`` → ``continue_generation()``; then
``set_version`` on the rollout side, as ``PPOTrainer`` does.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from datetime import datetime

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters, NameResolveConfig
from areal.api.io_struct import ModelRequest, WeightUpdateMeta
from areal.utils import name_resolve, names

from tests.serve.conftest import areal_client, serving, teacher_forced

EXPERIMENT, TRIAL = "serve-test", "t0"
SLOW_STEP_S = 0.03
"""Seconds each forward is slowed by in the mid-generation tests: the 35 decode steps left after
the trainer starts its update must outlast the pause's round trip on a loaded machine."""


@pytest.fixture
def name_root(tmp_path):
    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=str(tmp_path / "nr")))
    yield tmp_path


def perturbed(model, seed: int = 0):
    new = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return new


def trainer_update(client, new_model, path, save_delay: float = 0.0) -> None:
    """What the trainer does, including saving while the rollout side already waits."""
    client.pause_generation()
    meta = WeightUpdateMeta(type="disk", path=str(path))
    fut = client.update_weights_from_disk(meta)
    time.sleep(save_delay)
    new_model.save_pretrained(path)
    key = names.update_weights_from_disk(EXPERIMENT, TRIAL, client.get_version())
    name_resolve.add(key, str(datetime.now().timestamp()), keepalive_ttl=120)
    fut.result(timeout=60)
    client.continue_generation()
    client.set_version(client.get_version() + 1)


def _prompt(engine) -> list[int]:
    return engine.tokenizer("Count the shapes in the picture.")["input_ids"]


def _request(ids, n: int) -> ModelRequest:
    # AReaL sends no min_new_tokens to servers: ignore_eos makes the length exact.
    gconfig = GenerationHyperparameters(max_new_tokens=n, ignore_eos=True, temperature=1.0)
    return ModelRequest(input_ids=list(ids), gconfig=gconfig)


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_served_logprobs_follow_the_new_weights(protocol, name_root):
    with serving(protocol, weights_root=name_root) as (server, engine):
        client = areal_client(
            protocol, server.address, experiment_name=EXPERIMENT, trial_name=TRIAL
        )
        try:
            old = copy.deepcopy(engine.model)
            new = perturbed(engine.model)
            # Loading only starts after the trainer publishes the key: the save may be slow.
            trainer_update(client, new, name_root / "v1", save_delay=0.3)
            ids = _prompt(engine)
            resp = asyncio.run(client.agenerate(_request(ids, 6)))
        finally:
            client.destroy()
    assert resp.output_versions == [1] * 6
    got = torch.tensor(resp.output_logprobs)
    torch.testing.assert_close(got, teacher_forced(new, ids, resp.output_tokens), atol=1e-4, rtol=0)
    before = teacher_forced(old, ids, resp.output_tokens)
    assert (got - before).abs().max() > 1e-2  # the old weights would give other numbers


class SlowDecode:
    """Slow every forward down so a test can act in the middle of a generation."""

    def __init__(self, model, seconds: float):
        self.handle = model.register_forward_pre_hook(lambda *a: time.sleep(seconds))

    def remove(self):
        self.handle.remove()


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_abort_mid_generation_resumes_with_new_weights(protocol, name_root):
    """Pause aborts the running request; AReaL resends prompt + tokens so far; after the update
    the remaining tokens come from the new weights and carry the new version."""
    n = 40
    with serving(protocol, weights_root=name_root) as (server, engine):
        client = areal_client(
            protocol, server.address, experiment_name=EXPERIMENT, trial_name=TRIAL
        )
        slow = SlowDecode(engine.model, SLOW_STEP_S)
        try:
            old = copy.deepcopy(engine.model)
            new = perturbed(engine.model, seed=1)
            ids = _prompt(engine)
            out = []
            thread = threading.Thread(
                target=lambda: out.append(asyncio.run(client.agenerate(_request(ids, n))))
            )
            thread.start()
            deadline = time.monotonic() + 30
            while engine.stats().get("tokens", 0) < 5 and time.monotonic() < deadline:
                time.sleep(0.005)
            trainer_update(client, new, name_root / "v1")
            thread.join(timeout=60)
            assert not thread.is_alive()
        finally:
            slow.remove()
            client.destroy()
    (resp,) = out
    assert resp.output_len == n and resp.stop_reason == "length"
    k = resp.output_versions.count(0)
    assert 0 < k < n and resp.output_versions == [0] * k + [1] * (n - k)
    got = torch.tensor(resp.output_logprobs)
    before = teacher_forced(old, ids, resp.output_tokens)
    after = teacher_forced(new, ids, resp.output_tokens)
    torch.testing.assert_close(got[:k], before[:k], atol=1e-4, rtol=0)
    torch.testing.assert_close(got[k:], after[k:], atol=1e-4, rtol=0)


def test_vllm_chat_request_is_held_not_aborted_across_an_update(name_root):
    """AReaL's vLLM client cannot resume an aborted chat request (it resends the unchanged
    messages), so the server holds it: one coherent completion, the tokens after the update
    from the new weights."""
    from tests.engine.conftest import make_image as image
    from vlrollout.processors.auto import AutoProcessorPreprocessor

    n = 40
    with serving("vllm", weights_root=name_root) as (server, engine):
        client = areal_client("vllm", server.address, experiment_name=EXPERIMENT, trial_name=TRIAL)
        slow = SlowDecode(engine.model, SLOW_STEP_S)
        try:
            old = copy.deepcopy(engine.model)
            new = perturbed(engine.model, seed=2)
            prepared = AutoProcessorPreprocessor(engine.processor).prepare(
                {
                    "messages": [{"role": "user", "content": "<image>How many shapes?"}],
                    "images": [image(7)],
                }
            )
            req = _request(prepared.input_ids, n)
            req.image_data = list(prepared.image_data)
            req.vision_msg_vllm = [copy.deepcopy(prepared.vision_msg_vllm)]
            out = []
            thread = threading.Thread(target=lambda: out.append(asyncio.run(client.agenerate(req))))
            thread.start()
            deadline = time.monotonic() + 30
            while engine.stats().get("tokens", 0) < 5 and time.monotonic() < deadline:
                time.sleep(0.005)
            trainer_update(client, new, name_root / "v1")
            thread.join(timeout=60)
            assert not thread.is_alive()
            calls = engine.stats()
        finally:
            slow.remove()
            client.destroy()
    (resp,) = out
    assert resp.output_len == n and resp.stop_reason == "length"
    assert calls["prefills"] == 2  # first prefill, then one re-prefill after the new weights
    mm = prepared.multi_modal_input
    got = torch.tensor(resp.output_logprobs)
    before = teacher_forced(old, prepared.input_ids, resp.output_tokens, mm=mm)
    after = teacher_forced(new, prepared.input_ids, resp.output_tokens, mm=mm)
    k = int((got - before).abs().lt(1e-4).long().cumprod(0).sum())  # tokens from old weights
    assert 0 < k < n
    torch.testing.assert_close(got[k:], after[k:], atol=1e-4, rtol=0)
