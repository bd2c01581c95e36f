"""Targets for spawned processes (importable by module path, as spawn needs)."""

from __future__ import annotations

from vlrollout.rewards import TRLReward


def score_count() -> tuple[list, dict]:
    """A TRL reward called in this process: its scores and rejection counts."""
    reward = TRLReward("count")
    scores = reward(prompts=["p"], completions=["3"], completion_ids=[[1]], answer=[3])
    return scores, dict(reward.rejected)


def score_count_and_print() -> None:
    print(score_count()[0], flush=True)


def score_in_pool_worker(_: int) -> tuple[list, dict]:
    return score_count()
