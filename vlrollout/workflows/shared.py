"""One workflow state per configuration and process, however often AReaL builds the workflow.

AReaL's ``submit`` builds a new workflow instance for every item when it is given an import path
or a class (``RemoteInfEngine._resolve_workflow``); ``GroupedRolloutWorkflow`` then runs
``group_size`` episodes on that one instance. Without sharing, every item would get its own
prepared-prompt cache (no prepare-once across the group's late members), its own ledger (thrown
away with the instance) and its own one-time checks (processor parity, reward picklability).

:func:`shared_instance_init` wraps a workflow class's ``__init__``: the first instance built with a
given configuration runs the real constructor and is remembered; later instances with the same
configuration copy its state (``__dict__``) instead of building their own, so they share the
context, cache, ledger and check flags. The configuration key (:func:`config_key`) is the class
plus the constructor arguments: plain values (str, numbers, None, dataclasses such as
``GenerationHyperparameters``) by value, any other object (a tokenizer, a processor, a reward
instance) by identity, with a reference kept so the identity cannot be reused.

>>> class W:
...     def __init__(self, x):
...         self.built = object()
>>> shared_instance_init(W)
>>> W(1).built is W(1).built, W(1).built is W(2).built
(True, False)
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any

_SHARED: dict[str, tuple[Any, list[Any]]] = {}
_LOCK = threading.Lock()


def config_key(cls: type, args: tuple, kwargs: dict[str, Any]) -> tuple[str, list[Any]]:
    """``(key, objects_keyed_by_identity)`` for a constructor call of ``cls``."""
    refs: list[Any] = []

    def fp(v: Any) -> str:
        if v is None or isinstance(v, str | int | float | bool):
            return repr(v)
        if isinstance(v, list | tuple):
            return "[" + ",".join(fp(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ",".join(f"{k!r}:{fp(v[k])}" for k in sorted(v, key=repr)) + "}"
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return f"{type(v).__qualname__}{v!r}"
        refs.append(v)
        return f"<{type(v).__qualname__}@{id(v)}>"

    key = f"{cls.__module__}.{cls.__qualname__}({fp(list(args))},{fp(kwargs)})"
    return key, refs


def shared_instance_init(cls: type) -> None:
    """Make instances of ``cls`` built with one configuration share the first one's state."""
    init = cls.__dict__.get("__init__")
    if init is None or getattr(init, "_vlrollout_shared", False):
        return

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if type(self).__init__ is not __init__:  # a subclass's super().__init__: just build
            init(self, *args, **kwargs)
            return
        key, refs = config_key(type(self), args, kwargs)
        with _LOCK:
            first = _SHARED.get(key)
        if first is None:
            init(self, *args, **kwargs)
            with _LOCK:
                first = _SHARED.setdefault(key, (self, refs))
        if first[0] is not self:
            self.__dict__.update(first[0].__dict__)

    __init__._vlrollout_shared = True  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]


def reset_shared_state() -> None:
    """Forget every shared workflow state (tests; a new run in the same process)."""
    with _LOCK:
        _SHARED.clear()


def shared_states() -> list[Any]:
    """The first instance of each configuration built so far (e.g. to read their ledgers)."""
    with _LOCK:
        return [inst for inst, _ in _SHARED.values()]
