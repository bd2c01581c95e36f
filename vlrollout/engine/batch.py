"""A decode batch: rows of sequences sharing one left-padded KV cache.

Sequences admitted together are prefilled in one left-padded forward (each row's positions
computed from its own prompt, so padding only shifts columns; logprobs agree with an unpadded
forward to float rounding), then their caches join the running batch: all rows are left-padded
to a common length and the padding is masked out through ``attention_mask``. A decode step
feeds one token per row with explicit per-row position ids. Finished rows leave with
``batch_select_indices`` and columns that every remaining row masks are trimmed.

Only full-attention ``DynamicLayer`` caches can be merged this way; models with sliding-window
layers run one sequence at a time (``can_merge`` says which).
"""

from __future__ import annotations

import torch

from vlrollout.compat.transformers import DynamicCache, DynamicLayer, cache_of, layer_of


def can_merge(cache: DynamicCache) -> bool:
    """Whether ``cache`` holds only plain full-attention layers (no sliding window)."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


def _left_pad(t: torch.Tensor, length: int) -> torch.Tensor:
    pad = length - t.shape[-2]
    if pad == 0:
        return t
    zeros = t.new_zeros(*t.shape[:-2], pad, t.shape[-1])
    return torch.cat([zeros, t], dim=-2)


def merge_caches(
    a: DynamicCache, mask_a: torch.Tensor, b: DynamicCache, mask_b: torch.Tensor
) -> tuple[DynamicCache, torch.Tensor]:
    """Stack two caches along the batch dimension, left-padding the shorter one.

    Args:
        a, b: Caches with ``[B, heads, L, head_dim]`` keys/values per layer.
        mask_a, mask_b: ``[B, L]`` int64 attention masks (1 = real token) for the cached columns.

    Returns:
        The merged cache and its ``[Ba + Bb, max(La, Lb)]`` mask.
    """
    length = max(mask_a.shape[1], mask_b.shape[1])
    layers = []
    for la, lb in zip(a.layers, b.layers, strict=True):
        keys = torch.cat([_left_pad(la.keys, length), _left_pad(lb.keys, length)], dim=0)
        values = torch.cat([_left_pad(la.values, length), _left_pad(lb.values, length)], dim=0)
        layers.append(layer_of(keys, values))
    mask = torch.cat(
        [
            torch.nn.functional.pad(mask_a, (length - mask_a.shape[1], 0)),
            torch.nn.functional.pad(mask_b, (length - mask_b.shape[1], 0)),
        ]
    )
    return cache_of(layers), mask


def select_rows(
    cache: DynamicCache, mask: torch.Tensor, keep: list[int]
) -> tuple[DynamicCache, torch.Tensor]:
    """Keep rows ``keep`` and drop the leading columns that all kept rows mask out."""
    index = torch.tensor(keep, device=mask.device)
    mask = mask[index]
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else mask.shape[1]
    # index_select copies the kept rows of the kept columns (several times faster than
    # advanced indexing) into contiguous tensors: one memory layout for a compiled decode step.
    layers = [
        layer_of(layer.keys[:, :, start:].index_select(0, index),
               layer.values[:, :, start:].index_select(0, index))
        for layer in cache.layers
    ]  # fmt: skip
    return cache_of(layers), mask[:, start:]


class MaskBuffer:
    """The decode batch's ``[rows, columns]`` bool attention mask, stored with spare columns.

    A decode step adds one column (every row attends to its new token); writing it into spare
    room avoids re-allocating the mask each step, and :meth:`for_sdpa` hands the model the
    ``[rows, 1, 1, columns]`` view that transformers' SDPA path uses as-is, skipping its
    per-step mask construction (``masking_utils.create_causal_mask`` returns 4-D masks
    unchanged; one query token per row needs no causal part).
    """

    def __init__(self, mask: torch.Tensor, spare: int = 64):
        rows, columns = mask.shape
        self._buf = torch.zeros(rows, columns + spare, dtype=torch.bool, device=mask.device)
        self._buf[:, :columns] = mask.bool()
        self.columns = columns

    @property
    def mask(self) -> torch.Tensor:
        """``[rows, columns]`` bool view (True = a real token)."""
        return self._buf[:, : self.columns]

    def add_column(self) -> None:
        """Append a column of True: the token each row feeds in the next decode step."""
        if self.columns == self._buf.shape[1]:
            grown = self._buf.new_zeros(self._buf.shape[0], 2 * self.columns + 1)
            grown[:, : self.columns] = self._buf
            self._buf = grown
        self._buf[:, self.columns] = True
        self.columns += 1

    def for_sdpa(self) -> torch.Tensor:
        """``[rows, 1, 1, columns]`` bool view for a one-token decode step under SDPA."""
        return self.mask[:, None, None, :]
