"""Held-out evaluation of a ``vlrollout train`` run: scores straight on the engine, and what each
evaluation records.

Each evaluation runs the held-out items greedily (``eval/``) and, with ``vlrollout.eval_samples``,
sampled ``eval_samples`` times each (``eval_sampled/``), outside AReaL's staleness budget; it
appends one record to ``eval.jsonl``, saves the first ``vlrollout.log_rollouts`` episodes as shown
rollouts (:mod:`vlrollout.train.samples`), hands both to the experiment trackers and logs one
line (:func:`eval_line`). Rank 0 evaluates; the other ranks wait at the step's barrier.

Two scorers: the mean reward of the run's reward (:func:`evaluate`), or, with
``vlrollout.eval_task``, the evaluator of ``vlrollout eval`` (:func:`evaluate_task`: its
:class:`~vlrollout.eval.predict.EnginePredictor` on the training engine, the task's benchmark
metrics), so that ``vlrollout eval`` on a saved checkpoint gives the same numbers.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from areal.infra import workflow_context
from areal.infra.workflow_context import WorkflowContext

from vlrollout.eval.predict import EnginePredictor
from vlrollout.eval.runner import EvalResult, evaluate_items
from vlrollout.eval.tasks import EvalTask
from vlrollout.jsonl import append_jsonl
from vlrollout.ledger import NothingAccepted
from vlrollout.logs import get_logger
from vlrollout.processors.image_loading import load_image
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
    behind it were rejected (:func:`eval_line` prints both). A task whose every episode was
    rejected has no ``{prefix}/{task}`` (a warning names it): its mean would measure nothing.

    Raises:
        NothingAccepted: Every episode was rejected: a mean of zeros would measure nothing.
            ``step`` is named in the message.
    """
    episodes = [it for it in items for _ in range(repeats)]
    ledger = getattr(workflow, "ledger", None)
    mark = ledger.mark() if ledger is not None else None

    async def run():
        # The episodes' stats go to AReaL's evaluation scope, as its executor's is_eval does,
        # not into the training step's rollout stats.
        workflow_context.set(WorkflowContext(is_eval=True))
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
    accepted: dict[str, int] = {}
    for it, t in zip(episodes, trajs, strict=True):
        task = it.get("task", "all")
        score = float(t["rewards"].flatten()[0]) if t is not None else 0.0
        by_task.setdefault(task, []).append(score)
        accepted[task] = accepted.get(task, 0) + (t is not None)
    out = {f"{prefix}/{k}": statistics.fmean(v) for k, v in by_task.items() if accepted[k]}
    for task in (k for k in by_task if not accepted[k]):
        at = f" at step {step}" if step is not None else ""
        logger.warning(
            "held-out evaluation %r%s: every episode of task %r was rejected; it has no mean "
            "(the rejections are logged above)",
            prefix,
            at,
            task,
        )
    out[f"{prefix}/mean"] = statistics.fmean(s for v in by_task.values() for s in v)
    out[f"{prefix}/n"] = len(episodes)
    out[f"{prefix}/rejected"] = sum(t is None for t in trajs)
    return out


def eval_line(record: dict[str, Any], prefix: str = "eval") -> str:
    """The mean of one evaluation with its denominator and rejections, for the log; with a task,
    its primary metric over the scored items.

    >>> eval_line({"eval/mean": 0.5, "eval/n": 8, "eval/rejected": 2})
    'eval 0.5000 over 8 episodes (2 rejected, scored 0)'
    >>> eval_line({"eval/mean": 0.5, "eval/n": 8, "eval/rejected": 2, "eval_primary": "ACC@0.5"})
    'eval ACC@0.5 0.5000 over 6 items (2 rejected, not scored)'
    """
    n, rejected = record[f"{prefix}/n"], record[f"{prefix}/rejected"]
    primary = record.get(PRIMARY_KEY)
    if primary is None:
        line = f"{prefix} {record[f'{prefix}/mean']:.4f} over {n} episodes"
        return line + (f" ({rejected} rejected, scored 0)" if rejected else "")
    line = f"{prefix} {primary} {record[f'{prefix}/mean']:.4f} over {n - rejected} items"
    return line + (f" ({rejected} rejected, not scored)" if rejected else "")


TASK_KEY = "eval_task"
"""The ``eval.jsonl`` field naming the task of an evaluation scored by :func:`evaluate_task`."""
PRIMARY_KEY = "eval_primary"
"""The ``eval.jsonl`` field naming the metric ``eval/mean`` holds (the task's primary metric)."""


def held_out_concurrency(kind: str, deterministic: bool, items: int) -> int:
    """Held-out items a task evaluation runs at once: one on a batching local engine, so each
    greedy completion is decoded alone, as a deterministic engine (``vlrollout eval``'s default)
    decodes it: rows batched together can flip a near-tie argmax. A deterministic local engine
    decodes one row at a time whatever is in flight, and a server batches as it likes: every item
    at once.

    >>> held_out_concurrency("local", False, 200), held_out_concurrency("local", True, 200)
    (1, 200)
    """
    return 1 if kind == "local" and not deterministic else max(1, items)


@dataclass
class TaskEvaluation:
    """The evaluator of ``vlrollout eval`` on the training engine (``vlrollout.eval_task``).

    Attributes:
        task: The benchmark task.
        predictor: The predictor on the training engine, built with the run's ``gconfig``:
            greedy for the ``eval/`` evaluation, sampling at the training temperature for
            ``eval_sampled/`` (``vlrollout.eval_samples`` completions per item).
        family: The model family, or the box format (``vlrollout.eval_box_format``): how the
            task reads boxes.
        concurrency: Held-out items in flight at once (:func:`held_out_concurrency`).
    """

    task: EvalTask
    predictor: EnginePredictor
    family: str
    concurrency: int = 1


def evaluate_task(
    evaluation: TaskEvaluation,
    items: list[dict],
    prefix: str = "eval",
    k: int = 1,
    step: int | None = None,
) -> tuple[dict[str, float], EvalResult]:
    """The task's metrics over ``items`` by :func:`vlrollout.eval.runner.evaluate_items`, the
    evaluator of ``vlrollout eval``: ``{prefix}/<metric>`` for each metric of the task (``k > 1``:
    means over ``k`` samples per item, and ``pass@k``), ``{prefix}/mean`` = the primary metric,
    ``{prefix}/n`` items and ``{prefix}/rejected`` items not scored (each with its reason in the
    result). The values are ``vlrollout eval``'s ``results.json`` ones for the same completions
    (no confidence intervals: none are drawn during training).

    Raises:
        NothingAccepted: No item was scored. ``step`` is named in the message.
    """
    result = evaluate_items(
        evaluation.task,
        evaluation.predictor,
        items,
        None,
        k=k,
        concurrency=evaluation.concurrency,
        progress=False,
        family=evaluation.family,
        bootstrap=0,
    )
    if not result.scores:
        at = f" at step {step}" if step is not None else ""
        records = [
            {"item": f"item {r['id']}", "reason": r["reason"], "detail": r["detail"]}
            for r in result.rejections
        ]
        raise NothingAccepted(
            f"the held-out evaluation {prefix!r}{at} ({evaluation.task.name})",
            len(items),
            records,
            hint="no metric is reported from no scored item",
        )
    out = {f"{prefix}/{name}": entry["value"] for name, entry in result.metrics.items()}
    out[f"{prefix}/mean"] = result.metrics[evaluation.task.primary]["value"]
    out[f"{prefix}/n"] = len(items)
    out[f"{prefix}/rejected"] = len(result.rejections)
    return out, result


def shown_predictions(
    step: int, result: EvalResult, items: list[dict], primary: str, count: int
) -> list[samples.HeldOutRollout]:
    """The first ``count`` held-out items of a task evaluation as shown rollouts: the greedy
    completion, the item's primary metric as its reward (a corpus metric such as CIDEr-D has no
    per-item value: the item's first value instead; 0 for an item not scored), and for grounding
    the true and predicted boxes the task compared (original pixels) drawn on the image."""
    scores = {s.id: s for s in result.scores}
    out = []
    for index, item in enumerate(items[:count]):
        item_id = str(item.get("id", index))
        shown = samples.HeldOutRollout(step, index, item_id, item.get("task"), None, 0.0)
        out.append(shown)
        prediction, score = result.predictions.get(item_id), scores.get(item_id)
        if prediction is None or not prediction.completions:
            continue
        shown.completion = prediction.completions[0]
        if score is None:
            continue
        shown.reward = score.values.get(primary, next(iter(score.values.values()), 0.0))
        shown.true_boxes = [tuple(b) for b in score.details.get("true_boxes") or []]
        shown.predicted_boxes = [tuple(b) for b in score.details.get("pred_boxes") or []]
        if score.details.get("reason") and "true_boxes" in score.details:
            shown.box_problems = [str(score.details["reason"])]
        images = item.get("images") or []
        if images:
            image = load_image(images[0], f"item {item_id}, image 0").image
            shown.image = samples.draw(image, shown.true_boxes, shown.predicted_boxes)
    return out


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
        task: With ``vlrollout.eval_task``, the evaluator that scores the items instead of the
            workflows and the reward (:func:`evaluate_task`).
    """

    engine: Any
    greedy: Any
    sampled: Any
    items: list[dict]
    reward: Any
    sampled_repeats: int
    shown: int
    out: Path
    task: TaskEvaluation | None = None

    @property
    def path(self) -> Path:
        """``eval.jsonl`` of the run: one record per evaluation."""
        return self.out / EVAL_FILE

    def run(self, step: int, loggers: TrainLoggers) -> dict[str, Any]:
        """Evaluate after ``step`` training steps; record, show and log it; return the record.

        Raises:
            NothingAccepted: See :func:`evaluate` and :func:`evaluate_task`.
        """
        t = time.perf_counter()
        if self.task is not None:
            rec, shown = self._task_run(step, self.task)
        else:
            rec, shown = self._reward_run(step)
        prefixes = ["eval", *(["eval_sampled"] if self.sampled_repeats else [])]
        rec["eval/seconds"] = time.perf_counter() - t
        append_jsonl(self.path, rec)
        samples.save(self.out, shown)
        loggers.add(rec)
        loggers.rollouts(step, shown)
        lines = "; ".join(eval_line(rec, p) for p in prefixes)
        logger.info("held-out eval at step %d: %s", step, lines)
        return rec

    def _reward_run(self, step: int) -> tuple[dict[str, Any], list[samples.HeldOutRollout]]:
        """The record and shown rollouts of an evaluation by the mean reward."""
        episodes: list[tuple[dict, dict | None]] = []
        rec = {
            "step": step,
            **evaluate(self.engine, self.greedy, self.items, step=step, episodes_out=episodes),
        }
        if self.sampled_repeats:
            repeats = self.sampled_repeats
            rec.update(
                evaluate(self.engine, self.sampled, self.items, "eval_sampled", repeats, step)
            )
        return rec, samples.collect(step, episodes, self.greedy, self.reward, self.shown)

    def _task_run(
        self, step: int, task: TaskEvaluation
    ) -> tuple[dict[str, Any], list[samples.HeldOutRollout]]:
        """The record and shown rollouts of an evaluation by the task (:func:`evaluate_task`)."""
        values, result = evaluate_task(task, self.items, step=step)
        rec: dict[str, Any] = {
            "step": step,
            TASK_KEY: task.task.name,
            PRIMARY_KEY: task.task.primary,
            **values,
        }
        if self.sampled_repeats:
            sampled, _ = evaluate_task(task, self.items, "eval_sampled", self.sampled_repeats, step)
            rec.update(sampled)
        shown = shown_predictions(step, result, self.items, task.task.primary, self.shown)
        return rec, shown
