"""Dynamic sampling (DAPO, Yu et al. 2025, arXiv:2503.14476, §3.2): train only on groups whose
rewards differ, and top the batch up with more items.

A GRPO group whose rewards are all equal has advantage 0 on every token (group-normalised
advantages are ``(r - mean) / std`` of the group), so it moves nothing; under token-level loss
aggregation it still counts in the denominator and shrinks the step of the groups that teach. On
the tiny counting task 50–94 % of groups were all-equal. AReaL 1.0.4's on-policy
``rollout_batch`` has no filter (only the asynchronous ``prepare_batch`` takes
``should_accept_fn``), so :func:`rollout_with_spread` wraps any rollout callable: it rolls out the
step's items, keeps the groups with reward spread, and rolls out further items until
``batch_size`` groups are kept or ``max_rounds`` rollouts were made;
:func:`rollout_step_with_spread` is the same around ``vlrollout train``'s
:func:`~vlrollout.train.batch.rollout_step`. When the rounds run out first the step trains on
fewer groups; :func:`scale_short_batch` can make its update proportionally smaller.

A group is one element of the rollout's list (AReaL's ``rollout_batch`` returns one trajectory
dict per item, its tensors ``[group_size, ...]``); its rewards are ``group["rewards"]`` flattened.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vlrollout.ledger import NothingAccepted
from vlrollout.train.batch import rollout_step

Group = dict[str, Any]
Rollout = Callable[[list[dict[str, Any]]], tuple[list[Group], dict[str, Any]]]
"""``items -> (groups, outcome)``: ``rollout_step``'s shape (the outcome is the ledger's record
of the episodes, :meth:`~vlrollout.ledger.EpisodeLedger.since`)."""


def reward_spread(group: Group) -> float:
    """Max minus min of the group's rewards (0.0 for a group of one reward).

    >>> import torch
    >>> reward_spread({"rewards": torch.tensor([[0.5], [1.0], [0.5]])})
    0.5
    """
    values = [float(v) for v in group["rewards"].flatten()]
    if not values:
        raise ValueError("a group without rewards: group['rewards'] is empty")
    return max(values) - min(values)


@dataclass
class SpreadBatch:
    """What :func:`rollout_with_spread` rolled out and kept.

    Attributes:
        groups: The groups to train on, in rollout order: at most ``batch_size`` groups with
            reward spread; when none had spread (``kept == 0``), the first round's groups, whose
            advantages are all 0, so the step changes nothing but runs as any other.
        kept: Groups with reward spread in ``groups`` (``len(groups)`` unless 0).
        dropped: Groups rolled out whose rewards were all equal (not trained on).
        surplus: Groups with spread rolled out beyond ``batch_size`` (not trained on).
        rounds: Rollouts made (1 when the step's own items were enough).
        items: Items rolled out in all rounds (one group each, fewer if all episodes of an item
            were rejected).
        outcome: The rounds' ledger outcomes summed: ``submitted``, ``accepted``, ``rejected``,
            ``rejected_by_reason`` and the ``rejections`` records.
        reward_mean_all: Mean reward of every episode rolled out in all rounds, before the
            filter: the policy's sampled reward, comparable with a run without dynamic sampling
            (the kept groups' mean is biased toward 0.5 for a 0/1 reward by construction).
    """

    groups: list[Group]
    kept: int
    dropped: int
    surplus: int
    rounds: int
    items: int
    outcome: dict[str, Any] = field(default_factory=dict)
    reward_mean_all: float = 0.0

    def metrics(self) -> dict[str, float]:
        """``metrics.jsonl`` scalars: ``dynamic/kept``, ``dropped``, ``surplus``, ``rounds``,
        ``items``, ``dropped_frac`` (dropped over groups judged) and ``reward_mean_all``."""
        judged = self.kept + self.dropped + self.surplus
        return {
            "dynamic/kept": self.kept,
            "dynamic/dropped": self.dropped,
            "dynamic/surplus": self.surplus,
            "dynamic/rounds": self.rounds,
            "dynamic/items": self.items,
            "dynamic/dropped_frac": self.dropped / judged if judged else 0.0,
            "dynamic/reward_mean_all": self.reward_mean_all,
        }


def sampled_reward(record: dict[str, Any]) -> float:
    """The policy's sampled reward at a step of ``metrics.jsonl``: the mean over every episode
    rolled out (``dynamic/reward_mean_all``) under dynamic sampling, whose ``reward_mean`` is the
    trained groups' (biased toward the middle of the reward's range by the filter); otherwise
    ``reward_mean``.

    >>> sampled_reward({"reward_mean": 0.5, "dynamic/reward_mean_all": 0.8})
    0.8
    >>> sampled_reward({"reward_mean": 0.5})
    0.5
    """
    return float(record.get("dynamic/reward_mean_all", record["reward_mean"]))


def merge_outcomes(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum ledger outcomes of several rollouts into one of the same shape.

    >>> merge_outcomes([{"submitted": 2, "accepted": 1, "rejected": 1,
    ...                  "rejected_by_reason": {"no_box": 1}, "rejections": ["a"]},
    ...                 {"submitted": 1, "accepted": 1, "rejected": 0,
    ...                  "rejected_by_reason": {}, "rejections": []}])["submitted"]
    3
    """
    by_reason: Counter[str] = Counter()
    out: dict[str, Any] = {"submitted": 0, "accepted": 0, "rejected": 0, "rejections": []}
    for o in outcomes:
        for key in ("submitted", "accepted", "rejected"):
            out[key] += int(o.get(key, 0))
        by_reason.update(o.get("rejected_by_reason", {}))
        out["rejections"].extend(o.get("rejections", []))
    out["rejected_by_reason"] = dict(by_reason)
    return out


def top_up_items(
    items: list[dict[str, Any]], seed: int, step: int
) -> Callable[[int], list[dict[str, Any]]]:
    """``more_items`` for step ``step``: ``n -> n`` items drawn from ``items`` without repeats
    (until all were drawn, then a fresh order), in an order fixed by ``(seed, step)``, so a
    resumed run tops a step up with the same items.

    >>> more = top_up_items(list(range(5)), seed=1, step=3)
    >>> a, b = more(3), more(2)
    >>> sorted(a + b)
    [0, 1, 2, 3, 4]
    >>> more2 = top_up_items(list(range(5)), seed=1, step=3)
    >>> more2(3) == a
    True
    """
    if not items:
        raise ValueError("top_up_items needs at least one item to draw from")
    rng = random.Random(f"{seed}:{step}:top-up")
    order: list[int] = []

    def more(n: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            if not order:
                order.extend(rng.sample(range(len(items)), len(items)))
            out.append(items[order.pop()])
        return out

    return more


def in_content_order(groups: list[Group]) -> list[Group]:
    """``groups`` sorted by their token ids (shape, then bytes), unchanged without ``input_ids``.

    AReaL's ``rollout_batch`` returns groups in the order they finish, which varies from run to
    run even when every episode is the same (deterministic engine); the groups a round keeps and
    the surplus it leaves out must not depend on it, or a rerun trains on other groups.

    >>> import torch
    >>> a, b = {"input_ids": torch.tensor([[2, 1]])}, {"input_ids": torch.tensor([[1, 2]])}
    >>> in_content_order([a, b]) == in_content_order([b, a])
    True
    """
    if not all("input_ids" in g for g in groups):
        return groups

    def key(group: Group) -> tuple[tuple[int, ...], bytes]:
        ids = group["input_ids"].detach().cpu().contiguous()
        return tuple(ids.shape), ids.numpy().tobytes()

    return sorted(groups, key=key)


def rollout_with_spread(
    rollout: Rollout,
    items: list[dict[str, Any]],
    more_items: Callable[[int], list[dict[str, Any]]],
    batch_size: int,
    max_rounds: int,
    min_spread: float = 0.0,
) -> SpreadBatch:
    """Roll out ``items``, keep the groups whose reward spread exceeds ``min_spread``, and roll
    out ``more_items(n)`` until ``batch_size`` groups are kept or ``max_rounds`` rollouts were
    made.

    Each round's groups are judged in :func:`in_content_order`. Each further round asks for the
    missing number of groups divided by the share kept so far (all rounds together), at most
    ``batch_size`` items, at least the number missing; the kept groups beyond ``batch_size`` are
    counted as ``surplus`` and left out, so a step never trains on more groups than configured.
    The batch is short when ``max_rounds`` runs out first. A further round whose every episode is
    rejected adds no group (its rejections are counted); only a first round with none raises.

    Args:
        rollout: ``items -> (groups, outcome)``, e.g. ``rollout_step`` bound to the actor and
            workflow.
        items: The step's items (``batch_size`` of them, normally).
        more_items: ``n -> n`` further items, a different draw at each call.
        batch_size: Groups wanted.
        max_rounds: Rollouts at most, the first included (1: filter only, no top-up).
        min_spread: A group is kept when ``max - min`` of its rewards is above this.

    Returns:
        A :class:`SpreadBatch`.

    Raises:
        ValueError: ``batch_size`` or ``max_rounds`` below 1, or ``min_spread`` negative.

    >>> import torch
    >>> def rollout(its):
    ...     return [{"rewards": torch.tensor(r)} for r in its], {"submitted": len(its)}
    >>> pool = iter([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    >>> out = rollout_with_spread(rollout, [[1.0, 1.0], [0.0, 1.0]],
    ...                           lambda n: [next(pool) for _ in range(n)], 2, 3)
    >>> (out.kept, out.dropped, out.rounds, out.items)
    (2, 2, 2, 4)
    """
    _check_spread_arguments(batch_size, max_rounds, min_spread)
    kept: list[Group] = []
    first: list[Group] = []
    outcomes: list[dict[str, Any]] = []
    dropped = surplus = rounds = n_items = judged = 0
    reward_sum, episodes = 0.0, 0
    todo = items
    while True:
        groups, outcome = _rollout_round(rollout, todo, first_round=rounds == 0)
        rounds += 1
        n_items += len(todo)
        outcomes.append(outcome)
        if rounds == 1:
            first = groups
        judged += len(groups)
        reward_sum += sum(float(g["rewards"].sum()) for g in groups)
        episodes += sum(g["rewards"].numel() for g in groups)
        left_out = _keep_with_spread(groups, kept, batch_size, min_spread)
        dropped, surplus = dropped + left_out[0], surplus + left_out[1]
        missing = batch_size - len(kept)
        if missing == 0 or rounds >= max_rounds:
            break
        share = len(kept) / judged if judged and kept else 1.0 / batch_size
        todo = more_items(min(batch_size, max(missing, math.ceil(missing / share))))
    return SpreadBatch(
        groups=kept or first,
        kept=len(kept),
        dropped=dropped,
        surplus=surplus,
        rounds=rounds,
        items=n_items,
        outcome=merge_outcomes(outcomes),
        reward_mean_all=reward_sum / episodes if episodes else 0.0,
    )


def _rollout_round(
    rollout: Rollout, items: list[dict[str, Any]], first_round: bool
) -> tuple[list[Group], dict[str, Any]]:
    """One round's groups, in :func:`in_content_order`, and its outcome. A further round whose
    every episode is rejected gives no group (the step keeps those it has); a first one raises."""
    try:
        groups, outcome = rollout(items)
    except NothingAccepted as e:
        if first_round or e.outcome is None:
            raise
        return [], dict(e.outcome)
    return in_content_order(groups), outcome


def _check_spread_arguments(batch_size: int, max_rounds: int, min_spread: float) -> None:
    if batch_size < 1 or max_rounds < 1:
        raise ValueError(
            f"batch_size and max_rounds must be >= 1, got {batch_size} and {max_rounds}"
        )
    if min_spread < 0:
        raise ValueError(f"min_spread must be >= 0, got {min_spread}")


def _keep_with_spread(
    groups: list[Group], kept: list[Group], batch_size: int, min_spread: float
) -> tuple[int, int]:
    """Append to ``kept`` the groups whose spread exceeds ``min_spread`` while it holds fewer
    than ``batch_size``; returns ``(dropped, surplus)``: the groups left out without spread and
    with it."""
    dropped = surplus = 0
    for group in groups:
        if reward_spread(group) <= min_spread:
            dropped += 1
        elif len(kept) < batch_size:
            kept.append(group)
        else:
            surplus += 1
    return dropped, surplus


def scale_short_batch(
    trajectories: list[Group], kept: int, batch_size: int
) -> tuple[list[Group], float]:
    """``(trajectories, scale)``: ``trajectories`` (``compute_advantages``' output) with their
    ``advantages`` multiplied by ``scale = kept / batch_size`` when a step kept fewer groups with
    spread than it wanted (``0 < kept < batch_size``); otherwise unchanged, scale 1.0. The given
    dicts are not changed.

    AReaL's PPO loss is a token mean over the step's batch, so a step that kept a few groups would
    move the weights as far as a full one, on a few items' evidence. With ``kept / batch_size``
    each kept group weighs as it would in a full batch (what the all-equal groups left out would
    have contributed is 0): late in training, when most groups are all right and few are kept,
    the steps get small instead of noisy. The PPO objective is linear in the advantage (the clip
    is on the ratio), so the scale is the loss's; a KL or entropy term would not be scaled.

    >>> import torch
    >>> out, scale = scale_short_batch([{"advantages": torch.tensor([[1.0, -2.0]])}], 1, 4)
    >>> (out[0]["advantages"].tolist(), scale)
    ([[0.25, -0.5]], 0.25)
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not 0 < kept < batch_size:
        return trajectories, 1.0
    scale = kept / batch_size
    return [{**traj, "advantages": traj["advantages"] * scale} for traj in trajectories], scale


def admit_top_up_rounds(rollout: Any, batch_size: int, max_rounds: int) -> None:
    """Let AReaL's engine roll out a step's top-up rounds: raise ``rollout.consumer_batch_size``
    (in place, before the engine is built from ``rollout``) to ``batch_size * max_rounds``, the
    most items a step can roll out.

    AReaL's ``StalenessManager`` admits at most ``(max_head_offpolicyness + version + 1) *
    rollout.consumer_batch_size`` items by weight version ``version``; with the configured
    ``consumer_batch_size`` (one step's items) a second round in the same step would wait forever
    for a version that comes only after the step. (Where dynamic sampling cannot run at all,
    asynchronously or in several processes, :func:`~vlrollout.train.config.check_rules` refuses
    the config.)

    >>> from types import SimpleNamespace
    >>> rollout = SimpleNamespace(consumer_batch_size=16)
    >>> admit_top_up_rounds(rollout, batch_size=16, max_rounds=3)
    >>> rollout.consumer_batch_size
    48
    """
    rollout.consumer_batch_size = max(rollout.consumer_batch_size, batch_size * max_rounds)


def rollout_step_with_spread(
    actor: Any,
    workflow: Any,
    data: list[dict[str, Any]],
    train_items: list[dict[str, Any]],
    *,
    group_size: int,
    seed: int,
    step: int,
    max_rounds: int,
) -> tuple[list[Group], dict[str, Any], dict[str, float]]:
    """:func:`~vlrollout.train.batch.rollout_step` with dynamic sampling: ``(groups, outcome,
    metrics)``, the groups to train on, the ledger outcome of every round's episodes and
    :meth:`SpreadBatch.metrics`. ``len(data)`` groups are wanted; further items come from
    :func:`top_up_items` over ``train_items`` for ``(seed, step)``; ``step`` is the 0-based
    index of the step (``metrics.jsonl`` records ``step + 1``).

    Raises:
        NothingAccepted: a round had no accepted episode (as ``rollout_step``).
    """
    spread = rollout_with_spread(
        lambda items: rollout_step(actor, workflow, items, group_size, step + 1),
        data,
        top_up_items(train_items, seed, step),
        batch_size=len(data),
        max_rounds=max_rounds,
    )
    return spread.groups, spread.outcome, spread.metrics()
