"""Faults and load: aborts, cancellation, crashed reward workers, hundreds of concurrent episodes."""

from __future__ import annotations

import asyncio
import os
import random

from areal.api import ModelResponse
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.workflow_executor import check_trajectory_format
from PIL import Image

from vlrollout.processors.cache import prepared_nbytes
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import RLVRWorkflow, VisionRLVRWorkflow

GCONFIG = GenerationHyperparameters(max_new_tokens=8)


def _item(i, **extra):
    return {
        "id": f"q{i}",
        "messages": [{"role": "user", "content": f"2+2? ({i})"}],
        "answer": "4",
        **extra,
    }


class AbortingEngine(ScriptedEngine):
    async def agenerate(self, req):
        resp = await super().agenerate(req)
        return ModelResponse(
            input_tokens=resp.input_tokens,
            output_tokens=resp.output_tokens,
            output_logprobs=resp.output_logprobs,
            output_versions=resp.output_versions,
            stop_reason="abort",
        )


def test_engine_abort_rejects_with_reason(tokenizer):
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    assert asyncio.run(wf.arun_episode(AbortingEngine([[5, 6]]), _item(0))) is None
    assert wf.ledger.by_reason == {"engine_abort": 1}


def crash_worker(prompt, completions, prompt_ids, completion_ids, **kw):
    """Kills its worker process on the first call in each process, like a segfaulting scorer."""
    marker = f"/tmp/vlrollout-crash-{os.getppid()}"
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return 1.0


def test_crashed_reward_worker_is_recovered(tokenizer):
    """A pool broken by a dead worker is replaced and the call runs once more on the new one."""
    marker = f"/tmp/vlrollout-crash-{os.getpid()}"
    if os.path.exists(marker):
        os.remove(marker)
    try:
        wf = RLVRWorkflow("tests.test_reliability.crash_worker", GCONFIG, tokenizer)
        engine = ScriptedEngine([tokenizer.encode("4", add_special_tokens=False)])
        traj = asyncio.run(wf.arun_episode(engine, _item(0)))
        assert traj is not None and traj["rewards"].item() == 1.0
        assert os.path.exists(marker)  # the first worker really died
    finally:
        if os.path.exists(marker):
            os.remove(marker)


def test_cancelled_episode_leaks_no_tasks(tokenizer):
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    engine = ScriptedEngine([[5]], latency_s=(30.0, 30.0))

    async def main():
        task = asyncio.create_task(wf.arun_episode(engine, _item(0)))
        await asyncio.sleep(0.2)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await asyncio.sleep(0)
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert asyncio.run(main()) == []
    # A cancelled episode is neither accepted nor rejected: AReaL never receives it.
    assert wf.ledger.submitted == 0


def test_hundreds_of_concurrent_episodes_complete_and_add_up(tokenizer):
    rng = random.Random(0)
    answers = [
        tokenizer.encode(a, add_special_tokens=False) + [tokenizer.eos_token_id] for a in ("4", "5")
    ]
    engine = ScriptedEngine(lambda req: rng.choice(answers), latency_s=(0.0, 0.02), seed=1)
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    items = [_item(i) for i in range(400)] + [{"id": f"bad{i}", "messages": 3} for i in range(50)]

    async def main():
        return await asyncio.wait_for(
            asyncio.gather(*(wf.arun_episode(engine, it) for it in items)), 240
        )

    results = asyncio.run(main())
    kept = [r for r in results if r is not None]
    assert len(kept) == 400 and all(check_trajectory_format(r) for r in kept[:20])
    assert wf.ledger.submitted == 450 == wf.ledger.accepted + wf.ledger.rejected
    assert wf.ledger.by_reason == {"bad_message": 50}
    assert len(wf.ctx.prompts) == 0  # every group is done: no prepared prompt is held


def test_prepared_prompt_cache_stays_within_its_bound_under_load(tokenizer, qwen2vl_processor):
    wf = VisionRLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer, qwen2vl_processor
    )
    engine = ScriptedEngine([[tokenizer.eos_token_id]], latency_s=(0.0, 0.005))
    image = Image.new("RGB", (40, 30), "red")
    items = [
        {
            "id": f"v{i}",
            "messages": [{"role": "user", "content": f"<image>count {i}"}],
            "images": [image],
            "answer": "1",
        }
        for i in range(120)
    ]

    async def main():
        sem = asyncio.Semaphore(32)

        async def one(it):
            async with sem:
                return await wf.arun_episode(engine, it)

        return await asyncio.gather(*(one(it) for it in items for _ in range(2)))

    results = asyncio.run(main())
    assert all(r is not None for r in results)
    assert len(wf.ctx.prompts) == 0  # entries are dropped when their group is done
    assert wf.ctx.prompts.misses == 120  # each item prepared once despite a group of 2
    # The largest entry (longer prompt texts tokenise to a few more ids) bounds any 32 of them.
    # Every entry held is pinned by an episode in flight (a finished group's entry is dropped),
    # so 32 episodes in flight hold at most 32 entries: one per episode when each item's other
    # episode has finished (with random latencies that happens; "both episodes of an item end
    # together", which allowed only 17, does not hold under load). Keeping every entry, as the
    # old LRU did, would hold all 120.
    one = max(prepared_nbytes(wf.ctx.preprocessor.prepare(it)) for it in (items[0], items[-1]))
    assert wf.ctx.prompts.peak_bytes <= 32 * one


class FailingEngine(ScriptedEngine):
    """An engine whose error message holds the whole request, as a remote client's does."""

    async def agenerate(self, req):
        raise RuntimeError("request failed: " + "data:image/png;base64," + "A" * 2_000_000)


def test_an_engine_error_is_recorded_in_brief(tokenizer):
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    assert asyncio.run(wf.arun_episode(FailingEngine([[5, 6]]), _item(0))) is None
    (record,) = wf.ledger.records
    assert record.reason == "engine_error" and record.detail.startswith("RuntimeError: request")
    assert len(record.detail) < 1000 and "characters left out" in record.detail
