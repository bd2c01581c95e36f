"""What vlrollout takes from transformers beyond its public API, written for transformers 5.0-5.3.

- KV-cache internals (``DynamicLayer.keys`` / ``.values``, ``DynamicCache.layers``): the
  embedded engine stacks and slices the caches of a decode batch itself, and decodes into
  :class:`GrowingLayer` caches (a ``DynamicLayer`` that appends in place).
- ``ProcessorMixin._merge_kwargs``: memoised per processor, it is most of a small processor
  call's time.
- ``get_rope_index`` of the Qwen-VL models: the engine and the trainer's packing take 3-D
  positions from the model itself.
- ``PretrainedConfig._attn_implementation``: the attention a model runs with (the setter,
  ``set_attn_implementation``, is public; the getter is not).

Importing this module checks transformers' version (:func:`vlrollout.compat.require`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from vlrollout.compat import installed, require

LOWEST, BELOW = (5, 0), (5, 4)
require("transformers", LOWEST, BELOW, installed("transformers"))

from transformers.cache_utils import DynamicCache, DynamicLayer  # noqa: E402

__all__ = [
    "DynamicCache",
    "DynamicLayer",
    "GrowingLayer",
    "attn_implementation",
    "cache_of",
    "growing_cache",
    "layer_of",
    "merge_kwargs_of",
    "rope_index",
    "set_merge_kwargs",
]


def layer_of(keys: torch.Tensor, values: torch.Tensor) -> DynamicLayer:
    """A ``DynamicLayer`` holding these (freshly made) tensors: ``DynamicCache(pairs)`` would
    copy each once more (``torch.cat`` onto an empty tensor)."""
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


def cache_of(layers: list[DynamicLayer]) -> DynamicCache:
    """A ``DynamicCache`` made of ``layers``."""
    cache = DynamicCache()
    cache.layers, cache.layer_class_to_replicate = layers, None
    return cache


def merge_kwargs_of(processor_type: type) -> Callable[..., Any] | None:
    """The processor class's ``_merge_kwargs`` (``None`` for a bare tokenizer)."""
    return getattr(processor_type, "_merge_kwargs", None)


def set_merge_kwargs(processor: Any, merge: Callable[..., Any]) -> None:
    """Make ``merge`` this processor instance's ``_merge_kwargs``."""
    processor._merge_kwargs = merge


def attn_implementation(config: Any) -> str | None:
    """The attention implementation a model with ``config`` runs (``"sdpa"``, ``"eager"``...);
    ``None`` for a missing config or one that does not say."""
    return getattr(config, "_attn_implementation", None)


def rope_index(model: Any, input_ids: torch.Tensor, **kwargs: Any) -> tuple[Any, Any]:
    """``model.get_rope_index(input_ids, **kwargs)``: ``(positions, deltas)`` from a Qwen-VL
    family's inner model (``...ForConditionalGeneration.model``)."""
    return model.get_rope_index(input_ids, **kwargs)


class GrowingLayer(DynamicLayer):
    """A full-attention ``DynamicLayer`` whose ``keys`` and ``values`` are the first columns of
    buffers with spare room, so appending a decode step's column writes it in place.

    ``DynamicLayer.update`` concatenates: every decode step copies the whole cache of every
    layer (for a long multimodal prompt, thousands of columns per new token, and a second copy
    of the layer alive while it does). Here a step writes one column; when the room runs out
    the buffers grow by ``grow`` columns (one copy). The views handed out read the same values
    in the same order, so attention gives the same results.

    ``update`` relies on ``DynamicLayer``'s attributes (``keys``, ``values``, ``dtype``,
    ``device``, ``is_initialized``); code that assigns ``keys``/``values`` directly (offloading,
    beam reordering) is noticed at the next update, which then adopts the assigned tensors.
    """

    def __init__(self, grow: int = 64) -> None:
        super().__init__()
        if grow < 1:
            raise ValueError(f"grow must be >= 1 column, got {grow}")
        self.grow = grow
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def holding(
        cls, keys: torch.Tensor, values: torch.Tensor, length: int, grow: int = 64
    ) -> GrowingLayer:
        """A layer over ``[batch, heads, capacity, head_dim]`` buffers whose first ``length``
        columns are the cache (the rest is room to grow into, never read)."""
        layer = cls(grow)
        layer._adopt(keys, values, length)
        return layer

    @property
    def buffers(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(keys, values)`` buffers including the spare columns, or ``None`` before the
        first update or after ``keys``/``values`` were assigned from outside."""
        if self._buffers is None or self.keys is not self._views[0]:
            return None
        return self._buffers

    def _adopt(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._buffers = (keys, values)
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]
        self._views = (self.keys, self.values)

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[batch, heads, new, head_dim]`` states; returns the whole cache (views)."""
        if self.buffers is None:  # first update, or tensors assigned from outside
            old = (self.keys, self.values) if self.is_initialized and self.keys.numel() else None
            self._reserve(old, key_states, value_states)
        keys, values = self._buffers
        start = self.keys.shape[-2]
        end = start + key_states.shape[-2]
        if end > keys.shape[-2]:
            self._reserve((self.keys, self.values), key_states, value_states)
            keys, values = self._buffers
        keys[:, :, start:end] = key_states
        values[:, :, start:end] = value_states
        self.keys, self.values = keys[:, :, :end], values[:, :, :end]
        self._views = (self.keys, self.values)
        return self.keys, self.values

    def _reserve(self, old, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """New buffers holding ``old`` (or nothing) with room for the states and ``grow``
        columns more."""
        length = old[0].shape[-2] if old is not None else 0
        capacity = length + key_states.shape[-2] + self.grow
        made = []
        for i, states in enumerate((key_states, value_states)):
            buf = states.new_empty(*states.shape[:-2], capacity, states.shape[-1])
            if old is not None:
                buf[:, :, :length] = old[i]
            made.append(buf)
        self._adopt(made[0], made[1], length)


def growing_cache(grow: int = 64) -> DynamicCache:
    """An empty ``DynamicCache`` that makes a :class:`GrowingLayer` for each layer the model
    writes (as ``DynamicCache()`` makes ``DynamicLayer`` ones)."""
    cache = DynamicCache()
    cache.layers, cache.layer_class_to_replicate = [], functools.partial(GrowingLayer, grow)
    return cache
