"""The rewards' own process pool inside processes a user's code starts: a spawned process that
scored through it still exits, and a daemonic one (a ``multiprocessing.Pool`` worker, which may
start no children) scores in its own threads instead of rejecting every call."""

from __future__ import annotations

import multiprocessing

from tests.rewards import trl_in_children


def test_a_spawned_process_that_scored_exits_when_its_target_returns():
    child = multiprocessing.get_context("spawn").Process(
        target=trl_in_children.score_count_and_print
    )
    child.start()
    child.join(60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and child.exitcode == 0


def test_a_pool_worker_scores_in_its_own_threads():
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        (result,) = pool.map(trl_in_children.score_in_pool_worker, [0])
    assert result == ([1.0], {})
