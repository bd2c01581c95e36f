"""Rewards through the pool workflows use: built once per worker, and a hung reward is isolated."""

import asyncio
import logging
import os
import pathlib
import pickle
import time

import pytest

from vlrollout.ledger import EpisodeRejected
from vlrollout.rewards import executor
from vlrollout.rewards.caller import RewardCaller
from vlrollout.rewards.executor import current_pool
from vlrollout.rewards.pool import RewardBatch, RewardRecipe


def sleepy_reward(prompt, completions, prompt_ids, completion_ids, **task_data):
    time.sleep(60)
    return 1.0


def length_reward(prompt, completions, prompt_ids, completion_ids, **task_data):
    return float(len(completions))


class HeavyReward:
    """~1.3 MB of state; records every process that unpickles it in ``log_path``."""

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path
        self.table = list(range(300_000))

    def __setstate__(self, state):
        self.__dict__.update(state)
        with open(self.log_path, "a") as f:
            f.write(f"{os.getpid()}\n")

    def __call__(self, prompt, completions, prompt_ids, completion_ids, **task_data):
        return float(self.table[len(completions)])


def _call(caller, text):
    return caller("p", text, [], [], {})


def test_a_hung_reward_takes_only_its_own_episode():
    # With one pool worker, a 60 s sleeper must not keep the worker from the rewards after it.
    sleepy = RewardCaller(sleepy_reward, timeout_s=1.0)
    ordinary = RewardCaller(length_reward, timeout_s=10.0)

    async def main():
        with pytest.raises(EpisodeRejected) as e:
            await _call(sleepy, "x")
        assert e.value.reason == "reward_timeout"
        return [await _call(ordinary, "ab" * k) for k in (1, 2, 3)]

    t0 = time.perf_counter()
    assert asyncio.run(main()) == [2.0, 4.0, 6.0]
    assert time.perf_counter() - t0 < 10


def test_calls_running_beside_a_hung_reward_are_retried_not_lost():
    sleepy = RewardCaller(sleepy_reward, timeout_s=1.0)
    ordinary = RewardCaller(length_reward, timeout_s=10.0)

    async def main():
        return await asyncio.gather(
            _call(sleepy, "x"), *(_call(ordinary, "a" * k) for k in (1, 2, 3)),
            return_exceptions=True,
        )  # fmt: skip

    first, *rest = asyncio.run(main())
    assert isinstance(first, EpisodeRejected) and first.reason == "reward_timeout"
    assert rest == [1.0, 2.0, 3.0]


def test_heavy_reward_crosses_as_a_small_recipe_and_is_built_once_per_worker(tmp_path):
    log = tmp_path / "loads.txt"
    reward = HeavyReward(str(log))
    assert len(pickle.dumps(reward)) > 1_000_000
    caller = RewardCaller(reward, timeout_s=30.0)
    assert len(pickle.dumps(caller.recipe)) < 1_000
    log.write_text("")  # ignore the in-process round trip, count only workers

    async def main():
        return [await _call(caller, "a" * k) for k in range(6)]

    assert asyncio.run(main()) == [float(k) for k in range(6)]
    loads = log.read_text().split()
    assert len(loads) == len(set(loads)) >= 1  # one load per worker process, not per call
    # The same reward object gives the same recipe without pickling it again.
    assert RewardRecipe.from_reward(reward) is caller.recipe


def test_recipe_refuses_a_rewritten_file(tmp_path):
    recipe = RewardRecipe.from_reward(length_reward, tmp_path)
    assert recipe("p", "abc", [], []) == 3.0
    other = RewardRecipe(recipe.name, recipe.path, "0" * 64)
    with pytest.raises(RuntimeError, match="no longer has hash"):
        other.build()


def test_unpicklable_reward_names_the_fix():
    with pytest.raises(ValueError, match="module-level function"):
        RewardCaller(lambda *a, **k: 1.0)


def test_two_hung_rewards_at_once_replace_the_pool_once(monkeypatch):
    replaced = []
    original = executor.replace_pool

    def counting(pool, hung=False):
        replaced.append(original(pool, hung=hung))  # True: this call replaced it
        return replaced[-1]

    monkeypatch.setattr(executor, "replace_pool", counting)
    sleepy = RewardCaller(sleepy_reward, timeout_s=1.0, max_workers=1)
    ordinary = RewardCaller(length_reward, timeout_s=10.0, max_workers=1)
    before = current_pool(1)

    async def main():
        return await asyncio.gather(
            _call(sleepy, "x"), _call(sleepy, "y"), *(_call(ordinary, "a" * k) for k in (1, 2)),
            return_exceptions=True,
        )  # fmt: skip

    a, b, *rest = asyncio.run(main())
    assert all(isinstance(e, EpisodeRejected) and e.reason == "reward_timeout" for e in (a, b))
    assert rest == [1.0, 2.0]
    assert current_pool(1) is not before
    # The two hung calls reached the pool as one task, timed by one clock: the pool is
    # replaced once, and the calls beside it are sent again without replacing it twice.
    assert replaced == [True]


# Rewards that become ready together (a group's episodes) reach the pool as one task per worker:
# with one worker each task's inter-process round trip is paid in series.


def length_or_raise(prompt, completions, prompt_ids, completion_ids, **task_data):
    if completions == "boom":
        raise ValueError("no reward for boom")
    if completions == "odd":
        raise OddError("odd", 2)
    return float(len(completions))


def slow_length(prompt, completions, prompt_ids, completion_ids, **task_data):
    time.sleep(0.3)
    return float(len(completions))


class OddError(Exception):
    """Pickles but cannot be unpickled (its ``__init__`` needs two arguments)."""

    def __init__(self, a, b):
        super().__init__(f"{a}{b}")


def test_reward_batch_gives_each_call_its_value_or_its_exception(tmp_path):
    # A budget no loaded machine reaches: this test is about outcomes, not about the budget.
    batch = RewardBatch(RewardRecipe.from_reward(length_or_raise, tmp_path), budget_s=600.0)
    calls = [(("p", text, [], []), {}) for text in ("ab", "boom", "odd", "abc")]
    two, boom, odd, three = pickle.loads(pickle.dumps(batch(calls)))  # as the caller gets them
    assert (two, three) == (2.0, 3.0)
    assert isinstance(boom, ValueError) and str(boom) == "no reward for boom"
    # OddError would break the pool on the way back; it arrives as a RuntimeError naming it.
    assert isinstance(odd, RuntimeError) and "OddError('odd2')" in str(odd)


def _caller(workers, reward, timeout_s=10.0):
    """A ``RewardCaller`` whose pool has ``workers`` workers whatever this machine has."""
    return RewardCaller(reward, timeout_s=timeout_s, max_workers=workers)


def _record_submissions(monkeypatch, caller):
    """What reaches ``caller``'s pool, per task: the number of calls in it."""
    pool = current_pool(caller.max_workers)
    real_submit = pool.executor.submit
    sent = []

    def submit(fn, /, *args, **kwargs):
        sent.append(len(args[0]))  # a RewardBatch's one argument: the calls
        return real_submit(fn, *args, **kwargs)

    monkeypatch.setattr(pool.executor, "submit", submit)
    return sent


def _gather(caller, texts):
    async def main():
        return await asyncio.gather(*(_call(caller, t) for t in texts), return_exceptions=True)

    return asyncio.run(main())


def test_calls_ready_together_reach_a_one_worker_pool_as_one_task(monkeypatch):
    caller = _caller(1, length_reward)
    sent = _record_submissions(monkeypatch, caller)
    assert _gather(caller, ["a" * k for k in range(1, 9)]) == [float(k) for k in range(1, 9)]
    assert sent == [8]


def test_a_batch_is_split_across_the_pool_workers(monkeypatch):
    caller = _caller(4, length_reward)
    sent = _record_submissions(monkeypatch, caller)
    assert _gather(caller, ["a" * k for k in range(1, 9)]) == [float(k) for k in range(1, 9)]
    assert sent == [2, 2, 2, 2]
    sent.clear()
    # Fewer calls than workers: each goes alone, a batch of one.
    assert _gather(caller, ["ab", "abc", "abcd"]) == [2.0, 3.0, 4.0]
    assert sent == [1] * 3


def test_a_reward_that_raises_rejects_only_its_own_call_in_a_batch(monkeypatch):
    caller = _caller(1, length_or_raise)
    sent = _record_submissions(monkeypatch, caller)
    texts = ["a", "boom", "abc", "odd", "abcde", "ab", "abcd", "abcdef"]
    results = _gather(caller, texts)
    assert sent == [8]
    boom, odd = results[1], results[3]
    assert isinstance(boom, EpisodeRejected) and boom.reason == "reward_error"
    assert "ValueError" in boom.detail and "no reward for boom" in boom.detail
    # An exception that cannot cross back from the worker is still named.
    assert isinstance(odd, EpisodeRejected) and odd.reason == "reward_error"
    assert "OddError" in odd.detail
    rest = [r for i, r in enumerate(results) if i not in (1, 3)]
    assert rest == [1.0, 3.0, 5.0, 2.0, 4.0, 6.0]


def test_a_lone_call_goes_through_the_per_call_path(monkeypatch):
    caller = _caller(1, length_reward)
    sent = _record_submissions(monkeypatch, caller)

    async def main():
        return [await _call(caller, "abc"), await _call(caller, "ab")]

    assert asyncio.run(main()) == [3.0, 2.0]
    assert sent == [1, 1]  # awaited one after the other: nothing to batch


def test_a_hung_batch_rejects_its_calls_and_the_next_call_runs_on_a_new_pool(monkeypatch):
    sleepy = _caller(1, sleepy_reward, timeout_s=1.0)
    ordinary = _caller(1, length_reward)
    sent = _record_submissions(monkeypatch, sleepy)
    before = current_pool(1)

    async def main():
        hung = await asyncio.gather(*(_call(sleepy, t) for t in "xyz"), return_exceptions=True)
        await asyncio.sleep(0.5)  # a retried batch would have taken the new worker by now
        return hung, await _call(ordinary, "abcd")

    t0 = time.perf_counter()
    hung, after = asyncio.run(main())
    assert sent == [3]
    assert all(isinstance(e, EpisodeRejected) and e.reason == "reward_timeout" for e in hung)
    # The hung batch is not retried on the new pool, so the next call does not queue behind it.
    assert after == 4.0
    assert current_pool(1) is not before
    assert before.running_workers(wait_s=10) == []  # the hung worker was killed
    assert time.perf_counter() - t0 < 10


def test_cancelling_one_call_leaves_the_rest_of_its_batch(monkeypatch):
    caller = _caller(1, slow_length)
    # A budget past the whole batch: the four calls share one task however slow.
    caller._batch = RewardBatch(caller.recipe, budget_s=60.0)
    sent = _record_submissions(monkeypatch, caller)

    async def main():
        tasks = [asyncio.create_task(_call(caller, "a" * k)) for k in range(1, 5)]
        await asyncio.sleep(0.1)  # the batch is running in the worker
        tasks[0].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    first, *rest = asyncio.run(main())
    assert sent == [4]
    assert isinstance(first, asyncio.CancelledError)
    assert rest == [2.0, 3.0, 4.0]


def test_a_group_of_eight_scores_in_one_pool_task(monkeypatch, tokenizer, qwen2vl_processor):
    import logging

    from areal.api.cli_args import GenerationHyperparameters
    from areal.infra.remote_inf_engine import GroupedRolloutWorkflow
    from areal.infra.workflow_executor import check_trajectory_format
    from PIL import Image

    from vlrollout.testing.scripted_engine import ScriptedEngine
    from vlrollout.workflows import VisionRLVRWorkflow

    with monkeypatch.context() as m:  # one pool worker, as on a CPU-only machine
        m.setattr(executor, "accelerator_count", lambda: 1)
        m.setattr(os, "cpu_count", lambda: 2)
        wf = VisionRLVRWorkflow(
            "tests.workflows.reward_fns.contains_answer",
            GenerationHyperparameters(max_new_tokens=8),
            tokenizer,
            qwen2vl_processor,
        )
    sent = _record_submissions(monkeypatch, wf.ctx.reward)
    item = {
        "id": "g1",
        "messages": [{"role": "user", "content": "<image>How many shapes?"}],
        "images": [Image.new("RGB", (150, 100), "red")],
        "answer": "3",
    }
    answers = [
        tokenizer.encode(t, add_special_tokens=False) + [tokenizer.eos_token_id] for t in "34"
    ]
    group = GroupedRolloutWorkflow(wf, 8, logging.getLogger("test"))
    traj = asyncio.run(group.arun_episode(ScriptedEngine(answers), item))
    assert check_trajectory_format(traj, batch_size=8)
    assert sorted(traj["rewards"].tolist()) == [0.0] * 4 + [1.0] * 4
    assert wf.ledger.accepted == 8 and wf.ledger.rejected == 0
    assert sent == [8]


def slow_when_long(prompt, completions, prompt_ids, completion_ids, **task_data):
    """0.2 s for completions longer than 3 characters, instant otherwise."""
    if len(completions) > 3:
        time.sleep(0.2)
    return float(len(completions))


def test_a_batch_stops_at_its_time_budget_and_a_slow_reward_goes_per_call(monkeypatch):
    """Batching saves ~1 ms of round trip per call; a reward slower than the batch's time budget
    must not make its neighbours wait in line inside one task (one per task they would finish one
    by one). The batch hands back the calls it did not start, they go one per task, and
    the caller stops batching that reward."""
    from vlrollout.rewards.pool import BATCH_BUDGET_S

    assert BATCH_BUDGET_S < 0.2
    caller = _caller(1, slow_when_long)
    sent = _record_submissions(monkeypatch, caller)
    texts = ["abcd", "a", "abcde", "ab"]
    assert _gather(caller, texts) == [4.0, 1.0, 5.0, 2.0]
    # The first call spent the budget: the other three were handed back unstarted.
    assert sent == [4, 1, 1, 1]
    sent.clear()
    assert _gather(caller, ["ab", "abc"]) == [2.0, 3.0]
    assert sent == [1, 1]


def test_a_batch_of_fast_rewards_runs_whole(tmp_path):
    batch = RewardBatch(RewardRecipe.from_reward(length_reward, tmp_path))
    results = batch([(("p", "a" * k, [], []), {}) for k in range(1, 40)])
    assert results == [float(k) for k in range(1, 40)]


def test_a_lone_reward_raising_an_exception_that_cannot_cross_back_leaves_the_pool_whole(
    monkeypatch,
):
    """Pickled in the worker but not unpicklable here, such an exception would kill the
    executor's result thread: the pool would break and every call in flight with it."""
    caller = _caller(1, length_or_raise)
    sent = _record_submissions(monkeypatch, caller)
    pool = current_pool(1)

    async def main():
        with pytest.raises(EpisodeRejected) as e:
            await _call(caller, "odd")
        return e.value, await _call(caller, "abc")

    rejected, after = asyncio.run(main())
    assert rejected.reason == "reward_error" and "OddError" in rejected.detail
    assert after == 3.0
    # Retried once inside its task, on the same pool: a broken pool would have been replaced.
    assert sent == [1, 1]
    assert current_pool(1) is pool


def counting_reward(prompt, completions, prompt_ids, completion_ids, **task_data):
    """A stateful reward: each call adds a line to the file named by ``completions``, then the
    first call for that file fails (the state a second call would see has changed)."""
    marker = pathlib.Path(completions)
    calls = marker.read_text().count("call") if marker.exists() else 0
    with marker.open("a") as f:
        f.write("call\n")
    if calls == 0:
        raise RuntimeError(f"first call for {marker.name}")
    return 1.0


def test_a_reward_that_raises_is_called_once_and_its_error_is_the_rejection(tmp_path):
    """Not tried again: a second call would run the user's code twice for one sample (a stateful
    reward would count twice) and drop the first error."""
    caller = _caller(1, counting_reward)
    paths = [str(tmp_path / f"m{k}") for k in range(3)]
    results = _gather(caller, paths)
    for result, path in zip(results, paths, strict=True):
        assert isinstance(result, EpisodeRejected) and result.reason == "reward_error"
        assert result.detail == f"RuntimeError: first call for {pathlib.Path(path).name}"
        assert pathlib.Path(path).read_text() == "call\n"


def test_run_in_pool_does_not_run_a_function_that_raised_again(tmp_path):
    marker = tmp_path / "m"

    async def main():
        return await executor.run_in_pool(counting_reward, "p", str(marker), [], [], max_workers=1)

    with pytest.raises(RuntimeError, match="first call for m"):
        asyncio.run(main())
    assert marker.read_text() == "call\n"


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.mark.parametrize("texts", [["boom"], ["boom", "a", "ab", "abc", "abcd"]])
def test_a_reward_that_raises_is_rejected_quietly_with_its_traceback_kept(capfd, texts):
    """A data error in one item must not print its traceback (stdout carries `vlrollout run`'s
    summary) nor log a warning per attempt. The rejection names the error; the worker's traceback
    stays on it."""
    import traceback

    caller = _caller(4, length_or_raise)
    seen = _Records()
    logging.getLogger().addHandler(seen)
    try:
        boom = _gather(caller, texts)[0]
    finally:
        logging.getLogger().removeHandler(seen)
    assert isinstance(boom, EpisodeRejected) and boom.reason == "reward_error"
    assert boom.detail == "ValueError: no reward for boom"
    assert [r.getMessage() for r in seen.records if r.levelno >= logging.WARNING] == []
    assert capfd.readouterr().out == ""
    shown = "".join(traceback.format_exception(boom.__cause__))
    assert "in length_or_raise" in shown and 'raise ValueError("no reward for boom")' in shown


# A call's timeout counts from when a worker starts it, not from when it joined the queue.


def test_calls_queued_behind_slow_ones_are_timed_from_their_start():
    # One worker, six 0.3 s calls: they finish 0.3 s apart, each well inside its 1 s. Timed from
    # the queue, the last three were rejected as reward_timeout (and the pool killed under the
    # one running).
    caller = _caller(1, slow_length, timeout_s=1.0)
    assert _gather(caller, ["a" * k for k in range(1, 7)]) == [float(k) for k in range(1, 7)]


def test_a_hung_reward_whose_episode_was_cancelled_still_times_out():
    # Nobody waits for the hung call any more, but it holds the only worker: its own clock must
    # still replace the pool, or every later call queues behind it for good.
    sleepy = _caller(1, sleepy_reward, timeout_s=1.0)
    ordinary = _caller(1, length_reward, timeout_s=5.0)

    async def main():
        hung = asyncio.create_task(_call(sleepy, "x"))
        await asyncio.sleep(0.3)  # the worker is in the sleeper
        hung.cancel()
        return await _call(ordinary, "ab")

    t0 = time.perf_counter()
    assert asyncio.run(main()) == 2.0
    assert time.perf_counter() - t0 < 4


def test_a_task_sent_again_to_a_fresh_pool_is_timed_from_its_new_start_and_replaced_there(
    monkeypatch,
):
    # A task that started on a pool broken under a hung neighbour is sent once more to the
    # fresh pool: its clock restarts there, and if it hangs it is the fresh pool that goes.
    from vlrollout.rewards import task_starts

    replaced = []
    monkeypatch.setattr(executor, "replace_pool", lambda pool, hung: replaced.append(pool))
    caller = _caller(1, length_reward, timeout_s=0.3)

    async def main():
        loop = asyncio.get_running_loop()
        token, start = task_starts.expect_start()
        work = loop.create_future()  # a task that never returns
        supervised = asyncio.create_task(caller._supervise(work, start))
        task_starts._started(token, "old pool")
        await asyncio.sleep(0.2)
        task_starts._started(token, "fresh pool")  # sent again, started again
        t0 = loop.time()
        with pytest.raises(TimeoutError):
            await supervised
        task_starts.forget(token)
        return loop.time() - t0, work.cancelled()

    waited, cancelled = asyncio.run(main())
    assert replaced == ["fresh pool"]
    assert waited >= 0.25 and cancelled


def test_calls_queued_behind_two_hung_rewards_in_turn_are_all_scored():
    # Each hung reward replaces the pool under the calls queued behind it; those calls did
    # nothing wrong and are sent again as often as a neighbour breaks their pool.
    hung = [_caller(1, sleepy_reward, timeout_s=1.0) for _ in range(2)]
    ordinary = _caller(1, length_reward, timeout_s=10.0)

    async def main():
        return await asyncio.gather(
            _call(hung[0], "x"), _call(hung[1], "y"), *(_call(ordinary, "a" * k) for k in (1, 2)),
            return_exceptions=True,
        )  # fmt: skip

    a, b, *rest = asyncio.run(main())
    assert all(isinstance(e, EpisodeRejected) and e.reason == "reward_timeout" for e in (a, b))
    assert rest == [1.0, 2.0]
