"""Plug-in point: find a preprocessor factory by name or import path.

``get_preprocessor(name, **kwargs)`` resolves ``name`` in this order and calls the factory with
``kwargs``:

1. names registered in this process with :func:`register_preprocessor`;
2. built-in names (``"auto"`` → :class:`~vlrollout.processors.auto.AutoProcessorPreprocessor`);
3. the ``vlrollout.processors`` entry-point group of installed packages, e.g. in a plug-in's
   ``pyproject.toml``::

       [project.entry-points."vlrollout.processors"]
       my_crop = "my_pkg.pre:build_crop_preprocessor"

4. a dotted import path ``"package.module.factory"`` (resolved with AReaL's
   ``import_from_string``), the same convention as AReaL's hooks.

A factory is any callable returning an object with ``prepare(data) -> PreparedPrompt`` (a class
works). Errors name the path that failed.

>>> register_preprocessor("doc_example", lambda **kw: kw)
>>> get_preprocessor("doc_example", processor=None)
{'processor': None}
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

ENTRY_POINT_GROUP = "vlrollout.processors"
Factory = Callable[..., Any]

_REGISTRY: dict[str, Factory] = {}
_LOCK = threading.Lock()


def _builtin(name: str) -> Factory | None:
    if name == "auto":
        from .auto import AutoProcessorPreprocessor

        return AutoProcessorPreprocessor
    return None


BUILTIN_NAMES = ("auto",)


def register_preprocessor(name: str, factory: Factory, *, overwrite: bool = False) -> None:
    """Register ``factory`` under ``name`` for :func:`get_preprocessor`.

    Raises:
        ValueError: ``name`` is empty, contains a dot (reserved for import paths), is built in, or
            is already registered and ``overwrite`` is false.
        TypeError: ``factory`` is not callable.
    """
    if not name or "." in name:
        raise ValueError(f"preprocessor name must be non-empty without dots, got {name!r}")
    if name in BUILTIN_NAMES:
        raise ValueError(f"{name!r} is a built-in preprocessor name; choose another")
    if not callable(factory):
        raise TypeError(f"factory for {name!r} must be callable, got {type(factory).__name__}")
    with _LOCK:
        if name in _REGISTRY and not overwrite and _REGISTRY[name] is not factory:
            raise ValueError(
                f"preprocessor {name!r} is already registered ({_REGISTRY[name]!r}); "
                "pass overwrite=True to replace it"
            )
        _REGISTRY[name] = factory


def unregister_preprocessor(name: str) -> None:
    """Remove a registered name (no error if absent)."""
    with _LOCK:
        _REGISTRY.pop(name, None)


def _entry_point(name: str) -> Factory | None:
    matches = entry_points(group=ENTRY_POINT_GROUP, name=name)
    for ep in matches:
        try:
            return ep.load()
        except Exception as e:
            raise ImportError(
                f"entry point {name!r} in group {ENTRY_POINT_GROUP!r} ({ep.value}) failed to load: {e}"
            ) from e
    return None


def resolve_preprocessor(name_or_path: str) -> Factory:
    """The factory for ``name_or_path`` (see the module docstring for the order).

    Raises:
        KeyError: an unknown plain name (the message lists the known ones).
        ImportError / AttributeError: an import path that does not resolve (naming the path).
    """
    if not isinstance(name_or_path, str) or not name_or_path:
        raise TypeError(f"preprocessor name must be a non-empty string, got {name_or_path!r}")
    with _LOCK:
        factory = _REGISTRY.get(name_or_path)
    if factory is None:
        factory = _builtin(name_or_path)
    if factory is None:
        factory = _entry_point(name_or_path)
    if factory is not None:
        return factory
    if "." not in name_or_path:
        raise KeyError(
            f"unknown preprocessor {name_or_path!r}; known names: {available_preprocessors()}; "
            "or pass an import path 'package.module.factory'"
        )
    from areal.utils.dynamic_import import import_from_string

    try:
        factory = import_from_string(name_or_path)
    except (ImportError, AttributeError) as e:
        raise type(e)(f"cannot import preprocessor factory {name_or_path!r}: {e}") from e
    if not callable(factory):
        raise TypeError(f"{name_or_path!r} resolved to a non-callable {type(factory).__name__}")
    return factory


def get_preprocessor(name_or_path: str, **kwargs: Any) -> Any:
    """Resolve ``name_or_path`` and call the factory with ``kwargs``.

    >>> from vlrollout.testing.offline_processors import build_offline_processor
    >>> pre = get_preprocessor("auto", processor=build_offline_processor("qwen2_vl"))
    >>> pre.family
    'qwen2_vl'
    """
    return resolve_preprocessor(name_or_path)(**kwargs)


def available_preprocessors() -> list[str]:
    """Built-in, registered and entry-point names."""
    with _LOCK:
        names = set(_REGISTRY)
    names.update(BUILTIN_NAMES)
    names.update(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return sorted(names)
