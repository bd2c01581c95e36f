"""The places vlrollout reaches past a library's public API, one module per library.

Each module checks the installed version when it is imported and refuses one it was not written
for with :class:`IncompatibleLibrary`, naming the library, both versions and the fix, instead of
failing later with an ``AttributeError`` deep in a rollout or a training step. Everything else in
vlrollout uses the libraries' public names only.
"""

from __future__ import annotations

from importlib.metadata import version


class IncompatibleLibrary(ImportError):
    """An installed library is outside the versions vlrollout's touch points were written for."""


def parse(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string.

    >>> parse("1.0.4"), parse("5.3.0.dev0"), parse("2.10.0+cpu")
    ((1, 0), (5, 3), (2, 10))
    """
    parts = text.split("+")[0].split(".")
    digits = ["".join(c for c in p if c.isdigit()) or "0" for p in parts[:2]]
    return int(digits[0]), int(digits[1]) if len(digits) > 1 else 0


def require(library: str, lowest: tuple[int, int], below: tuple[int, int], installed: str) -> None:
    """Refuse ``installed`` unless ``lowest <= (major, minor) < below``.

    Raises:
        IncompatibleLibrary: naming the library, the versions and the fix.
    """
    if not lowest <= parse(installed) < below:
        raise IncompatibleLibrary(
            f"vlrollout was written for {library} >= {lowest[0]}.{lowest[1]}, "
            f"< {below[0]}.{below[1]} (it relies on parts of {library} outside its public API, "
            f"listed in vlrollout.compat.{library}); {library} {installed} is installed. "
            f"Install the version in requirements.lock (`make setup`)."
        )


def installed(library: str) -> str:
    """The installed distribution's version string."""
    return version(library)
