"""Rewards through the pool workflows use: built once per worker, and a hung reward is isolated."""

import asyncio
import os
import pickle
import time

import pytest

from vlrollout.rewards.pool import RewardBatch, RewardRecipe
from vlrollout.workflows.steps import EpisodeRejected, RewardCaller


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
    # Issue 15: with one pool worker, the three ordinary rewards after a 60 s sleeper were all
    # rejected reward_timeout because the sleeper kept the worker.
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
    from areal.api.reward_api import AsyncRewardWrapper

    from vlrollout.rewards.pool import current_pool

    recreated = []
    original = AsyncRewardWrapper._recreate_executor.__func__

    def counting(cls, key, workers, broken):
        recreated.append(cls._executors.get(key) is broken)  # True: this call replaces it
        return original(cls, key, workers, broken)

    monkeypatch.setattr(AsyncRewardWrapper, "_recreate_executor", classmethod(counting))
    sleepy = RewardCaller(sleepy_reward, timeout_s=1.0)
    ordinary = RewardCaller(length_reward, timeout_s=10.0)
    before = current_pool(ordinary._wrapper)

    async def main():
        return await asyncio.gather(
            _call(sleepy, "x"), _call(sleepy, "y"), *(_call(ordinary, "a" * k) for k in (1, 2)),
            return_exceptions=True,
        )  # fmt: skip

    a, b, *rest = asyncio.run(main())
    assert all(isinstance(e, EpisodeRejected) and e.reason == "reward_timeout" for e in (a, b))
    assert rest == [1.0, 2.0]
    assert current_pool(ordinary._wrapper) is not before
    assert sum(recreated) == 1  # AReaL's retries ask again, but the pool is replaced once


# Rewards that become ready together (a group's episodes) reach the pool as one task per worker:
# with one worker each task costs ~1-2 ms of IPC, serialized (issue 16).


def length_or_raise(prompt, completions, prompt_ids, completion_ids, **task_data):
    if completions == "boom":
        raise ValueError("no reward for boom")
    if completions == "odd":
        raise OddError("odd", 2)
    return float(len(completions))


class OddError(Exception):
    """Pickles but cannot be unpickled (its ``__init__`` needs two arguments)."""

    def __init__(self, a, b):
        super().__init__(f"{a}{b}")


def test_reward_batch_gives_each_call_its_value_or_its_exception(tmp_path):
    batch = RewardBatch(RewardRecipe.from_reward(length_or_raise, tmp_path))
    calls = [(("p", text, [], []), {}) for text in ("ab", "boom", "odd", "abc")]
    two, boom, odd, three = pickle.loads(pickle.dumps(batch(calls)))  # as the caller gets them
    assert (two, three) == (2.0, 3.0)
    assert isinstance(boom, ValueError) and str(boom) == "no reward for boom"
    # OddError would break the pool on the way back; it arrives as a RuntimeError naming it.
    assert isinstance(odd, RuntimeError) and "OddError('odd2')" in str(odd)
