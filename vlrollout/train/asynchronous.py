"""Asynchronous rollouts for ``vlrollout train``: ``rollout.max_head_offpolicyness = k > 0``.

With k > 0 the items of a step are submitted to the engine ``k`` steps before the step that
trains them, through AReaL's ``WorkflowExecutor`` (the engine's public ``submit``/``wait``), so
episodes run while the trainer computes logprobs and the PPO update, and the trainer waits only
for what is not finished yet. When step ``s`` has its batch, the items of steps up to ``s + k``
are submitted before the update starts: the overlap does not depend on how long a batch takes.
AReaL's staleness manager admits a submitted episode only while ``accepted + running <
(k + version + 1) × batch_size`` (``version``: the engine's weight version), so an episode
starts at most k versions before the step that trains it when episodes finish in the order they
started; one overtaken by later ones can be trained later than that (AReaL bounds admission, it
filters nothing). Step ``s`` so trains tokens ``min(s - 1, k)`` versions old when a batch rolls
out within an update. :func:`staleness` measures what was trained, and the loop records it in
``metrics.jsonl``.

Weight updates are the on-policy loop's: ``engine.pause()`` (AReaL's executor starts no new
episode) → ``actor.update_weights`` → ``set_version`` → ``engine.resume()``. Episodes in flight
carry on with the new weights; each token keeps the version of the weights that sampled it.

The pieces here, used by :mod:`vlrollout.train.session` (start) and :mod:`vlrollout.train.step`:

- :class:`StepOrderedItems` and :func:`build_loader`: a torchdata ``StatefulDataLoader`` over
  the training items in the order :func:`~vlrollout.train.data.batch_items` gives them, step
  after step. Its state is saved with each checkpoint (:meth:`AsyncRollouts.state`), so a
  resumed run pulls the next item the killed one had not pulled yet; episodes in flight when it
  stopped (up to k steps' worth) are not run again, and neither are the items of a batch pulled
  for a rejected group's replacement and not submitted yet.
- :class:`GuardedLoader`: hands out the items one at a time and stops the run with
  :class:`~vlrollout.ledger.NothingAccepted` when a step has seen a whole step's worth of
  rejected episodes and no accepted one (each rejected group is replaced by the next item, so
  without it a run whose every episode fails would submit for ever).
- :class:`AsyncRollouts`: submits ahead and collects each step's accepted groups.
- :func:`config_warnings`: what the run is told about the rest of the config under k > 0.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from areal.infra.dist_rollout import redistribute_trajectories
from areal.utils.data import split_and_unpad_tensor, tensor_container_to
from areal.utils.seqpack import get_allocate_fn
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from vlrollout.compat.areal import training_device
from vlrollout.ledger import NothingAccepted
from vlrollout.train.data import batch_items

ENDLESS = sys.maxsize
"""Positions of :class:`StepOrderedItems`: epochs follow one another, so there is no last one."""

WAIT_S = 5.0
"""How long one ``wait`` for a finished group lasts before the trainer asks again (it returns as
soon as one finishes; nothing is submitted on its account)."""


# ----------------------------------------------------------------------------- configuration
def weight_versions(n: int) -> str:
    """``n`` weight version(s), for messages about staleness."""
    return f"{n} weight version" if n == 1 else f"{n} weight versions"


def config_warnings(cfg: Any) -> list[str]:
    """Lines to log for a ``TrainConfig`` with ``rollout.max_head_offpolicyness > 0`` whose loss
    trains stale tokens as if they were on-policy.

    Two settings do: PPO's loss with ``actor.recompute_logprob`` (its ratio is taken against the
    trainer's current policy, not the one that sampled each token), and AReaL's decoupled loss
    with one minibatch per step, no ``actor.rejection_sampling`` and a recomputed proximal
    policy (its ratio to the proximal policy is 1 at every token, and nothing weights a token by
    proximal over behaviour policy; ``prox_logp_method=loglinear`` interpolates another one).
    PPO's loss against the logprobs of the policy that sampled each token
    (``actor.use_decoupled_loss=false``, ``actor.recompute_logprob=false``) weights and clips
    each stale token, and is not warned about. (What k > 0 cannot run with,
    :func:`~vlrollout.train.config.check_rules` refuses.)
    """
    k = cfg.rollout.max_head_offpolicyness
    actor = cfg.actor
    if k == 0:
        return []
    if not actor.use_decoupled_loss and actor.recompute_logprob:
        return [
            f"rollout.max_head_offpolicyness={k} with actor.recompute_logprob=true and no "
            "decoupled loss: PPO's ratio is taken against the trainer's current policy, so tokens "
            f"up to {weight_versions(k)} old are trained as if on-policy; set "
            "actor.recompute_logprob=false (the ratio against the policy that sampled each token)"
        ]
    one_ratio = actor.ppo_n_minibatches == 1 and not actor.rejection_sampling
    if actor.use_decoupled_loss and one_ratio and actor.should_compute_prox_logp():
        # a recomputed proximal policy is the current one; loglinear's is interpolated
        return [
            f"rollout.max_head_offpolicyness={k} with actor.use_decoupled_loss=true, one minibatch "
            "per step and no actor.rejection_sampling: the ratio to the proximal policy is 1 at "
            f"every token, so tokens up to {weight_versions(k)} old are trained as if on-policy; "
            "actor.use_decoupled_loss=false actor.recompute_logprob=false takes PPO's ratio "
            "against the policy that sampled each token (docs/training.md#asynchronous-training)"
        ]
    return []


# ----------------------------------------------------------------------------- the data
class StepOrderedItems(Dataset):
    """The training items as ``batch_items`` orders them, from position ``first`` on.

    Position ``p`` is item ``p % batch_size`` of step ``p // batch_size``, so reading positions in
    order reads the steps' items in order, each epoch a fresh seeded permutation; a loader that
    starts at ``first = start × batch_size`` continues a run that completed ``start`` steps
    without a saved loader state (one trained with k = 0).

    >>> items = [{"id": i} for i in range(5)]
    >>> ds = StepOrderedItems(items, batch_size=2, seed=0, first=2)
    >>> from vlrollout.train.data import batch_items
    >>> [ds[i]["id"] for i in range(4)] == [
    ...     it["id"] for s in (1, 2) for it in batch_items(items, s, 2, 0)
    ... ]
    True
    """

    def __init__(self, items: list[dict], batch_size: int, seed: int, first: int = 0):
        self.items, self.batch_size, self.seed, self.first = items, batch_size, seed, first
        self._step: tuple[int, list[dict]] = (-1, [])  # the last step read, and its items

    def __len__(self) -> int:
        return ENDLESS - self.first

    def __getitem__(self, index: int) -> dict:
        step, i = divmod(self.first + index, self.batch_size)
        if self._step[0] != step:
            self._step = (step, batch_items(self.items, step, self.batch_size, self.seed))
        return self._step[1][i]


def _as_list(items: list[dict]) -> list[dict]:
    """The loader's collate function: the items as they are (AReaL's workflows take dicts)."""
    return items


def build_loader(
    items: list[dict],
    batch_size: int,
    seed: int,
    state: dict[str, Any] | None = None,
    start: int = 0,
) -> StatefulDataLoader:
    """The ``StatefulDataLoader`` that :class:`GuardedLoader` pulls the training items from.

    Args:
        items: The training items.
        batch_size: Items per step (``train_dataset.batch_size``).
        seed: The run's seed (``batch_items``' permutations).
        state: :meth:`AsyncRollouts.state` of the checkpoint resumed from, or ``None``.
        start: Steps completed; where a loader without ``state`` starts.
    """
    first = state["first"] if state is not None else start * batch_size
    loader = StatefulDataLoader(
        StepOrderedItems(items, batch_size, seed, first),
        batch_size=batch_size,
        shuffle=False,
        num_workers=0,
        collate_fn=_as_list,
    )
    if state is not None:
        loader.load_state_dict(state["loader"])
    return loader


# ----------------------------------------------------------------------------- the items, guarded
class GuardedLoader:
    """The items of ``loader``'s batches one at a time, each handed out only while the step
    under way has an accepted episode or fewer rejected ones than a step holds.

    A rejected group is replaced by the next item (:class:`AsyncRollouts`), so when nothing is
    accepted the next pull comes right after the step's worth of rejections, and raises
    instead of submitting for ever.

    Args:
        loader: The dataloader (its ``batch_size`` is a step's number of groups).
        ledger: The training workflow's :class:`~vlrollout.ledger.EpisodeLedger`.
        episodes_per_step: ``batch_size × n_samples``.
    """

    def __init__(self, loader: StatefulDataLoader, ledger: Any, episodes_per_step: int):
        self.loader, self.ledger, self.episodes_per_step = loader, ledger, episodes_per_step
        self.batch_size = loader.batch_size
        self._step = 0
        self._mark = ledger.mark()
        self._batches: Iterator[list[dict]] | None = None
        self._pulled: list[dict] = []  # the rest of the last batch pulled from the loader

    def begin(self, step: int) -> None:
        """A new training step (numbered as ``metrics.jsonl`` numbers it) starts waiting.

        Its episodes are those finished since the previous step got its batch (:meth:`end`),
        not since now: with k >= 1 many of a step's groups finish during the update before it,
        and a step judged without them could be stopped for rejections that follow them."""
        self._step = step

    def outcome(self) -> dict[str, Any]:
        """The ledger's record of the step's episodes so far."""
        return self.ledger.since(self._mark)

    def end(self) -> dict[str, Any]:
        """The step has its batch: its episodes' record; later ones count for the next step."""
        outcome, self._mark = self.ledger.cut(self._mark)
        return outcome

    def check(self) -> None:
        """Raise :class:`~vlrollout.ledger.NothingAccepted` if the step has a step's worth of
        rejected episodes and no accepted one."""
        outcome = self.outcome()
        if outcome["accepted"] == 0 and outcome["rejected"] >= self.episodes_per_step:
            raise NothingAccepted(
                f"training step {self._step}",
                outcome["submitted"],
                outcome["rejections"],
                rejected=outcome["rejected"],
                hint="each rejection is logged above as a warning (--debug adds its traceback)",
            )

    def next_item(self) -> dict:
        """The next item in the loader's order (:meth:`check` first).

        Raises:
            NothingAccepted: See :meth:`check`.
        """
        self.check()
        if not self._pulled:
            if self._batches is None:
                self._batches = iter(self.loader)
            self._pulled = list(next(self._batches))  # StepOrderedItems never ends
        return self._pulled.pop(0)


# ----------------------------------------------------------------------------- the rollouts
def share_between_ranks(
    actor: Any, packing: str, groups: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """This rank's part of every rank's ``groups``, as AReaL's ``prepare_batch`` hands it out
    (``DistRolloutCoordinator``): on the training device, redistributed over the actor's
    data-parallel group by sequence length with AReaL's ``redistribute_trajectories`` and its
    allocation ``packing`` (whole groups move, padding trimmed). Every rank passes
    ``batch_size`` groups (AReaL's gather needs equal numbers). One process keeps them all:
    :func:`keep_all`, the same groups in the same order without AReaL's per-tensor collectives
    (about half a second per step of 8 groups on a loaded CPU, paid while the trainer waits)."""
    groups = tensor_container_to(groups, training_device())
    if dist.get_world_size(actor.data_parallel_group) == 1:
        return keep_all(groups, packing)
    return redistribute_trajectories(
        groups, group=actor.data_parallel_group, packing_algorithm=packing
    ).data


def keep_all(groups: list[dict[str, Any]], packing: str) -> list[dict[str, Any]]:
    """What ``redistribute_trajectories`` returns to the only rank: each group's padding trimmed
    (``split_and_unpad_tensor``), in the order AReaL's allocation ``packing`` puts them."""
    if not groups:
        return []
    seqlens = [int(g["attention_mask"].sum()) for g in groups]
    trimmed = [
        split_and_unpad_tensor(g, n_trajs=1, traj_group_sizes=[g["attention_mask"].shape[0]])[0]
        for g in groups
    ]
    (order,) = get_allocate_fn(packing)(seqlens, capacity=int(1e12), min_groups=1)
    return [trimmed[i] for i in order]


@dataclass
class AsyncRollouts:
    """The training batches of an asynchronous run, submitted ``k`` steps ahead.

    Each item is submitted with the engine's public ``submit`` (a group of ``group_size``
    episodes in AReaL's ``GroupedRolloutWorkflow``) and its group collected with ``wait``, the
    submit/wait pattern AReaL's ``prepare_batch`` recommends for finer control. Before
    :meth:`next_batch` returns the batch of step ``s``, the items of steps up to ``s + k`` are
    submitted, so the next batch rolls out while the trainer updates, by construction. AReaL's
    staleness manager still admits a submitted item only while ``accepted + running <
    (k + version + 1) × batch_size``, so no episode starts more than ``k`` versions before the
    step that trains it.

    Attributes:
        engine: This rank's inference engine (``submit``/``wait``/``workflow_executor``).
        workflow: The training workflow (its ``ledger`` counts every episode).
        group_size: Episodes per item (``gconfig.n_samples``).
        ahead: ``rollout.max_head_offpolicyness`` (k >= 1): steps submitted ahead.
        loader: The dataloader the items come from (:func:`build_loader`).
        first: Its first position (:class:`StepOrderedItems`), saved with its state.
        start: Steps completed before this run (the checkpoint resumed from).
        share: This rank's part of the groups every rank collected (:func:`share_between_ranks`).
    """

    engine: Any
    workflow: Any
    group_size: int
    ahead: int
    loader: StatefulDataLoader
    first: int
    start: int = 0
    share: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = list
    guard: GuardedLoader = field(init=False)
    submitted: int = field(init=False, default=0)  # items submitted by this run
    replaced: int = field(init=False, default=0)  # rejected groups, each replaced by an item

    def __post_init__(self) -> None:
        if self.ahead < 1:
            raise ValueError(f"asynchronous rollouts need k >= 1 steps ahead, got {self.ahead}")
        self.guard = GuardedLoader(
            self.loader, self.workflow.ledger, self.loader.batch_size * self.group_size
        )

    @property
    def batch_size(self) -> int:
        """Groups per step on this rank."""
        return self.loader.batch_size

    def next_batch(self, step: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The batch of training step ``step`` (the first is 1) and the ledger's record of the
        episodes that finished since the previous step got its batch; on return the items of
        steps up to ``step + k`` are submitted.

        Raises:
            NothingAccepted: See :class:`GuardedLoader`.
        """
        self.guard.begin(step)
        self.submit_through(step)
        groups = self.collect()
        outcome = self.guard.end()
        self.submit_through(step + self.ahead)
        return self.share(groups), outcome

    def submit_through(self, step: int) -> None:
        """Submit items until the steps up to ``step`` have theirs (a rejected group's
        replacement counts for the step it was rejected in)."""
        while self.submitted - self.replaced < (step - self.start) * self.batch_size:
            self.submit_one()

    def submit_one(self) -> None:
        """Submit the next item's group (:meth:`GuardedLoader.next_item`)."""
        item = self.guard.next_item()
        self.engine.submit(item, workflow=self.workflow, group_size=self.group_size)
        self.submitted += 1

    def collect(self) -> list[dict[str, Any]]:
        """``batch_size`` accepted groups, the earliest submitted first (AReaL's ``wait``
        returns the earliest created of those finished); each rejected group is replaced by
        the next item."""
        groups: list[dict[str, Any]] = []
        while len(groups) < self.batch_size:
            for group in self.engine.wait(1, timeout=WAIT_S, raise_timeout=False):
                if group is None:
                    self.replaced += 1
                    self.submit_one()
                else:
                    groups.append(group)
        return groups

    def state(self) -> dict[str, Any]:
        """The loader's position, for the checkpoint (``build_loader(state=...)`` restores it)."""
        return {"first": self.first, "loader": self.loader.state_dict()}


def start(
    actor: Any,
    engine: Any,
    workflow: Any,
    items: list[dict],
    *,
    batch_size: int,
    group_size: int,
    ahead: int,
    seed: int,
    start_step: int,
    state: dict[str, Any] | None,
    packing: str = "ffd",
) -> AsyncRollouts:
    """Asynchronous rollouts from ``start_step`` on (resumed from ``state`` when saved).

    On a resumed run AReaL's staleness manager is told the version it starts at
    (``on_version_recovered``, as AReaL's trainer does after recovery): it counts accepted
    episodes from version 0, and would otherwise admit ``start_step`` batches at once.
    """
    loader = build_loader(items, batch_size, seed, state=state, start=start_step)
    if start_step:
        engine.workflow_executor.staleness_manager.on_version_recovered(start_step)
    first = state["first"] if state is not None else start_step * batch_size
    return AsyncRollouts(
        engine,
        workflow,
        group_size,
        ahead,
        loader,
        first,
        start=start_step,
        share=functools.partial(share_between_ranks, actor, packing),
    )


# ----------------------------------------------------------------------------- measuring
DRIFT_KEYS = ("loss_mask", "versions", "logprobs", "prox_logp")
"""What :func:`policy_drift` reads of a trajectory after ``compute_logp``."""


def policy_drift(batch: list[dict[str, torch.Tensor]], version: int) -> dict[str, float]:
    """How far the policy about to be updated (``version``, whose logprobs are ``prox_logp``) has
    moved from the older policies that sampled the batch's stale tokens (``versions <
    version``), in nats per token.

    A gradient on k-version-old samples is a delayed correction: when one update moves these
    tokens far, the next ones overshoot on it (lower ``actor.optimizer.lr`` then). On-policy
    tokens are left out: their logprobs are the ones being updated.

    Returns:
        ``staleness/behave_kl``: the mean over stale tokens of ``logprobs - prox_logp`` (an
        estimate of KL(behaviour || proximal), since the tokens were sampled by the behaviour
        policy); ``staleness/max_log_ratio``: the largest ``|prox_logp - logprobs|``; both 0
        when no token is stale. Empty when the batch has no ``prox_logp`` (the loss needs no
        proximal policy).

    ``prox_logp`` comes from ``compute_logp``, already shifted (position ``i`` scores token
    ``i + 1``); the rollout's ``logprobs``, ``versions`` and ``loss_mask`` are shifted here.

    >>> traj = {"loss_mask": torch.tensor([[0, 1, 1]]), "versions": torch.tensor([[-1, 3, 4]]),
    ...         "logprobs": torch.tensor([[0.0, -1.0, -2.0]]),
    ...         "prox_logp": torch.tensor([[-1.5, -2.0, 0.0]])}
    >>> policy_drift([traj], 4)
    {'staleness/behave_kl': 0.5, 'staleness/max_log_ratio': 0.5}
    """
    if not batch or any("prox_logp" not in traj for traj in batch):
        return {}
    shift = functools.partial(torch.roll, shifts=-1, dims=-1)
    diffs = []
    for traj in batch:
        stale = shift(traj["loss_mask"]).bool() & (shift(traj["versions"]) >= 0)
        stale &= shift(traj["versions"]) < version
        diffs.append((shift(traj["logprobs"]).float() - traj["prox_logp"].float())[stale])
    d = torch.cat(diffs)
    if d.numel() == 0:
        return {"staleness/behave_kl": 0.0, "staleness/max_log_ratio": 0.0}
    return {
        "staleness/behave_kl": float(d.mean()),
        "staleness/max_log_ratio": float(d.abs().max()),
    }


def staleness(batch: list[dict[str, torch.Tensor]], version: int) -> dict[str, float]:
    """How many weight versions behind ``version`` (the trainer's, about to update) the batch's
    generated tokens were sampled.

    Returns:
        ``staleness_max``: ``version`` minus the oldest version of any generated token (0 for an
        on-policy step); ``staleness_mean``: the mean over the batch's sequences of ``version``
        minus the sequence's oldest version.

    >>> traj = {"versions": torch.tensor([[-1, 3, 4], [-1, 4, 4]]),
    ...         "loss_mask": torch.tensor([[0, 1, 1], [0, 1, 1]])}
    >>> staleness([traj], 4)
    {'staleness_max': 1, 'staleness_mean': 0.5}
    """
    heads = []
    for traj in batch:
        generated = traj["loss_mask"].bool() & (traj["versions"] >= 0)
        for row, mask in zip(traj["versions"], generated, strict=True):
            if mask.any():
                heads.append(int(row[mask].min()))
    if not heads:
        return {"staleness_max": 0, "staleness_mean": 0.0}
    behind = [version - h for h in heads]
    return {"staleness_max": max(behind), "staleness_mean": sum(behind) / len(behind)}
