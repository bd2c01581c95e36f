"""A training run starts its reward workers before it loads the model.

With the default ``fork`` start method a worker is a copy of the process at the moment it starts.
Forked after the model is loaded, the workers would share the weights' pages with the trainer,
and the first step's writes (weights, gradients, optimizer state, the engine's weight load)
would each copy a page: the first step would be slower than the later ones, and every copied page
counted twice in memory.
"""

from __future__ import annotations

import pytest

from vlrollout.rewards import caller
from vlrollout.rewards.executor import (
    current_pool,
    default_max_workers,
    live_reward_pools,
    shutdown_reward_pools,
)
from vlrollout.train import session
from vlrollout.train.config import load_config


class _Stop(Exception):
    """Raised where the test has seen what it needs."""


@pytest.fixture
def no_default_pool():
    """No pool of the default size is running before the test, nor after it."""
    size = default_max_workers()

    def stop_default() -> None:
        shutdown_reward_pools(keep=[p for p in live_reward_pools() if p.max_workers != size])

    stop_default()
    yield size
    stop_default()


def test_the_reward_workers_run_before_the_model_is_built(tmp_path, monkeypatch, no_default_pool):
    cfg = load_config("examples/train_grounding.yaml", [f"vlrollout.output={tmp_path}"])
    running: list[int] = []

    def build_actor(*args, **kwargs):
        running.append(len(current_pool().running_workers()))
        raise _Stop

    monkeypatch.setattr(session, "build_actor", build_actor)
    with pytest.raises(_Stop):
        session.start_session(cfg)
    assert running == [no_default_pool]


class _ThreadReward:
    run_in_thread = True

    def __call__(self, *args, **kwargs) -> float:
        return 0.0


def test_a_reward_run_in_a_thread_starts_no_pool(no_default_pool):
    caller.start_reward_workers(_ThreadReward())
    assert current_pool().workers == []
    caller.start_reward_workers("iou")
    assert len(current_pool().running_workers()) == no_default_pool
