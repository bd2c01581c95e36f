"""One GRPO step of ``vlrollout train``, in the order of AReaL's ``PPOTrainer.train``.

The batch (:func:`next_batch`) → ``compute_logp`` (only when the config asks for a proximal
policy) → ``compute_advantages`` → ``ppo_update`` + ``step_lr_scheduler`` → ``update_weights``
(disk; the engine waits for the trainer's name_resolve key) → ``set_version`` on both sides.
Nothing of the algorithm is ours; :func:`train_step` times each part and returns the step's
``metrics.jsonl`` record, whose numbers describe the whole batch over every process.
"""

from __future__ import annotations

import random
import time
from typing import Any

from vlrollout.logs import get_logger
from vlrollout.process_memory import resident_bytes
from vlrollout.train import device, dynamic_sampling, grouping
from vlrollout.train.asynchronous import DRIFT_KEYS, policy_drift, staleness, weight_versions
from vlrollout.train.batch import compute_advantages, rollout_step
from vlrollout.train.data import batch_items
from vlrollout.train.ranks import ADVANTAGE_KEYS, stats_view
from vlrollout.train.rollout_engine import sync_weights
from vlrollout.train.session import Session
from vlrollout.train.stats import diagnostics, rollout_stats, update_stats

RSS = "memory/rss"
"""The ``metrics.jsonl`` key of the trainer's resident memory in bytes at a step's end (the
largest over the ranks): flat over a long run once warmed up, rising if something leaks."""

logger = get_logger(__name__)

Batch = list[dict[str, Any]]


def train_step(s: Session, step: int) -> dict[str, Any]:
    """Train step ``step + 1`` (``step`` steps are done) and return its record.

    Raises:
        NothingAccepted: No episode of the step's items was accepted.
    """
    ranks = s.ranks
    device.reset_peak()
    t0 = time.perf_counter()
    batch, outcome, dynamic = next_batch(s, step)
    arrived = time.perf_counter()
    t_rollout = arrived - t0  # the trainer's wait
    # Asynchronous: the batch was generated over the whole time since the previous one.
    t_generated = t_rollout if s.rollouts is None else arrived - (s.last_batch_at or t0)
    s.last_batch_at = arrived
    # Each rank holds its share of the redistributed batch; the metrics describe all.
    whole = ranks.gather(stats_view(batch))
    stale = checked_staleness(s, whole, step + 1)

    t = time.perf_counter()
    recompute_logp(s, batch)
    device.settle()
    t_logp = time.perf_counter() - t
    drift = drift_stats(s, batch)

    t = time.perf_counter()
    adv = update(s, batch, dynamic)
    device.settle()
    t_update = time.perf_counter() - t

    t = time.perf_counter()
    sync_weights(s.actor, s.engine, s.meta, ranks, s.local, step + 1)
    device.settle()
    t_sync = time.perf_counter() - t

    areal_stats = s.actor.export_stats()  # reduced over the ranks by AReaL
    record = {
        "step": step + 1,
        **rollout_stats(whole, t_generated),
        "rejected": ranks.total({"rejected": outcome["rejected"]})["rejected"],
        **ranks.by_reason(outcome.get("rejected_by_reason", {}), "rejected"),
        **dynamic,
        **stale,
        **drift,
        **update_stats(areal_stats),
        "time/rollout": t_rollout,
        "time/logp": t_logp,
        "time/update": t_update,
        "time/weight_sync": t_sync,
        "time/step": time.perf_counter() - t0,
        **device.peak(),
        RSS: max(ranks.gather([resident_bytes()])),
        **diagnostics(whole, ranks.gather(stats_view(adv, ADVANTAGE_KEYS))),
        "areal": areal_stats,
    }
    if s.setup_s is not None:  # this run's first step: the set-up it did not pay (session start)
        record["time/setup"], s.setup_s = s.setup_s, None
    if ranks.world > 1:
        record["world_size"] = ranks.world
    return record


def next_batch(s: Session, step: int) -> tuple[Batch, dict[str, Any], dict[str, float]]:
    """``(batch, outcome, dynamic)``: this rank's groups of the step, the ledger's record of
    their episodes, and dynamic sampling's ``dynamic/`` counts (empty when it is off).

    On-policy the step's items (:func:`~vlrollout.train.data.batch_items`, this rank's share)
    are rolled out now, with ``vlrollout.dynamic_sampling`` topped up until enough groups have
    reward spread; asynchronously the batch comes from
    :meth:`~vlrollout.train.asynchronous.AsyncRollouts.next_batch`, submitted k steps ahead.
    """
    cfg = s.cfg
    # AReaL shuffles a step's groups with Python's global random, which other code draws from
    # too, as often as the moment dictates (AReaL picks free ports with it): seeded per step,
    # the order, and so a resumed run's float sums, depend on the seed and the step alone.
    random.seed(f"{cfg.seed}:{step}:batch-order")
    if s.rollouts is not None:
        batch, outcome = s.rollouts.next_batch(step + 1)
        return batch, outcome, {}
    items = batch_items(s.train_items, step, cfg.train_dataset.batch_size, cfg.seed)
    data = s.ranks.share(items)
    group_size = cfg.gconfig.n_samples
    if not cfg.vlrollout.dynamic_sampling:
        batch, outcome = rollout_step(s.source, s.workflow, data, group_size, step + 1)
        return batch, outcome, {}
    return dynamic_sampling.rollout_step_with_spread(
        s.actor,
        s.workflow,
        data,
        s.train_items,
        group_size=group_size,
        seed=cfg.seed,
        step=step,
        max_rounds=cfg.vlrollout.dynamic_sampling_rounds,
    )


def checked_staleness(s: Session, whole: Batch, step: int) -> dict[str, float]:
    """:func:`~vlrollout.train.asynchronous.staleness` of the whole batch, with a warning when a
    token is older than ``rollout.max_head_offpolicyness`` allows (AReaL bounds when episodes
    start, and later ones can finish first)."""
    offpolicy = s.cfg.rollout.max_head_offpolicyness
    stale = staleness(whole, s.actor.get_version())
    if stale["staleness_max"] > offpolicy:
        logger.warning(
            "step %d trains tokens %s old (max_head_offpolicyness=%d): "
            "AReaL bounds when episodes start, and later ones finished first",
            step,
            weight_versions(int(stale["staleness_max"])),
            offpolicy,
        )
    return stale


def drift_stats(s: Session, batch: Batch) -> dict[str, float]:
    """:func:`~vlrollout.train.asynchronous.policy_drift` of the whole batch on an asynchronous
    run whose loss has a proximal policy (nothing otherwise). The condition is the config's, the
    same on every rank, since the gather is collective."""
    if s.rollouts is None or not s.cfg.actor.should_compute_prox_logp():
        return {}
    return policy_drift(s.ranks.gather(stats_view(batch, DRIFT_KEYS)), s.actor.get_version())


def recompute_logp(s: Session, batch: Batch) -> None:
    """The proximal policy's logprobs into each trajectory (``prox_logp``), when the config's
    loss needs them (``actor.should_compute_prox_logp``)."""
    if not s.cfg.actor.should_compute_prox_logp():
        return
    with grouping.whole_groups(s.actor, batch, s.cfg.vlrollout.encode_images_once):
        logps = s.actor.compute_logp(batch)
    for traj, lp in zip(batch, logps, strict=True):
        traj["prox_logp"] = lp


def update(s: Session, batch: Batch, dynamic: dict[str, float]) -> Batch:
    """Advantages, the PPO update and the learning-rate step; returns the advantages.

    With ``vlrollout.dynamic_sampling`` and ``dynamic_sampling_scale`` a short batch's
    advantages are scaled by its share of groups kept, recorded as ``dynamic/scale``.
    """
    vl = s.cfg.vlrollout
    adv = compute_advantages(s.actor, batch)
    if vl.dynamic_sampling and vl.dynamic_sampling_scale:
        kept, batch_size = int(dynamic["dynamic/kept"]), s.cfg.train_dataset.batch_size
        adv, dynamic["dynamic/scale"] = dynamic_sampling.scale_short_batch(adv, kept, batch_size)
    with grouping.whole_groups(s.actor, batch, vl.encode_images_once):
        s.actor.ppo_update(adv)
    s.actor.step_lr_scheduler()
    return adv
