"""``abort_requests``: SGLang's abort — finish now with ``stop_reason="abort"``, keep the tokens."""

from __future__ import annotations

import asyncio
import time

import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from vlrollout.engine import LocalInferenceEngine


def _req(ids, rid, n=30):
    g = GenerationHyperparameters(max_new_tokens=n, min_new_tokens=n, temperature=1.0)
    return ModelRequest(rid=rid, input_ids=ids, gconfig=g, metadata={"seed": 1})


def test_abort_queued_requests_by_rid_while_paused(tiny, text_prompt):
    model, processor = tiny
    with LocalInferenceEngine(model, processor) as eng:

        async def run():
            eng.pause_generation()
            a = asyncio.create_task(eng.agenerate(_req(text_prompt(), "a", 3)))
            b = asyncio.create_task(eng.agenerate(_req(text_prompt(), "b", 3)))
            await asyncio.sleep(0.05)
            aborted = await asyncio.wrap_future(eng.abort_requests({"a"}))
            ra = await a
            assert not b.done()  # only "a" was aborted; "b" waits for continue
            eng.continue_generation()
            return aborted, ra, await b

        aborted, ra, rb = asyncio.run(run())
    assert aborted == 1
    assert ra.stop_reason == "abort" and ra.output_tokens == []
    assert rb.stop_reason == "length" and rb.output_len == 3


def test_abort_running_request_keeps_its_tokens(tiny, text_prompt, teacher_forced):
    model, processor = tiny
    hook = model.register_forward_pre_hook(lambda *a: time.sleep(0.005))
    try:
        with LocalInferenceEngine(model, processor) as eng:

            async def run():
                task = asyncio.create_task(eng.agenerate(_req(text_prompt(), "r", 200)))
                while eng.stats().get("tokens", 0) < 4:
                    await asyncio.sleep(0.002)
                await asyncio.wrap_future(eng.abort_requests())
                return await task

            resp = asyncio.run(run())
    finally:
        hook.remove()
    assert resp.stop_reason == "abort" and 4 <= resp.output_len < 200
    ref = teacher_forced(model, text_prompt(), resp.output_tokens, 1.0)
    torch.testing.assert_close(torch.tensor(resp.output_logprobs), ref, atol=1e-4, rtol=0)
