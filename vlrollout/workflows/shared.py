"""Workflow state shared by name, for callers that build a workflow per item.

AReaL's ``submit`` builds a new workflow instance for every item when it is given an import path
or a class and ``workflow_kwargs`` (``RemoteInfEngine._resolve_workflow``; in AReaL's
single-controller mode the kwargs even arrive as JSON), and ``GroupedRolloutWorkflow`` then runs
``group_size`` episodes on that one instance. Each instance would otherwise have its own
prepared-prompt cache, its own ledger (thrown away with it) and its own one-time checks.

A workflow built with ``share="NAME"`` takes its state from :func:`shared_state`: the first
instance with that name builds it, later ones reuse it, and one built with another
configuration under the same name is refused (two configurations would otherwise mix their
ledgers). The name is a plain string, so it travels in ``workflow_kwargs``. The state lives until
:func:`release` (or :func:`release_all`); a workflow built without ``share`` has its own state,
freed with it.

>>> built = []
>>> def build():
...     built.append(1)
...     return object()
>>> shared_state("demo", "config A", [], build) is shared_state("demo", "config A", [], build)
True
>>> len(built)
1
>>> release("demo")
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


@dataclasses.dataclass
class _Entry:
    key: str
    refs: list[Any]  # objects keyed by identity, kept so their ids cannot be reused
    state: Any


_BY_NAME: dict[str, _Entry] = {}
_LOCK = threading.Lock()


def config_key(cls: type, args: tuple, kwargs: dict[str, Any]) -> tuple[str, list[Any]]:
    """``(key, objects_keyed_by_identity)`` for a constructor call of ``cls``: plain values (str,
    numbers, None, dataclasses such as ``GenerationHyperparameters``) by value, any other object
    (a tokenizer, a processor, a reward instance) by identity."""
    refs: list[Any] = []

    def fp(v: Any) -> str:
        if v is None or isinstance(v, str | bool):
            return repr(v)
        if isinstance(v, int | float):  # 15 and 15.0 (a YAML int, a default float) are alike
            return repr(float(v))
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


def shared_state(name: str, key: str, refs: list[Any], build: Callable[[], T]) -> T:
    """The state named ``name``, built by ``build()`` the first time.

    Raises:
        ValueError: ``name`` holds the state of another configuration (``key`` differs).
    """
    with _LOCK:
        entry = _BY_NAME.get(name)
        if entry is None:
            entry = _BY_NAME[name] = _Entry(key, refs, build())
    if entry.key != key:
        raise ValueError(
            f"workflow state {name!r} belongs to another configuration: it was built for "
            f"{entry.key}, not {key}; give each configuration its own share name"
        )
    return entry.state


def release(name: str) -> None:
    """Forget the state named ``name`` (a later workflow with that name builds a new one)."""
    with _LOCK:
        _BY_NAME.pop(name, None)


def release_all() -> None:
    """Forget every shared state (a test; a new run in the same process)."""
    with _LOCK:
        _BY_NAME.clear()
