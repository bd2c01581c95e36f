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

from collections.abc import Mapping
from typing import Any

from vlrollout.ledger import NothingAccepted


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
    )


def compute_advantages(actor: Any, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``actor.compute_advantages(batch)``, each trajectory keeping its own images (module
    docstring); ``batch`` itself is not changed.

    Raises:
        ValueError: AReaL returned another number of trajectories than it was given.
    """
    bare = [{k: v for k, v in traj.items() if k != "multi_modal_input"} for traj in batch]
    adv = actor.compute_advantages(bare)
    if len(adv) != len(batch):
        raise ValueError(
            f"compute_advantages returned {len(adv)} trajectories for {len(batch)}; cannot "
            "match their images"
        )
    for out, traj in zip(adv, batch, strict=True):
        if "multi_modal_input" in traj:
            out["multi_modal_input"] = traj["multi_modal_input"]
    return adv
