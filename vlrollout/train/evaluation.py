"""Held-out evaluation of a ``vlrollout train`` run: scores straight on the engine, and what each
evaluation records.

Each evaluation runs the held-out items greedily (``eval/``) and, with ``vlrollout.eval_samples``,
sampled ``eval_samples`` times each (``eval_sampled/``), outside AReaL's staleness budget; it
appends one record to ``eval.jsonl``, saves the first ``vlrollout.log_rollouts`` episodes as shown
rollouts (:mod:`vlrollout.train.samples`), hands both to the experiment trackers and logs one
line (:func:`eval_line`). Rank 0 evaluates; the other ranks wait at the step's barrier.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlrollout.jsonl import append_jsonl
from vlrollout.ledger import NothingAccepted
from vlrollout.logs import get_logger
from vlrollout.train import samples
from vlrollout.train.loggers import TrainLoggers

logger = get_logger(__name__)

EVAL_FILE = "eval.jsonl"


def evaluate(
    engine: Any,
    workflow: Any,
    items: list[dict],
    prefix: str = "eval",
    repeats: int = 1,
    step: int | None = None,
    episodes_out: list[tuple[dict, dict | None]] | None = None,
) -> dict[str, float]:
    """Held-out evaluation straight on the engine (outside AReaL's staleness budget): the mean
    reward per task over ``repeats`` episodes per item. ``episodes_out``, when given, gets each
    ``(item, trajectory or None for a rejected episode)`` in item order (for the shown rollouts,
    :mod:`vlrollout.train.samples`).

    A rejected episode scores 0 and stays in the denominator, so rejections never raise the
    mean; ``{prefix}/n`` (episodes) and ``{prefix}/rejected`` say how many of the episodes
    behind it were rejected (:func:`eval_line` prints both).

    Raises:
        NothingAccepted: Every episode was rejected: a mean of zeros would measure nothing.
            ``step`` is named in the message.
    """
    episodes = [it for it in items for _ in range(repeats)]
    ledger = getattr(workflow, "ledger", None)
    mark = ledger.mark() if ledger is not None else None

    async def run():
        return await asyncio.gather(*(workflow.arun_episode(engine, it) for it in episodes))

    trajs = asyncio.run(run())
    if episodes_out is not None:
        episodes_out.extend(zip(episodes, trajs, strict=True))
    if all(t is None for t in trajs):
        outcome = ledger.since(mark) if ledger is not None else {"rejected": 0, "rejections": []}
        at = f" at step {step}" if step is not None else ""
        raise NothingAccepted(
            f"the held-out evaluation {prefix!r}{at}",
            len(episodes),
            outcome["rejections"],
            rejected=outcome["rejected"],
            hint="no score is reported from no episode; each rejection is logged above",
        )
    by_task: dict[str, list[float]] = {}
    for it, t in zip(episodes, trajs, strict=True):
        score = float(t["rewards"].flatten()[0]) if t is not None else 0.0
        by_task.setdefault(it.get("task", "all"), []).append(score)
    out = {f"{prefix}/{k}": statistics.fmean(v) for k, v in by_task.items()}
    out[f"{prefix}/mean"] = statistics.fmean(s for v in by_task.values() for s in v)
    out[f"{prefix}/n"] = len(episodes)
    out[f"{prefix}/rejected"] = sum(t is None for t in trajs)
    return out


def eval_line(record: dict[str, Any], prefix: str = "eval") -> str:
    """The mean of one evaluation with its denominator and rejections, for the log.

    >>> eval_line({"eval/mean": 0.5, "eval/n": 8, "eval/rejected": 2})
    'eval 0.5000 over 8 episodes (2 rejected, scored 0)'
    """
    n, rejected = record[f"{prefix}/n"], record[f"{prefix}/rejected"]
    line = f"{prefix} {record[f'{prefix}/mean']:.4f} over {n} episodes"
    return line + (f" ({rejected} rejected, scored 0)" if rejected else "")


@dataclass
class HeldOut:
    """Everything a run's held-out evaluations need.

    Attributes:
        engine: The inference engine (rank 0's).
        greedy: The greedy single-turn workflow (``eval/``; its episodes are shown).
        sampled: The sampling workflow (``eval_sampled/``), one sample per episode.
        items: The held-out items.
        reward: The evaluation reward (the shown rollouts look for a grounding reward in it).
        sampled_repeats: Sampled episodes per item (``vlrollout.eval_samples``; 0: none).
        shown: Episodes shown per evaluation (``vlrollout.log_rollouts``).
        out: The run's output folder.
    """

    engine: Any
    greedy: Any
    sampled: Any
    items: list[dict]
    reward: Any
    sampled_repeats: int
    shown: int
    out: Path

    @property
    def path(self) -> Path:
        """``eval.jsonl`` of the run: one record per evaluation."""
        return self.out / EVAL_FILE

    def run(self, step: int, loggers: TrainLoggers) -> dict[str, Any]:
        """Evaluate after ``step`` training steps; record, show and log it; return the record.

        Raises:
            NothingAccepted: See :func:`evaluate`.
        """
        t = time.perf_counter()
        episodes: list[tuple[dict, dict | None]] = []
        rec = {
            "step": step,
            **evaluate(self.engine, self.greedy, self.items, step=step, episodes_out=episodes),
        }
        prefixes = ["eval"]
        if self.sampled_repeats:
            repeats = self.sampled_repeats
            rec.update(
                evaluate(self.engine, self.sampled, self.items, "eval_sampled", repeats, step)
            )
            prefixes.append("eval_sampled")
        rec["eval/seconds"] = time.perf_counter() - t
        append_jsonl(self.path, rec)
        shown = samples.collect(step, episodes, self.greedy, self.reward, self.shown)
        samples.save(self.out, shown)
        loggers.add(rec)
        loggers.rollouts(step, shown)
        lines = "; ".join(eval_line(rec, p) for p in prefixes)
        logger.info("held-out eval at step %d: %s", step, lines)
        return rec
