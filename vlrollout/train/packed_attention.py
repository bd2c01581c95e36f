"""Attention over each packed sequence alone, for the trainer's packed rows without flash-attn.

AReaL packs a micro-batch's sequences into one row; the packing fix (:mod:`vlrollout.train.packing`)
keeps them apart with per-sequence positions, from which transformers builds a block-diagonal
causal mask. sdpa then attends over the whole row under that mask: a row of ``L`` tokens costs
``L**2`` per layer, although each sequence only needs its own square. On the CPU, with short
GRPO sequences packed into rows of hundreds of tokens, that is most of the update's attention time
(forward and backward).

:data:`IMPLEMENTATION` is a transformers attention implementation (``AttentionInterface``, with
sdpa's mask function) that reads the sequences' bounds off that mask and runs sdpa, causal, on
each sequence's own slice: the same attention, without the masked-out work. Any other call (a
decode step, a mask that is not block-diagonal causal, the vision tower's own calls) goes to sdpa
as before. :func:`install` switches one model to it (the trainer's copy; the engine's model keeps
sdpa).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from vlrollout.compat.transformers import attn_implementation

IMPLEMENTATION = "vlrollout_packed_sdpa"
"""The attention implementation's registered name."""


def causal_segments(mask: torch.Tensor) -> list[tuple[int, int]] | None:
    """``[(start, end), ...]`` when ``mask`` (``[L, L]`` bool, True = attend) is causal attention
    within consecutive segments and none across them; else ``None``.

    >>> m = torch.ones(5, 5, dtype=torch.bool).tril()
    >>> m[2:, :2] = False
    >>> causal_segments(m)
    [(0, 2), (2, 5)]
    >>> causal_segments(torch.ones(3, 3, dtype=torch.bool)) is None
    True
    """
    length = mask.shape[-1]
    if mask.dtype != torch.bool or mask.shape != (length, length):
        return None
    first = mask.int().argmax(-1)  # each row's first attended column: its segment's start
    starts = torch.nonzero(first == torch.arange(length, device=mask.device)).flatten()
    bounds = [*starts.tolist(), length]
    if not bounds or bounds[0] != 0:
        return None
    segment = torch.repeat_interleave(
        torch.arange(len(bounds) - 1, device=mask.device),
        torch.tensor(
            [e - s for s, e in zip(bounds[:-1], bounds[1:], strict=True)], device=mask.device
        ),
    )
    expected = (segment[:, None] == segment[None, :]) & torch.ones_like(mask).tril()
    if not torch.equal(mask, expected):
        return None
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def packed_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """sdpa per packed sequence where ``attention_mask`` is one row of block-diagonal causal
    attention (module docstring); transformers' sdpa otherwise. Same signature and output
    (``[batch, length, heads, head_dim]``)."""
    length = query.shape[2]
    segments = None
    if (
        attention_mask is not None
        and attention_mask.ndim == 4
        and attention_mask.shape[:2] == (1, 1)
        and query.shape[0] == 1
        and key.shape[2] == length > 1
    ):
        segments = causal_segments(attention_mask[0, 0])
    if segments is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    kwargs.pop("is_causal", None)
    outputs = [
        sdpa_attention_forward(
            module,
            query[:, :, start:end],
            key[:, :, start:end],
            value[:, :, start:end],
            None,
            is_causal=True,
            **kwargs,
        )[0]
        for start, end in segments
    ]
    return torch.cat(outputs, dim=1), None


AttentionInterface.register(IMPLEMENTATION, packed_sdpa_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(IMPLEMENTATION, sdpa_mask)


def install(model: Any) -> bool:
    """Switch ``model`` (a transformers model, possibly FSDP-wrapped) from sdpa to
    :data:`IMPLEMENTATION`; returns whether it did (only a model on sdpa is switched)."""
    config = getattr(model, "config", None)
    if attn_implementation(config) != "sdpa":
        return False
    model.set_attn_implementation(IMPLEMENTATION)
    return True
