"""What each process of a ``vlrollout train`` run does when ``torchrun`` starts several.

AReaL's data-parallel layout, as its ``DistRolloutCoordinator`` runs it: every data-parallel
head rolls out the items it is given on its own engine, then the trajectories are gathered and
redistributed across ranks by sequence length (whole GRPO groups move together), each rank
computes advantages and its share of the loss, and FSDP reduces the gradients. On-policy steps
gather through :class:`SharedRollout` (AReaL's gather needs equal numbers of groups per rank);
asynchronous ones through :func:`vlrollout.train.asynchronous.share_between_ranks` (AReaL's
``redistribute_trajectories``), each rank collecting a full share. So each rank
gets its own share of the step's items (:meth:`Ranks.share`); files (``metrics.jsonl``,
``eval.jsonl``, the report, checkpoints' ``state.json``) are written once, by rank 0; the
metrics of a step describe the whole batch (:meth:`Ranks.gather` of every rank's
trajectories, :func:`stats_view`); the held-out evaluation runs on rank 0's engine.

With one process every method here is the identity (no ``torch.distributed`` call).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from areal.utils.data import tensor_container_to
from areal.utils.seqpack import get_allocate_fn

from vlrollout.compat.areal import training_device

T = TypeVar("T")

STATS_KEYS = ("input_ids", "loss_mask", "rewards", "versions")
"""What the step's metrics read of a rollout trajectory (:mod:`vlrollout.train.stats`,
staleness); images and logprobs are not sent between ranks."""

ADVANTAGE_KEYS = ("loss_mask", "advantages")
"""What they read of ``compute_advantages``' output (whose ``loss_mask`` is shifted)."""


@dataclass(frozen=True)
class Ranks:
    """This process's place in the run.

    Attributes:
        rank: This process's rank (``RANK``), 0 without a launcher.
        world: Number of processes (``WORLD_SIZE``), 1 without a launcher.
    """

    rank: int = 0
    world: int = 1

    @classmethod
    def from_env(cls) -> Ranks:
        """The rank and world size ``torchrun`` set (``RANK``, ``WORLD_SIZE``); 0 of 1 without."""
        return cls(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))

    @property
    def main(self) -> bool:
        """Rank 0: the process that writes files, evaluates and prints."""
        return self.rank == 0

    def share(self, items: Sequence[T]) -> list[T]:
        """This rank's items of a step: every ``world``-th, starting at ``rank``.

        >>> Ranks(1, 2).share(["a", "b", "c", "d"])
        ['b', 'd']
        """
        return list(items[self.rank :: self.world])

    def barrier(self) -> None:
        """Wait for every rank (nothing with one process)."""
        if self.world > 1:
            dist.barrier()

    def gather(self, values: list[T]) -> list[T]:
        """Every rank's ``values`` concatenated in rank order, on every rank (picklable values;
        the default process group, gloo on a CPU)."""
        if self.world == 1:
            return list(values)
        parts: list[list[T] | None] = [None] * self.world
        dist.all_gather_object(parts, values)
        return [v for part in parts for v in (part or [])]

    def by_reason(self, counts: dict[str, int], prefix: str) -> dict[str, int]:
        """``counts`` (reasons to numbers, each rank its own reasons) summed over ranks, as
        ``{"<prefix>/<reason>": n}`` in reason order."""
        summed: dict[str, int] = {}
        for part in self.gather([counts]):
            for reason, n in part.items():
                summed[reason] = summed.get(reason, 0) + int(n)
        return {f"{prefix}/{reason}": summed[reason] for reason in sorted(summed)}

    def total(self, counts: dict[str, int]) -> dict[str, int]:
        """``counts`` summed over ranks, key by key (every rank passes the same keys)."""
        if self.world == 1:
            return dict(counts)
        summed: dict[str, int] = {}
        for part in self.gather([counts]):
            for k, v in part.items():
                summed[k] = summed.get(k, 0) + int(v)
        return summed


def stats_view(
    batch: Sequence[dict[str, Any]], keys: Sequence[str] = STATS_KEYS
) -> list[dict[str, torch.Tensor]]:
    """The part of each trajectory the step's metrics read (``keys`` it has), on the CPU."""
    return [{k: traj[k].detach().cpu() for k in keys if k in traj} for traj in batch]


@dataclass
class SharedRollout:
    """``rollout_batch`` for several processes whose shares may come back with unequal numbers
    of groups (an item rejected on one rank: a bad data line, an unreadable image).

    AReaL's ``DistRolloutCoordinator`` gathers the data-parallel heads' trajectories with
    ``all_gather_tensor_container``, which needs every rank to send as many as the others and
    otherwise fails ("mismatched lengths"): one rejected item would end the run. Here each rank
    rolls out its share on its own engine, the groups are gathered as objects (any number per
    rank), and AReaL's own allocation (``get_allocate_fn``, as ``redistribute_trajectories``
    uses it) assigns them to ranks by sequence length, whole groups together.

    Attributes:
        engine: This rank's inference engine.
        ranks: This process's place in the run.
        packing_algorithm: AReaL's allocation (``actor.mb_spec.packing_algorithm``).
    """

    engine: Any
    ranks: Ranks
    packing_algorithm: str = "ffd"

    def rollout_batch(
        self, data: list[dict[str, Any]], workflow: Any, group_size: int = 1
    ) -> list[dict[str, Any]]:
        """This rank's groups of the step: its share of every rank's accepted groups.

        Raises:
            RuntimeError: Fewer groups were accepted over all ranks than there are ranks (each
                rank trains on at least one); ``rollout_step`` turns it into ``NothingAccepted``
                on a rank that accepted none.
        """
        local = self.engine.rollout_batch(data, workflow=workflow, group_size=group_size)
        everything = self.ranks.gather(tensor_container_to(local, "cpu"))
        if len(everything) < self.ranks.world:
            raise RuntimeError(
                f"{len(everything)} group(s) accepted over {self.ranks.world} processes: each "
                "process trains on at least one"
            )
        seqlens = [int(t["attention_mask"].sum()) for t in everything]
        allocate = get_allocate_fn(self.packing_algorithm)
        mine = allocate(seqlens, capacity=int(1e12), min_groups=self.ranks.world)[self.ranks.rank]
        return tensor_container_to([everything[i] for i in mine], training_device())
