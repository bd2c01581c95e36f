"""A decode batch: rows of sequences sharing one left-padded KV cache.

Sequences admitted together are prefilled in one left-padded forward (each row's positions
computed from its own prompt, so padding only shifts columns; logprobs agree with an unpadded
forward to float rounding), then their caches join the running batch: all rows are left-padded
to a common length and the padding is masked out through ``attention_mask``. A decode step
feeds one token per row with explicit per-row position ids. Finished rows leave and columns
that every remaining row masks are trimmed.

With ``grow`` > 0 the caches built here are :class:`~vlrollout.compat.transformers.GrowingLayer`
ones with ``grow`` spare columns, so decode steps append in place instead of copying the whole
cache each step (``DynamicLayer``'s concatenation); ``grow=0`` builds plain ``DynamicLayer``
caches of exactly the cached columns (one memory layout for a compiled decode step).

Only full-attention ``DynamicLayer`` caches can be merged this way; models with sliding-window
layers run one sequence at a time (``can_merge`` says which).
"""

from __future__ import annotations

import math

import torch

from vlrollout.compat.transformers import (
    DynamicCache,
    DynamicLayer,
    GrowingLayer,
    cache_of,
    layer_of,
)


def can_merge(cache: DynamicCache) -> bool:
    """Whether ``cache`` holds only plain full-attention layers (no sliding window)."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


def _layer(keys: torch.Tensor, values: torch.Tensor, length: int, grow: int) -> DynamicLayer:
    """A layer over buffers whose first ``length`` columns are the cache."""
    if grow:
        return GrowingLayer.holding(keys, values, length, grow)
    return layer_of(keys[:, :, :length], values[:, :, :length])


def as_growing(cache: DynamicCache, grow: int) -> DynamicCache:
    """``cache``'s layers copied into growing buffers with ``grow`` spare columns, each old
    layer released once copied (``cache`` is consumed)."""
    layers = []
    for i, layer in enumerate(cache.layers):
        made = []
        for t in (layer.keys, layer.values):
            buf = t.new_empty(*t.shape[:-2], t.shape[-2] + grow, t.shape[-1])
            buf[:, :, : t.shape[-2]] = t
            made.append(buf)
        layers.append(GrowingLayer.holding(made[0], made[1], layer.keys.shape[-2], grow))
        cache.layers[i] = None
    return cache_of(layers)


def merge_caches(
    a: DynamicCache,
    mask_a: torch.Tensor,
    b: DynamicCache,
    mask_b: torch.Tensor,
    grow: int = 0,
) -> tuple[DynamicCache, torch.Tensor]:
    """Stack two caches along the batch dimension, left-padding the shorter one.

    Each layer is copied once into its merged buffer (padding zeroed, ``grow`` spare columns
    left unwritten) and the inputs' layers are released as the merge goes (``a`` and ``b``
    are consumed), so at most one layer exists twice: the merge of a long running batch does
    not hold two whole caches at once.

    Args:
        a, b: Caches with ``[B, heads, L, head_dim]`` keys/values per layer.
        mask_a, mask_b: ``[B, L]`` attention masks (nonzero = real token) for the cached columns.
        grow: Spare columns per merged layer (0: plain ``DynamicLayer`` caches).

    Returns:
        The merged cache and its ``[Ba + Bb, max(La, Lb)]`` mask.
    """
    length = max(mask_a.shape[1], mask_b.shape[1])
    rows_a = mask_a.shape[0]
    layers = []
    for i, (la, lb) in enumerate(zip(a.layers, b.layers, strict=True)):
        made = []
        for x, y in ((la.keys, lb.keys), (la.values, lb.values)):
            buf = x.new_empty(rows_a + y.shape[0], *x.shape[1:-2], length + grow, x.shape[-1])
            for rows, src in ((buf[:rows_a], x), (buf[rows_a:], y)):
                pad = length - src.shape[-2]
                rows[:, :, :pad].zero_()
                rows[:, :, pad:length] = src
            made.append(buf)
        layers.append(_layer(made[0], made[1], length, grow))
        a.layers[i] = b.layers[i] = None  # release the inputs' copies layer by layer
    mask = torch.cat(
        [
            torch.nn.functional.pad(mask_a, (length - mask_a.shape[1], 0)),
            torch.nn.functional.pad(mask_b, (length - mask_b.shape[1], 0)),
        ]
    )
    return cache_of(layers), mask


def select_rows(
    cache: DynamicCache, mask: torch.Tensor, keep: list[int], grow: int = 0
) -> tuple[DynamicCache, torch.Tensor]:
    """Keep rows ``keep`` and drop the leading columns that all kept rows mask out.

    One copy per layer (``index_select``, several times faster than advanced indexing); a
    growing layer's spare columns come along, so the next decode step still appends in place.
    ``grow``: spare columns for layers that had none (0: plain ``DynamicLayer`` caches).
    """
    index = torch.tensor(keep, device=mask.device)
    mask = mask[index]
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else mask.shape[1]
    length = mask.shape[1] - start
    layers = []
    for layer in cache.layers:
        buffers = layer.buffers if grow and isinstance(layer, GrowingLayer) else None
        keys, values = buffers if buffers is not None else (layer.keys, layer.values)
        keys, values = (t[:, :, start:].index_select(0, index) for t in (keys, values))
        layers.append(_layer(keys, values, length, grow))
    return cache_of(layers), mask[:, start:]


def drop_rows(
    cache: DynamicCache, mask: torch.Tensor, keep: list[int]
) -> tuple[DynamicCache, torch.Tensor, list[int]]:
    """Keep the running batch's rows ``keep`` (ascending, distinct, not empty), moving rather
    than copying: each kept row beyond the new row count is copied into the place of a dropped
    one and the layers become views of their first rows, without the leading columns every
    kept row masks out. A finished row costs one row's copy instead of the whole cache's
    (``select_rows``). Layers without growing buffers are copied (``index_select``) into the
    same order.

    Returns:
        The cache, its ``[len(keep), columns]`` mask, and ``order``: the old index of each new
        row (``keep`` rearranged), by which the caller reorders its own per-row state.
    """
    n, kept = len(keep), set(keep)
    holes = [i for i in range(n) if i not in kept]
    order = list(range(n))
    for hole, row in zip(holes, [j for j in keep if j >= n], strict=True):
        order[hole] = row
    index = torch.tensor(order, device=mask.device)
    mask = mask.index_select(0, index)
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else mask.shape[1]
    length = mask.shape[1] - start
    layers = []
    for layer in cache.layers:
        buffers = layer.buffers if isinstance(layer, GrowingLayer) else None
        if buffers is None:
            keys, values = (
                t[:, :, start:].index_select(0, index) for t in (layer.keys, layer.values)
            )
            layers.append(layer_of(keys, values))
            continue
        for buf in buffers:
            for hole in holes:  # few at a time: one small copy each beats indexing ops
                buf[hole] = buf[order[hole]]
        keys, values = (buf[:n, :, start:] for buf in buffers)
        layers.append(GrowingLayer.holding(keys, values, length, layer.grow))
    return cache_of(layers), mask[:, start:], order


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True = attend) as SDPA's additive float mask: 0 where True, -inf where
    False; SDPA converts a bool mask to this form itself, in every layer of every step."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, -math.inf)


class MaskBuffer:
    """The decode batch's ``[rows, columns]`` bool attention mask, stored with spare columns.

    A decode step adds one column (every row attends to its new token); writing it into spare
    room avoids re-allocating the mask each step, and :meth:`for_sdpa` hands the model the
    ``[rows, 1, 1, columns]`` additive float view that transformers' SDPA path uses as-is,
    skipping its per-step mask construction (``masking_utils.create_causal_mask`` returns 4-D
    masks unchanged; one query token per row needs no causal part) and SDPA's conversion of a
    bool mask in every layer. ``padded`` says whether any row has padding at all: without it a
    decode step needs no mask.
    """

    def __init__(self, mask: torch.Tensor, spare: int = 64):
        rows, columns = mask.shape
        self._buf = torch.zeros(rows, columns + spare, dtype=torch.bool, device=mask.device)
        self._buf[:, :columns] = mask.bool()
        self._additive: torch.Tensor | None = None  # made by for_sdpa, then kept in step
        self.columns = columns
        # Whether any row has padding; added columns are real tokens, so it never changes.
        self.padded = not bool(self._buf[:, :columns].all())

    @property
    def mask(self) -> torch.Tensor:
        """``[rows, columns]`` bool view (True = a real token)."""
        return self._buf[:, : self.columns]

    def add_column(self) -> None:
        """Append a column of True: the token each row feeds in the next decode step."""
        if self.columns == self._buf.shape[1]:
            grown = self._buf.new_zeros(self._buf.shape[0], 2 * self.columns + 1)
            grown[:, : self.columns] = self._buf
            self._buf, self._additive = grown, None
        self._buf[:, self.columns] = True
        if self._additive is not None:
            self._additive[:, self.columns] = 0
        self.columns += 1

    def for_sdpa(self, dtype: torch.dtype) -> torch.Tensor:
        """``[rows, 1, 1, columns]`` additive mask of ``dtype`` (the model's query dtype) for a
        one-token decode step under SDPA: 0 for real tokens, -inf for padding."""
        if self._additive is None or self._additive.dtype != dtype:
            self._additive = additive_mask(self._buf, dtype)
        return self._additive[:, None, None, : self.columns]
