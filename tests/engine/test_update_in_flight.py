"""A weight update while a sequence is being generated, the way AReaL's trainer makes one
(``pause_generation`` → ``update_weights_from_disk(meta.with_version(v))`` → ``continue_generation``,
the trainer's ``set_version`` later): the sequence in flight keeps its earlier tokens and carries on
with the new weights, every token stamped with the version of the weights that sampled it; a
sequence started after the update has only the new version.
"""

from __future__ import annotations

import asyncio
import time

import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest, WeightUpdateMeta

from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.testing.tiny_model import tiny_qwen2vl


def _req(ids: list[int], rid: str, n: int) -> ModelRequest:
    return ModelRequest(
        rid=rid,
        input_ids=ids,
        gconfig=GenerationHyperparameters(max_new_tokens=n, min_new_tokens=n),
    )


def test_a_weight_update_reaches_the_sequence_in_flight_and_the_next(
    tmp_path, text_prompt, teacher_forced
):
    old, processor = tiny_qwen2vl(seed=0)
    new, _ = tiny_qwen2vl(seed=3)
    new.save_pretrained(tmp_path / "v1")
    meta = WeightUpdateMeta(type="disk", path=str(tmp_path / "v1"), version=1)
    meta.clear_checkpoint_after_load = False
    first, second = text_prompt(), text_prompt("What colour is the square?")
    # A few ms per forward, so the first sequence is surely mid-way when the update comes.
    hook = old.register_forward_pre_hook(lambda *a: time.sleep(0.005))
    try:
        with LocalInferenceEngine(old, processor) as eng:

            async def run():
                running = asyncio.create_task(eng.agenerate(_req(first, "a", 60)))
                while eng.stats().get("tokens", 0) < 4:
                    await asyncio.sleep(0.002)
                eng.pause_generation()
                await asyncio.wrap_future(eng.update_weights_from_disk(meta))
                eng.continue_generation()
                version = eng.get_version()  # before any set_version
                after = await eng.agenerate(_req(second, "b", 8))
                return await running, after, version

            in_flight, after, version = asyncio.run(run())
    finally:
        hook.remove()

    assert version == 1
    versions = in_flight.output_versions
    assert versions == sorted(versions) and versions[0] == 0 and versions[-1] == 1
    assert 4 <= versions.count(0) < len(versions)
    assert after.output_versions == [1] * 8

    # Each token's logprob is that of the weights its version names (teacher-forced).
    split = versions.count(0)
    got = torch.tensor(in_flight.output_logprobs)
    with_old = teacher_forced(tiny_qwen2vl(seed=0)[0], first, in_flight.output_tokens, 1.0)
    with_new = teacher_forced(new, first, in_flight.output_tokens, 1.0)
    torch.testing.assert_close(got[:split], with_old[:split], atol=1e-4, rtol=0)
    torch.testing.assert_close(got[split:], with_new[split:], atol=1e-4, rtol=0)
    assert (got[split:] - with_old[split:]).abs().max() > 1e-2  # the two really differ
    torch.testing.assert_close(
        torch.tensor(after.output_logprobs),
        teacher_forced(new, second, after.output_tokens, 1.0),
        atol=1e-4,
        rtol=0,
    )
