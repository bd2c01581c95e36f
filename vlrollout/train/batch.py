"""Per-trajectory bookkeeping around AReaL's rollout and ``compute_advantages``.

:func:`rollout_step` runs a step's rollouts and stops the run when no episode of the step was
accepted. AReaL 1.0.4 has no message of its own for that: ``FSDPPPOActor.rollout_batch`` hands the
empty batch to its data-parallel redistribution (``redistribute_trajectories``), which fails with
``Number of values 0 is smaller than min_groups 1`` and says nothing of the rejections that
emptied it.

AReaL 1.0's ``PPOActor.compute_advantages`` concatenates the trajectories with ``concat_batch``
and splits the result back with ``split_batch`` (``areal.utils.data``), which deep-copies every
non-tensor entry whole into every returned dict: the whole batch's ``multi_modal_input`` list once
per trajectory (n copies of every image: on a VLM batch that copying is most of the call), and
per-trajectory readers would see the first trajectory's images. :func:`compute_advantages` holds
the images back from the call (advantages do not read them) and gives each trajectory its own
list, so ``ppo_update`` concatenates exactly what ``compute_logp`` saw.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from vlrollout.ledger import NothingAccepted
from vlrollout.logs import get_logger

logger = get_logger(__name__)


def rollout_step(
    actor: Any, workflow: Any, data: list[dict[str, Any]], group_size: int, step: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``actor.rollout_batch`` for one training step, stopped when nothing was accepted.

    Args:
        actor: AReaL's actor (anything with ``rollout_batch(data, workflow=, group_size=)``).
        workflow: A vlrollout workflow; its ``ledger`` records every episode's fate.
        data: The step's items.
        group_size: Episodes per item (``gconfig.n_samples``).
        step: The step's number as ``metrics.jsonl`` records it (the first step is 1).

    Returns:
        ``(batch, outcome)``: the trajectories, and the ledger's record of the step's episodes
        (:meth:`~vlrollout.ledger.EpisodeLedger.since`: ``accepted``, ``rejected``, ...).

    Raises:
        NothingAccepted: No episode of the step was accepted, whether ``rollout_batch`` returned
            an empty batch or failed on it (AReaL 1.0.4 does); the message has the step, the
            counts and the top rejection reasons with an example item each. Other errors of
            ``rollout_batch`` propagate unchanged.
    """
    mark = workflow.ledger.mark()
    submitted = len(data) * group_size
    try:
        batch = actor.rollout_batch(data, workflow=workflow, group_size=group_size)
    except Exception as e:
        outcome = workflow.ledger.since(mark)
        if outcome["accepted"] == 0 and outcome["rejected"] > 0:
            raise _nothing_accepted(step, submitted, outcome) from e
        raise
    outcome = workflow.ledger.since(mark)
    if not batch:
        raise _nothing_accepted(step, submitted, outcome)
    return batch, outcome


def _nothing_accepted(step: int, submitted: int, outcome: Mapping[str, Any]) -> NothingAccepted:
    return NothingAccepted(
        f"training step {step}",
        submitted,
        outcome["rejections"],
        rejected=outcome["rejected"],
        hint="each rejection is logged above as a warning (--debug adds its traceback)",
        outcome=outcome,
    )


def compute_advantages(actor: Any, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``actor.compute_advantages(batch)``, each trajectory keeping its own images (module
    docstring) and each group normalised over its own episodes; ``batch`` itself is not changed.

    ``batch`` holds one dict per group (``rollout_batch``'s shape). A rejected episode leaves its
    group short (AReaL's ``GroupedRolloutWorkflow`` keeps the accepted ones), and AReaL's group
    normalisation slices the concatenated batch into runs of ``group_size`` rows, so one short
    group would shift every later group and leave the last rows with a standard deviation of 0
    (advantages of 1e5). When the groups are not all of ``group_size`` rows:

    - normalisation at group level only (GRPO's default): each group in its own call with the
      normaliser's ``group_size`` set to its rows, which for a whole group is AReaL's own result
      and for a short one its statistics over the accepted episodes (as TRL scores them);
    - group and batch levels together: the whole groups in one call (AReaL's numbers over them)
      and the short groups with advantage 0, a warning naming how many.

    Raises:
        ValueError: AReaL returned another number of trajectories than it was given.
    """
    bare = [{k: v for k, v in traj.items() if k != "multi_modal_input"} for traj in batch]
    adv = _advantages_by_group(actor, bare)
    if len(adv) != len(batch):
        raise ValueError(
            f"compute_advantages returned {len(adv)} trajectories for {len(batch)}; cannot "
            "match their images"
        )
    for out, traj in zip(adv, batch, strict=True):
        if "multi_modal_input" in traj:
            out["multi_modal_input"] = traj["multi_modal_input"]
    return adv


def _normalisers(actor: Any) -> tuple[Any, list[Any]]:
    """``(ppo_actor, normalisers)``: AReaL's ``PPOActor`` (``FSDPPPOActor`` holds it as
    ``actor``) and those of its reward and advantage normalisers that are set."""
    inner = getattr(actor, "actor", actor)
    norms = (getattr(inner, "reward_norm", None), getattr(inner, "adv_norm", None))
    return inner, [n for n in norms if n]


@contextmanager
def _attributes(obj: Any, **values: Any) -> Iterator[None]:
    """``obj``'s attributes set to ``values`` for the block, restored after it."""
    saved = {k: getattr(obj, k) for k in values}
    for k, v in values.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(obj, k, v)


def _advantages_by_group(actor: Any, groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``actor.compute_advantages`` with each group normalised over its own rows (see
    :func:`compute_advantages`)."""
    inner, norms = _normalisers(actor)
    grouped = [n for n in norms if "group" in (n.mean_level, n.std_level)]
    rows = [int(g["rewards"].shape[0]) for g in groups]
    whole = [all(r == n.group_size for n in grouped) for r in rows]
    if all(whole):
        return actor.compute_advantages(list(groups))
    if not any("batch" in (n.mean_level, n.std_level) for n in norms):
        out: list[dict[str, Any]] = []
        for group, r in zip(groups, rows, strict=True):
            with ExitStack() as stack:
                for norm in grouped:
                    stack.enter_context(_attributes(norm, group_size=r))
                out.extend(actor.compute_advantages([group]))
        return out
    logger.warning(
        "%d of %d groups are short of group size %d (rejected episodes) and are trained with "
        "advantage 0: group- and batch-level normalisation together need whole groups",
        whole.count(False),
        len(groups),
        grouped[0].group_size,
    )
    kept = [g for g, w in zip(groups, whole, strict=True) if w]
    done = iter(actor.compute_advantages(kept) if kept else [])
    out = []
    for group, w in zip(groups, whole, strict=True):
        if w:
            out.append(next(done))
            continue
        with _attributes(inner, reward_norm=None, adv_norm=None):
            (short,) = actor.compute_advantages([group])
        short["advantages"] = torch.zeros_like(short["advantages"])
        out.append(short)
    return out
