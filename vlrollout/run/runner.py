"""``vlrollout run``: a workflow over a data file, with resumable output and a summary.

Output folder layout (every file written atomically: temp file, then ``os.replace``; files get
the mode the umask gives, like any other file the user creates):

- ``trajectories/<name>.pt`` — the item's group, concatenated by AReaL's ``GroupedRolloutWorkflow``
  (``torch.load(path, weights_only=False)`` gives the trajectory dict a trainer consumes);
- ``items/<name>.json`` — the item's outcome: completions, rewards, rejections. Its presence marks the
  item done, so a killed run resumes where it stopped without repeating or losing items;
- ``summary.json`` and ``report.html`` at the end.

``<name>`` is :func:`vlrollout.files.item_stem`: the id made file-safe and shortened, plus a digest of the id, so
two ids never share a file and no id is too long for the file system. The summary is computed from
the item files on disk (each holds its id), so it counts exactly what was written.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from areal.api import InferenceEngine, RolloutWorkflow

from vlrollout.compat.areal import GroupedRolloutWorkflow
from vlrollout.files import (
    atomic_torch_save,
    atomic_write_json,
    item_stem,
    read_outcomes,
    remove_temp_files,
)
from vlrollout.ledger import EpisodeLedger
from vlrollout.logs import get_logger
from vlrollout.processors.cache import item_fields_key
from vlrollout.run.items import BLOCKING, item_problems

logger = get_logger("vlrollout.run")


def generated_segments(traj: dict[str, Any], row: int) -> list[list[int]]:
    """Token ids of each generated turn of one row (contiguous runs of ``loss_mask == 1``)."""
    ids = traj["input_ids"][row].tolist()
    mask = traj["loss_mask"][row].tolist()
    segments: list[list[int]] = []
    previous = 0
    for token, m in zip(ids, mask, strict=True):
        if m and not previous:
            segments.append([])
        if m:
            segments[-1].append(token)
        previous = m
    return segments


@dataclass
class ItemOutcome:
    """What happened to one item, as saved in ``items/<id>.json``."""

    id: str
    status: str  # "accepted" (at least one episode kept) or "rejected"
    episodes: list[dict[str, Any]]
    rejections: list[dict[str, str]]
    generated_tokens: int
    fields_key: str | None = None  # item_fields_key of the item it is the outcome of

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class Pending:
    """The items a run has to do (``todo``), and which of them have an outcome already: made for
    another version of the item (``redone``), or a rejection (``retried``)."""

    todo: list[dict[str, Any]] = field(default_factory=list)
    redone: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)


class Runner:
    """Runs ``workflow`` over ``items`` with groups, bounded concurrency and resumable output.

    Args:
        workflow: A vlrollout workflow (it must have a ``ledger``: rejections are read from it).
        engine: Any AReaL ``InferenceEngine``.
        tokenizer: Decodes completions for the item files and the report.
        output: Output folder.
        group_size: Episodes per item.
        concurrency: Items in flight at once.
        fail_fast: Stop at the first item with a rejected episode.
    """

    def __init__(
        self,
        workflow: RolloutWorkflow,
        engine: InferenceEngine,
        tokenizer: Any,
        output: str | Path,
        group_size: int = 1,
        concurrency: int = 4,
        fail_fast: bool = False,
    ) -> None:
        self.workflow = workflow
        self.ledger: EpisodeLedger = workflow.ledger
        self.group = GroupedRolloutWorkflow(workflow, group_size, logger)
        self.engine = engine
        self.tokenizer = tokenizer
        self.output = Path(output)
        self.group_size = group_size
        self.concurrency = concurrency
        self.fail_fast = fail_fast
        self.started: float | None = None  # perf_counter() when run() started

    def elapsed_s(self) -> float:
        """Seconds since :meth:`run` started (0 before): an interrupted run's ``wall_s``."""
        return 0.0 if self.started is None else time.perf_counter() - self.started

    def decode(self, token_ids: Sequence[int]) -> str:
        """Completion text as the reward saw it (the workflow's decoding: trailing stop dropped)."""
        ctx = getattr(self.workflow, "ctx", None)
        if ctx is not None:
            return ctx.decode_completion(token_ids)
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def item_path(self, item_id: str) -> Path:
        return self.output / "items" / f"{item_stem(item_id)}.json"

    def trajectory_path(self, item_id: str) -> Path:
        return self.output / "trajectories" / f"{item_stem(item_id)}.pt"

    def pending(self, items: Sequence[dict[str, Any]]) -> Pending:
        """What a resumed run still has to do: items without an outcome file, items whose
        outcome was made for another version of them (``item_fields_key``: prompt, media and
        labels; an outcome that stores no key is kept) and items that were rejected (run again:
        a fixed file, a server back up)."""
        done = read_outcomes(self.output)
        pending = Pending()
        for item in items:
            outcome = done.get(item["id"])
            if outcome is None:
                pending.todo.append(item)
            elif outcome.get("fields_key") not in (None, item_fields_key(item)):
                pending.todo.append(item)
                pending.redone.append(item["id"])
            elif outcome.get("status") == "rejected":
                pending.todo.append(item)
                pending.retried.append(item["id"])
        return pending

    async def run_item(self, item: dict[str, Any]) -> ItemOutcome:
        """Run one item's group; nothing the item or the model does can raise out of here
        (a bad item or a failing workflow becomes rejections with their reason)."""
        label = f"item {item['id']}"
        blocking = [(r, d) for r, d in item_problems(item) if r in BLOCKING]
        if blocking:
            detail = "; ".join(d for _, d in blocking)
            rejection = {"item": label, "reason": blocking[0][0], "detail": detail}
            rejections = [rejection] * self.group_size
            return self._finish(item, None, rejections)
        before = sum(1 for r in self.ledger.records if r.item == label)
        failed = None
        try:
            traj = await self.group.arun_episode(self.engine, item)
        except Exception as e:  # noqa: BLE001 - recorded as the item's rejection reason
            logger.debug("workflow failed on %s", label, exc_info=True)
            traj = None
            failed = {
                "item": label,
                "reason": "workflow_error",
                "detail": f"{type(e).__name__}: {e}",
            }
        rejections = [r.to_dict() for r in self.ledger.records if r.item == label][before:]
        if failed is not None:
            rejections += [failed] * max(1, self.group_size - len(rejections))
        return self._finish(item, traj, rejections)

    def _finish(
        self, item: dict[str, Any], traj: dict[str, Any] | None, rejections: list[dict[str, str]]
    ) -> ItemOutcome:
        """Write the item's trajectory and outcome files (the outcome last: it marks it done); a
        rejected item has no trajectory file, also when an earlier version of it had one."""
        episodes, tokens = [], 0
        if traj is None:  # an earlier version of the item may have left rollouts
            self.trajectory_path(item["id"]).unlink(missing_ok=True)
        else:
            atomic_torch_save(self.trajectory_path(item["id"]), traj)
            for row in range(traj["input_ids"].shape[0]):
                turns = generated_segments(traj, row)
                tokens += sum(len(t) for t in turns)
                episodes.append(
                    {
                        "reward": float(traj["rewards"][row]),
                        "turns": [self.decode(t) for t in turns],
                    }
                )
        outcome = ItemOutcome(
            id=item["id"],
            status="accepted" if traj is not None else "rejected",
            episodes=episodes,
            rejections=rejections,
            generated_tokens=tokens,
            fields_key=item_fields_key(item),
        )
        atomic_write_json(self.item_path(item["id"]), outcome.to_dict())
        return outcome

    async def run(self, items: Sequence[dict[str, Any]], progress: bool = True) -> dict[str, Any]:
        """Run every pending item; returns the summary (also written to ``summary.json``).

        Cancelling the task stops the items in flight (they are not written, so a rerun does
        them) and re-raises ``asyncio.CancelledError``; finished items stay on disk.
        """
        self.output.mkdir(parents=True, exist_ok=True)
        remove_temp_files(self.output)
        pending = self.pending(items)
        todo = pending.todo
        if pending.redone:
            logger.info(
                "%d item(s) changed since their outcome was saved: run again", len(pending.redone)
            )
        start = self.started = time.perf_counter()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(items), initial=len(items) - len(todo), unit="item")
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for item in todo:
            queue.put_nowait(item)
        rewards: list[float] = []
        tokens_this_run: list[int] = []
        stop = asyncio.Event()
        failure: list[ItemOutcome] = []

        async def worker() -> None:
            while not stop.is_set():
                try:
                    item = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                outcome = await self.run_item(item)
                rewards.extend(e["reward"] for e in outcome.episodes)
                tokens_this_run.append(outcome.generated_tokens)
                if bar is not None:
                    bar.update(1)
                    if rewards:
                        bar.set_postfix(mean_reward=f"{statistics.fmean(rewards):.3f}")
                if self.fail_fast and outcome.rejections:
                    failure.append(outcome)
                    stop.set()

        try:
            await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        finally:
            if bar is not None:
                bar.close()
        wall = time.perf_counter() - start
        summary = summarize(self.output, items, wall_s=wall)
        # Throughput of this invocation only: a resumed run's earlier items took other time.
        summary["tokens_per_s"] = sum(tokens_this_run) / wall if wall > 0 else None
        summary["this_run"] = {
            "items_run": len(todo) - queue.qsize(),
            "wall_s": round(wall, 3),
            "redone": pending.redone,
            "retried": pending.retried,
        }
        if failure:
            summary["stopped_early"] = {
                "item": failure[0].id,
                "rejections": failure[0].rejections,
            }
        atomic_write_json(self.output / "summary.json", summary)
        return summary


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values),
        "min": min(values),
        "max": max(values),
    }


def group_stats(rewards_per_group: Sequence[Sequence[float]]) -> dict[str, Any]:
    """How many GRPO groups (of two or more kept episodes) have all-equal rewards: their
    advantages are all zero, so they teach nothing."""
    groups = [g for g in rewards_per_group if len(g) >= 2]
    equal = sum(1 for g in groups if max(g) - min(g) <= 1e-12)
    return {
        "groups": len(groups),
        "all_equal": equal,
        "fraction_all_equal": equal / len(groups) if groups else None,
    }


def summarize(output: Path, items: Sequence[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """Summary over every finished item on disk in ``output`` (including those of earlier,
    resumed runs) that is one of ``items``; ``items.other_items_in_folder`` counts the finished
    items on disk that are not (a rerun with a smaller ``--limit``), when there are any."""
    on_disk = read_outcomes(output)
    outcomes = [(item, on_disk[item["id"]]) for item in items if item["id"] in on_disk]
    others = len(on_disk.keys() - {str(item["id"]) for item in items})
    rewards = [e["reward"] for _, o in outcomes for e in o["episodes"]]
    by_task: dict[str, list[float]] = {}
    for item, o in outcomes:
        by_task.setdefault(str(item.get("task", "all")), []).extend(
            e["reward"] for e in o["episodes"]
        )
    rejections = [dict(r, id=o["id"]) for _, o in outcomes for r in o["rejections"]]
    by_reason: dict[str, int] = {}
    for r in rejections:
        by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + 1
    tokens = sum(o["generated_tokens"] for _, o in outcomes)
    episodes_kept = len(rewards)
    return {
        "items": {
            "total": len(items),
            "done": len(outcomes),
            "accepted": sum(o["status"] == "accepted" for _, o in outcomes),
            "rejected": sum(o["status"] == "rejected" for _, o in outcomes),
            **({"other_items_in_folder": others} if others else {}),
        },
        "episodes": {
            "accepted": episodes_kept,
            "rejected": len(rejections),
            "rejected_by_reason": by_reason,
        },
        "rejections": rejections,
        "reward": _stats(rewards),
        "reward_by_task": {k: _stats(v) for k, v in sorted(by_task.items())},
        "groups": group_stats([[e["reward"] for e in o["episodes"]] for _, o in outcomes]),
        "generated_tokens": tokens,
        "wall_s": wall_s,
    }
