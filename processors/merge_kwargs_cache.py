"""Skip transformers' per-call re-validation of a processor's unchanging keyword arguments.

transformers 5.3's ``ProcessorMixin._merge_kwargs`` merges a call's keyword arguments with the
processor's defaults and validates them against a ``TypedDict`` that it builds anew on every call,
so huggingface_hub's cached strict-dataclass builder misses every time (``exec`` plus dataclass
creation): a fixed cost per call whatever the image, most of a call on a small image
(``bench/bench_processor_call.py`` measures it). The merged result depends only on those
arguments and on the processor's own settings, and a preprocessor passes the same arguments on
every call, so :func:`with_merged_kwargs_cache` returns a shallow copy of the processor whose
``_merge_kwargs`` runs (and validates) once per distinct set of arguments and tokenizer settings
(compared by value) and hands every call its own deep copy (processors pop entries from it). The caller's processor object is left as it was;
attributes later re-bound on it (``processor.image_processor = ...``) are not seen by the copy.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from vlrollout.compat.transformers import merge_kwargs_of, set_merge_kwargs

_UNHASHABLE = object()

MEMO_MAX = 64
"""Distinct argument sets remembered per processor; a preprocessor passes one, so more means
arguments that vary per call, which are then merged on every call as transformers does."""


def _frozen(value: Any) -> Any:
    """A hashable stand-in for plain data (dicts, lists, scalars); ``_UNHASHABLE`` otherwise."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, dict):
        items = tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
        return _UNHASHABLE if any(v is _UNHASHABLE for _, v in items) else ("dict", items)
    if isinstance(value, list | tuple):
        items = tuple(_frozen(v) for v in value)
        return (
            _UNHASHABLE if any(v is _UNHASHABLE for v in items) else (type(value).__name__, items)
        )
    return _UNHASHABLE


def with_merged_kwargs_cache(processor: Any) -> Any:
    """``processor`` itself when it has no ``_merge_kwargs`` (a bare tokenizer); otherwise a
    shallow copy (same tokenizer and image processor objects) whose merged keyword arguments are
    computed once per distinct call arguments.

    >>> class P:
    ...     calls = 0
    ...     def _merge_kwargs(self, kinds, tokenizer_init_kwargs=None, **kwargs):
    ...         P.calls += 1
    ...         return {"text_kwargs": dict(kwargs)}
    >>> fast = with_merged_kwargs_cache(P())
    >>> [fast._merge_kwargs(dict, return_tensors="pt")["text_kwargs"].pop("return_tensors")
    ...  for _ in range(3)], P.calls
    (['pt', 'pt', 'pt'], 1)
    """
    merge = merge_kwargs_of(type(processor))
    if merge is None:
        return processor
    fast = copy.copy(processor)
    memo: dict[Any, Any] = {}
    lock = threading.Lock()

    def merged_kwargs(kinds: Any, tokenizer_init_kwargs: dict | None = None, **kwargs: Any) -> Any:
        # Keyed on the contents of the tokenizer's settings, not on the dict's id(): a freed
        # dict's id can be given to a new one, and a dict can change in place.
        frozen, settings = _frozen(kwargs), _frozen(tokenizer_init_kwargs)
        if frozen is _UNHASHABLE or settings is _UNHASHABLE:
            return merge(fast, kinds, tokenizer_init_kwargs=tokenizer_init_kwargs, **kwargs)
        key = (kinds, settings, frozen)
        with lock:
            cached = memo.get(key)
        if cached is None:
            cached = merge(fast, kinds, tokenizer_init_kwargs=tokenizer_init_kwargs, **kwargs)
            with lock:
                if len(memo) < MEMO_MAX:
                    memo[key] = cached
        return copy.deepcopy(cached)

    set_merge_kwargs(fast, merged_kwargs)
    return fast
