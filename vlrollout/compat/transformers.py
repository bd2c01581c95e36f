"""What vlrollout takes from transformers beyond its public API, written for transformers 5.0-5.3.

- KV-cache internals (``DynamicLayer.keys`` / ``.values``, ``DynamicCache.layers``): the
  embedded engine stacks and slices the caches of a decode batch itself.
- ``ProcessorMixin._merge_kwargs``: memoised per processor, it is most of a small processor
  call's time.
- ``get_rope_index`` of the Qwen-VL models: the engine and the trainer's packing take 3-D
  positions from the model itself.
- ``PretrainedConfig._attn_implementation``: the attention a model runs with (the setter,
  ``set_attn_implementation``, is public; the getter is not).

Importing this module checks transformers' version (:func:`vlrollout.compat.require`).
"""

from __future__ import annotations

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
    "attn_implementation",
    "cache_of",
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
