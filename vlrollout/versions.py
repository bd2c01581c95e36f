"""The installed versions of vlrollout and the libraries whose behaviour its results depend on,
read from package metadata (nothing heavy is imported), for ``vlrollout --version``, snapshots and
eval records."""

from __future__ import annotations

import platform
from importlib import metadata

LIBRARIES = ("vlrollout", "areal", "torch", "transformers", "torchvision", "pillow", "tokenizers")
"""Distributions named in a version line, in that order."""


def installed_version(name: str) -> str:
    """``name``'s installed version, or ``"not installed"``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def library_versions() -> dict[str, str]:
    """Every distribution of :data:`LIBRARIES` with its installed version."""
    return {name: installed_version(name) for name in LIBRARIES}


def version_line() -> str:
    """``vlrollout 0.1.0 (areal ..., torch ..., ..., python 3.11.x)``: what a bug report needs."""
    first, *rest = library_versions().items()
    details = [f"{name} {version}" for name, version in rest]
    details.append(f"python {platform.python_version()}")
    return f"{first[0]} {first[1]} ({', '.join(details)})"
