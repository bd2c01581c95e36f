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
works); :func:`get_preprocessor` holds what it builds to that contract. Errors name the path that
failed.

>>> register_preprocessor("doc_example", lambda **kw: kw)
>>> resolve_preprocessor("doc_example")(processor=None)
{'processor': None}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vlrollout.registry import Registry

from .errors import PreprocessorContractError

ENTRY_POINT_GROUP = "vlrollout.processors"
Factory = Callable[..., Any]


def _auto(**kwargs: Any) -> Any:
    """The built-in ``"auto"`` factory (imported on first use: transformers is heavy)."""
    from .auto import AutoProcessorPreprocessor

    return AutoProcessorPreprocessor(**kwargs)


def _callable_factory(name: str, factory: Any) -> Factory:
    if not callable(factory):
        raise TypeError(f"{name!r} resolved to a non-callable {type(factory).__name__}")
    return factory


PREPROCESSORS: Registry[Factory] = Registry(
    "preprocessor",
    {"auto": _auto},
    entry_point_group=ENTRY_POINT_GROUP,
    check=_callable_factory,
)
BUILTIN_NAMES = tuple(PREPROCESSORS.builtins)


def register_preprocessor(name: str, factory: Factory, *, overwrite: bool = False) -> None:
    """Register ``factory`` under ``name`` for :func:`get_preprocessor`.

    Raises:
        ValueError: ``name`` is empty, contains a dot (reserved for import paths), is built in, or
            is already registered and ``overwrite`` is false.
        TypeError: ``factory`` is not callable.
    """
    if not callable(factory):
        raise TypeError(f"factory for {name!r} must be callable, got {type(factory).__name__}")
    PREPROCESSORS.register(name, factory, overwrite=overwrite)


def unregister_preprocessor(name: str) -> None:
    """Remove a registered name (no error if absent)."""
    PREPROCESSORS.unregister(name)


def resolve_preprocessor(name_or_path: str) -> Factory:
    """The factory for ``name_or_path`` (see the module docstring for the order).

    Raises:
        vlrollout.registry.UnknownNameError: an unknown plain name (the message lists the known
            ones).
        ImportError / AttributeError: an import path that does not resolve (naming the path).
    """
    return PREPROCESSORS.resolve(name_or_path)


def get_preprocessor(name_or_path: str, **kwargs: Any) -> Any:
    """Resolve ``name_or_path`` and call the factory with ``kwargs``.

    >>> from vlrollout.testing.offline_processors import build_offline_processor
    >>> pre = get_preprocessor("auto", processor=build_offline_processor("qwen2_vl"))
    >>> pre.family
    'qwen2_vl'
    """
    pre = resolve_preprocessor(name_or_path)(**kwargs)
    check_preprocessor(pre, name_or_path, kwargs.get("processor"))
    return pre


def check_preprocessor(pre: Any, name: str, processor: Any = None) -> None:
    """The built object has ``prepare``, ``.tokenizer`` and, when a processor was given, ``.processor``."""
    if not callable(getattr(pre, "prepare", None)):
        raise PreprocessorContractError(
            name, f"the factory returned a {type(pre).__name__} without a prepare(data) method"
        )
    if processor is not None and getattr(pre, "processor", None) is None:
        raise PreprocessorContractError(
            name,
            "the preprocessor has no .processor (the transformers processor its tensors come "
            "from; the workflow compares it with the engine's processor)",
        )
    if getattr(pre, "tokenizer", None) is None and getattr(pre, "processor", None) is not None:
        raise PreprocessorContractError(name, "the preprocessor has no .tokenizer")


def available_preprocessors() -> list[str]:
    """Built-in, registered and entry-point names."""
    return PREPROCESSORS.names()
