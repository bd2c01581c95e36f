"""The numbers ``metrics.jsonl`` records of each training step, task-independent.

Computed from the step's trajectories (AReaL's rollout batch: one dict per GRPO group,
``rewards`` of shape ``[n]``, ``input_ids``/``loss_mask`` of shape ``[n, L]``), the advantages
``compute_advantages`` returned, and AReaL's own exported statistics (:func:`pick`). Beside the
sampled reward's mean and spread over the batch, ``diag/`` numbers say why a GRPO step did or did
not move the policy: how far rewards spread *within* each group (group normalisation turns any
nonzero spread, however small, into unit-scale advantages) and how many generated tokens carry a
nonzero advantage at all.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import torch

ADV_EPS = 1e-6
"""An advantage of at most this magnitude counts as zero (group normalisation divides by
``std + eps``: an all-equal group's advantages are exactly 0, others are of order 1)."""

AREAL_STATS = ("approx_kl", "entropy", "clip_ratio", "grad_norm", "actor_loss", "lr")
"""AReaL's update statistics copied into each step's record (``approx_kl`` as ``ppo_approx_kl``:
PPO's approximate KL of the updated policy from the one that sampled, the size of the step, not a
KL to a reference model)."""


def rollout_stats(batch: list[dict[str, torch.Tensor]], rollout_s: float) -> dict[str, float]:
    """Reward mean/std, fraction of groups whose rewards are all equal, generated tokens/s."""
    rewards = [float(r) for g in batch for r in g["rewards"].flatten()]
    equal = [bool((g["rewards"] == g["rewards"].flatten()[0]).all()) for g in batch]
    tokens = sum(int(g["loss_mask"].sum()) for g in batch)
    return {
        "reward_mean": statistics.fmean(rewards),
        "reward_std": statistics.pstdev(rewards),
        "frac_all_equal_groups": sum(equal) / len(equal),
        "n_trajectories": len(rewards),
        "gen_tokens": tokens,
        "tokens_per_s": tokens / rollout_s if rollout_s > 0 else 0.0,
    }


def pick(stats: dict[str, float], name: str) -> float | None:
    """The AReaL stat ending in ``name`` or ``name/avg`` (its scope prefixes vary).

    >>> pick({"ppo_actor/update/clip_ratio/avg": 0.1}, "clip_ratio")
    0.1
    """
    for key in sorted(stats):
        if key.endswith(f"/{name}/avg") or key.endswith(f"/{name}") or key == name:
            return stats[key]
    return None


def update_stats(areal_stats: dict[str, float]) -> dict[str, float | None]:
    """:data:`AREAL_STATS` picked from AReaL's ``export_stats()``, ``None`` where absent."""
    renamed = {"approx_kl": "ppo_approx_kl"}
    return {renamed.get(name, name): pick(areal_stats, name) for name in AREAL_STATS}


def group_spread(batch: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean within-group reward standard deviation and mean within-group range.

    >>> g = [{"rewards": torch.tensor([0.0, 1.0])}, {"rewards": torch.tensor([0.5, 0.5])}]
    >>> group_spread(g)
    {'group_reward_std': 0.25, 'group_reward_range': 0.5}
    """
    stds, ranges = [], []
    for group in batch:
        r = [float(v) for v in group["rewards"].flatten()]
        stds.append(statistics.pstdev(r))
        ranges.append(max(r) - min(r))
    return {
        "group_reward_std": statistics.fmean(stds),
        "group_reward_range": statistics.fmean(ranges),
    }


def nonzero_advantage_fraction(adv_batch: Sequence[Mapping[str, Any]]) -> float:
    """Fraction of trained tokens (``loss_mask``) whose advantage is not zero: the share of the
    batch that moves the policy at all.

    >>> nonzero_advantage_fraction([{"loss_mask": torch.tensor([[0, 1, 1]]),
    ...                              "advantages": torch.tensor([[9.0, 0.0, 0.5]])}])
    0.5
    """
    hit = total = 0
    for traj in adv_batch:
        mask = traj["loss_mask"].bool()
        hit += int(((traj["advantages"].abs() > ADV_EPS) & mask).sum())
        total += int(mask.sum())
    return hit / total if total else 0.0


def diagnostics(
    batch: Sequence[Mapping[str, Any]], adv_batch: Sequence[Mapping[str, Any]]
) -> dict[str, float]:
    """The step's ``diag/`` numbers: :func:`group_spread` of the rollout batch and the
    :func:`nonzero_advantage_fraction` of ``compute_advantages``' output for it."""
    out = {**group_spread(batch), "frac_tokens_nonzero_adv": nonzero_advantage_fraction(adv_batch)}
    return {f"diag/{k}": v for k, v in out.items()}
