"""The caller-side memo of reward recipes stays small and lets go of rewards nobody uses."""

from __future__ import annotations

import gc
import weakref

from vlrollout.rewards import pool
from vlrollout.rewards.pool import RewardRecipe


class ScaledLength:
    """A reward with state: each instance pickles to its own recipe file."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __call__(self, prompt, completions, prompt_ids, completion_ids, **task_data):
        return self.scale * len(completions)


def test_recipes_of_many_rewards_do_not_pile_up(tmp_path):
    first = ScaledLength(0.0)
    gone = weakref.ref(first)
    recipe = RewardRecipe.from_reward(first, tmp_path)
    assert RewardRecipe.from_reward(first, tmp_path) is recipe  # the memo still serves repeats
    del first
    for k in range(1, 200):  # e.g. a workflow built per item, each with a fresh reward object
        RewardRecipe.from_reward(ScaledLength(float(k)), tmp_path)
    gc.collect()
    assert gone() is None  # the first reward is no longer kept alive by the memo
    assert len(pool._RECIPES) <= pool._RECIPES_MAX < 200
