"""Request sets for the decode-batch tests: rows of different prompts and lengths."""

from __future__ import annotations

import asyncio
import threading
import time

import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from vlrollout.engine import LocalInferenceEngine


def generate_all(engine, reqs):
    """All of ``reqs`` at once (one ``asyncio.gather``)."""

    async def run():
        return await asyncio.gather(*(engine.agenerate(r) for r in reqs))

    return asyncio.run(run())


def generate_together(engine, reqs):
    """All of ``reqs`` admitted in one prefill whatever the machine's load: queued while the
    engine is paused, then released at once."""
    engine.pause_generation()
    out: list = []
    thread = threading.Thread(target=lambda: out.extend(generate_all(engine, reqs)))
    thread.start()
    deadline = time.monotonic() + 60
    while len(engine._worker._pending) < len(reqs) and time.monotonic() < deadline:
        time.sleep(0.001)
    engine.continue_generation()
    thread.join()
    return out


def shrinking_requests(vision_prompt, n: int) -> list[ModelRequest]:
    """``n`` greedy vision requests of different prompts and lengths (3, 5, 7, ... tokens), so
    rows finish at different steps and the batch shrinks."""
    reqs = []
    for i in range(n):
        p = vision_prompt(
            seed=i, question="Where?" + " And why?" * (i % 3), width=56 + 28 * (i % 3)
        )
        new = 3 + 2 * i
        reqs.append(
            ModelRequest(
                input_ids=p["input_ids"],
                metadata={"multi_modal_input": p["mm"]},
                gconfig=GenerationHyperparameters(
                    max_new_tokens=new, min_new_tokens=new, greedy=True
                ),
            )
        )
    return reqs


def assert_as_if_alone(model, processor, reqs, results) -> None:
    """Each of ``results`` has the tokens of its request run alone (``max_batch_size=1``) and
    its logprobs to float rounding (1e-4)."""
    with LocalInferenceEngine(model, processor, max_batch_size=1) as engine:
        alone = generate_all(engine, reqs)
    for a, b in zip(results, alone, strict=True):
        assert a.output_tokens == b.output_tokens
        torch.testing.assert_close(a.output_logprobs, b.output_logprobs, atol=1e-4, rtol=0)
