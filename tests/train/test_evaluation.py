"""What one held-out evaluation of a run records and says (:class:`HeldOut`), on a fake workflow."""

from __future__ import annotations

import logging

import torch

from vlrollout.jsonl import read_jsonl
from vlrollout.train.evaluation import HeldOut, logger
from vlrollout.train.loggers import TrainLoggers


class _Scores:
    """A workflow whose episode for an item scores the item's ``score``."""

    async def arun_episode(self, engine, item):
        return {"rewards": torch.tensor([item["score"]])}


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_an_evaluation_is_recorded_and_logged_as_information(tmp_path):
    """(Kept on the module's logger: AReaL replaces logging's root, where pytest's caplog sits.)"""
    items = [{"id": "a", "task": "count", "score": 1.0}, {"id": "b", "task": "count", "score": 0.0}]
    held_out = HeldOut(None, _Scores(), _Scores(), items, None, 2, 0, tmp_path)
    kept, level = _Kept(), logger.level
    logger.addHandler(kept)
    logger.setLevel(logging.DEBUG)
    try:
        record = held_out.run(3, TrainLoggers())
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)
    assert read_jsonl(tmp_path / "eval.jsonl") == [record]
    assert (record["step"], record["eval/mean"], record["eval/n"]) == (3, 0.5, 2)
    assert (record["eval_sampled/count"], record["eval_sampled/n"]) == (0.5, 4)
    (line,) = [r for r in kept.records if "held-out eval" in r.getMessage()]
    assert line.levelno == logging.INFO  # a result, not a problem
    assert line.getMessage() == (
        "held-out eval at step 3: eval 0.5000 over 2 episodes; eval_sampled 0.5000 over 4 episodes"
    )


class _RejectsGrounding:
    """Scores every episode 1.0 except those of ``ground`` items, all rejected."""

    async def arun_episode(self, engine, item):
        return None if item["task"] == "ground" else {"rewards": torch.tensor([1.0])}


def test_a_task_whose_every_episode_was_rejected_has_no_mean(monkeypatch):
    """Its mean would be 0 from no episode; the overall mean still counts them as 0."""
    from vlrollout.train import evaluation

    warnings: list[str] = []
    monkeypatch.setattr(evaluation.logger, "warning", lambda msg, *a: warnings.append(msg % a))
    items = [{"id": "a", "task": "count"}, {"id": "b", "task": "ground"}]
    out = evaluation.evaluate(None, _RejectsGrounding(), items, step=4)
    assert "eval/ground" not in out and out["eval/count"] == 1.0
    assert out["eval/mean"] == 0.5 and out["eval/rejected"] == 1
    assert len(warnings) == 1 and "'ground'" in warnings[0] and "step 4" in warnings[0]


class _LogsItsScope:
    """Logs its reward as the workflows do (``log_reward``) and scores 1.0."""

    async def arun_episode(self, engine, item):
        from vlrollout.workflows.episode import log_reward

        log_reward(reward=item["score"])
        return {"rewards": torch.tensor([item["score"]])}


def test_held_out_episodes_report_to_areals_eval_scope_not_the_training_rollouts():
    """AReaL's trainer keeps evaluation episodes under ``eval-rollout``; under ``rollout`` they
    were averaged into the next training step's ``rollout/reward``."""
    from areal.utils import stats_tracker

    from vlrollout.train.evaluation import evaluate

    stats_tracker.export_all(reset=True)
    evaluate(None, _LogsItsScope(), [{"id": "a", "score": 0.25}, {"id": "b", "score": 0.75}])
    stats = stats_tracker.export_all(reset=True)
    assert stats["eval-rollout/reward"] == 0.5
    assert not any(key.startswith("rollout/") for key in stats), stats
