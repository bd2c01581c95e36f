"""Names → plug-ins, resolved the same way for preprocessors, rewards and tools.

A name resolves, in order: registered in this process (:meth:`Registry.register`), built in, an
installed package's entry point (when the registry has a group), then a dotted import path
(``"package.module.attr"``, also ``"package.module:attr"``) resolved with AReaL's
``import_from_string`` — the convention of AReaL's own hooks. An unknown plain name raises
:class:`UnknownNameError`, whose message lists the known names.

>>> shapes = Registry("shape", {"square": 4})
>>> shapes.register("triangle", 3)
>>> shapes.resolve("triangle"), shapes.names()
(3, ['square', 'triangle'])
>>> shapes.resolve("circle")
Traceback (most recent call last):
...
vlrollout.registry.UnknownNameError: unknown shape 'circle'; known: square, triangle; or pass an import path 'package.module.attr'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(LookupError):
    """A plain name that is not registered, built in or an entry point (the message lists those)."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        self.kind, self.name, self.known = kind, name, sorted(known)
        super().__init__(
            f"unknown {kind} {name!r}; known: {', '.join(self.known) or '(none)'}; "
            "or pass an import path 'package.module.attr'"
        )


class Registry(Generic[T]):
    """One kind of plug-in (``kind`` names it in errors).

    Args:
        kind: What is registered, for messages ("preprocessor", "reward", "tool").
        builtins: Names shipped with vlrollout; they cannot be registered over.
        entry_point_group: Installed packages' entry-point group searched after the built-ins.
        check: Called as ``check(name_or_path, obj)`` on every resolved object; returns it (or a
            converted one) or raises ``TypeError`` naming the broken promise.
    """

    def __init__(
        self,
        kind: str,
        builtins: Mapping[str, T] | None = None,
        *,
        entry_point_group: str | None = None,
        check: Callable[[str, Any], T] | None = None,
    ) -> None:
        self.kind = kind
        self.builtins = dict(builtins or {})
        self.entry_point_group = entry_point_group
        self.check = check
        self._registered: dict[str, T] = {}
        self._lock = threading.Lock()

    def register(self, name: str, obj: T, *, overwrite: bool = False) -> None:
        """Register ``obj`` under ``name``.

        Raises:
            ValueError: an empty or dotted name (dots mean import paths), a built-in name, or a
                name already registered to another object while ``overwrite`` is false.
        """
        if not isinstance(name, str) or not name or "." in name or ":" in name:
            raise ValueError(
                f"{self.kind} name must be non-empty without dots or colons (reserved for import "
                f"paths), got {name!r}"
            )
        if name in self.builtins:
            raise ValueError(f"{name!r} is a built-in {self.kind} name; choose another")
        with self._lock:
            current = self._registered.get(name)
            if current is not None and current is not obj and current != obj and not overwrite:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered ({current!r}); "
                    "pass overwrite=True to replace it"
                )
            self._registered[name] = obj

    def unregister(self, name: str) -> None:
        """Remove a registered name (no error if absent)."""
        with self._lock:
            self._registered.pop(name, None)

    def names(self) -> list[str]:
        """Registered, built-in and entry-point names."""
        with self._lock:
            names = set(self._registered)
        names.update(self.builtins)
        if self.entry_point_group:
            names.update(ep.name for ep in entry_points(group=self.entry_point_group))
        return sorted(names)

    def resolve(self, name_or_path: str) -> T:
        """The object for a name or import path (see the module docstring for the order).

        Raises:
            UnknownNameError: an unknown plain name.
            ImportError / AttributeError: an import path or entry point that does not load
                (the message names it).
            TypeError: ``name_or_path`` is not a non-empty string, or ``check`` refused the object.
        """
        if not isinstance(name_or_path, str) or not name_or_path:
            raise TypeError(f"{self.kind} name must be a non-empty string, got {name_or_path!r}")
        obj = self._find_named(name_or_path)
        if obj is None:
            if "." not in name_or_path and ":" not in name_or_path:
                raise UnknownNameError(self.kind, name_or_path, self.names())
            obj = self._import(name_or_path)
        return self.check(name_or_path, obj) if self.check else obj

    def _find_named(self, name: str) -> T | None:
        with self._lock:
            if name in self._registered:
                return self._registered[name]
        if name in self.builtins:
            return self.builtins[name]
        if self.entry_point_group:
            for ep in entry_points(group=self.entry_point_group, name=name):
                try:
                    return ep.load()
                except Exception as e:
                    raise ImportError(
                        f"{self.kind} entry point {name!r} in group {self.entry_point_group!r} "
                        f"({ep.value}) failed to load: {e}"
                    ) from e
        return None

    def _import(self, path: str) -> Any:
        from areal.utils.dynamic_import import import_from_string

        try:
            return import_from_string(path.replace(":", "."))
        except (ImportError, AttributeError, ValueError) as e:
            raise type(e)(f"cannot import {self.kind} {path!r}: {e}") from e
