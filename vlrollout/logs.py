"""Our modules' loggers, and the one place our commands make them print.

``areal.utils.logging.getLogger`` replaces logging's root logger and manager on every call (AReaL
calls it on import and whenever it builds an engine, actor or executor). A handler put on the root
with ``logging.basicConfig`` is then on a root our loggers no longer reach: their INFO records
vanished and their warnings came out bare through ``logging.lastResort``. So a command's handler
goes on the logger objects themselves (kept here as they are made), which no reset replaces.
Library use is untouched: without :func:`log_to_stderr` our loggers propagate as usual.
"""

from __future__ import annotations

import logging
import sys

_OURS: list[logging.Logger] = []
_COMMAND_LEVEL: int | None = None

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (tests swap it)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


_HANDLER = _Stderr()
_HANDLER.setFormatter(logging.Formatter(FORMAT))


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, remembered so that a command's :func:`log_to_stderr` reaches it."""
    logger = logging.getLogger(name)
    _OURS.append(logger)
    if _COMMAND_LEVEL is not None:
        _attach(logger, _COMMAND_LEVEL)
    return logger


def log_to_stderr(level: int = logging.WARNING) -> None:
    """For a ``vlrollout`` command: print our records at ``level`` and above on stderr, once each,
    whatever AReaL does to logging's root later. Loggers made afterwards get the same."""
    global _COMMAND_LEVEL
    _COMMAND_LEVEL = level
    for logger in _OURS:
        _attach(logger, level)


def _attach(logger: logging.Logger, level: int) -> None:
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
    logger.setLevel(level)
    logger.propagate = False  # the root may have a handler too (basicConfig): print once
