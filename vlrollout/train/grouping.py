"""Whole GRPO groups in each of the trainer's micro-batches.

AReaL packs a step's sequences into micro-batches by length alone, so the n samples of a group,
which share their prompt's image, land in different micro-batches and each micro-batch encodes
its own copy of the image. AReaL's ``mb_spec.granularity`` keeps every run of ``granularity``
consecutive sequences in one micro-batch; with it set to the group size each micro-batch holds
whole groups, and :mod:`vlrollout.image_sharing` encodes each group's image once.

:func:`whole_groups` sets it for one call (an update, a logprob pass) when that is safe:
every group of the batch has the same number of sequences (a rejected episode shortens its
group), the update is one mini-batch (AReaL splits mini-batches by length, not by group), the
model can be packed (one sequence per micro-batch otherwise, :mod:`vlrollout.train.packing`),
and each group fits in one micro-batch. Otherwise AReaL's own packing is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from areal.api.cli_args import MicroBatchSpec

from vlrollout.train.packing import linear_attention_layers


def group_granularity(
    groups: Sequence[dict[str, Any]], max_tokens_per_mb: int | None, n_minibatches: int
) -> int:
    """The ``mb_spec.granularity`` that keeps these groups whole, or 1 where none can.

    Args:
        groups: The step's groups, each a padded tensor dict with one row per sequence (what
            ``rollout_batch`` returns).
        max_tokens_per_mb: The micro-batch capacity (``actor.mb_spec.max_tokens_per_mb``).
        n_minibatches: ``actor.ppo_n_minibatches``.

    >>> import torch
    >>> g = {"attention_mask": torch.ones(4, 10)}
    >>> group_granularity([g, g], 64, 1), group_granularity([g, g], 32, 1)
    (4, 1)
    >>> group_granularity([g, {"attention_mask": torch.ones(3, 10)}], 64, 1)
    1
    """
    sizes = {int(g["attention_mask"].shape[0]) for g in groups}
    if len(sizes) != 1 or n_minibatches != 1:
        return 1
    size = sizes.pop()
    capacity = max_tokens_per_mb or 0
    if size < 2 or any(int(g["attention_mask"].sum()) > capacity for g in groups):
        return 1
    return size


@contextmanager
def whole_groups(
    actor: Any, groups: Sequence[dict[str, Any]], enabled: bool = True
) -> Iterator[int]:
    """Within the block, ``actor``'s micro-batches hold whole groups where that is safe (module
    docstring); yields the granularity used (1: AReaL's own packing)."""
    spec = actor.config.mb_spec
    granularity = 1
    if enabled and spec.granularity == 1 and not linear_attention_layers(actor.model_config):
        granularity = group_granularity(
            groups, spec.max_tokens_per_mb, actor.config.ppo_n_minibatches
        )
    if granularity == 1:
        yield 1
        return
    actor.config.mb_spec = MicroBatchSpec.new(spec, granularity=granularity)
    try:
        yield granularity
    finally:
        actor.config.mb_spec = spec
