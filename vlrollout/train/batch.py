"""Per-trajectory bookkeeping around AReaL's ``compute_advantages``.

AReaL 1.0.4's ``PPOActor.compute_advantages`` (``areal/trainer/ppo/actor.py:142``) concatenates
the trajectories with ``concat_batch`` and splits the result back with ``split_batch``
(``areal/utils/data.py:393``), which copies every non-tensor entry whole: each returned dict
holds the *whole batch's* ``multi_modal_input`` list (n× the image memory for n trajectories),
and per-trajectory readers would see the first trajectory's images. :func:`restore_multi_modal_inputs`
puts each trajectory's own list back, so ``ppo_update`` concatenates exactly what
``compute_logp`` saw.
"""

from __future__ import annotations

from typing import Any


def restore_multi_modal_inputs(
    adv_batch: list[dict[str, Any]], rollout_batch: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Give each trajectory of ``adv_batch`` back its own ``multi_modal_input`` (in place).

    Args:
        adv_batch: ``compute_advantages``' output, in the order of ``rollout_batch``.
        rollout_batch: Its input.

    Raises:
        ValueError: The two batches differ in length, or in which trajectories have images.
    """
    if len(adv_batch) != len(rollout_batch):
        raise ValueError(
            f"compute_advantages returned {len(adv_batch)} trajectories for "
            f"{len(rollout_batch)}; cannot match their images"
        )
    for i, (adv, orig) in enumerate(zip(adv_batch, rollout_batch, strict=True)):
        if ("multi_modal_input" in adv) != ("multi_modal_input" in orig):
            raise ValueError(f"trajectory {i}: multi_modal_input present on one side only")
        if "multi_modal_input" in orig:
            adv["multi_modal_input"] = orig["multi_modal_input"]
    return adv_batch
