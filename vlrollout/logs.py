"""Our modules' loggers, and the one place our commands decide what prints and what is filed.

``areal.utils.logging.getLogger`` replaces logging's root logger and manager on every call (AReaL
calls it on import and whenever it builds an engine, actor or executor). A handler put on the root
with ``logging.basicConfig`` is then on a root our loggers no longer reach: their INFO records
vanished and their warnings came out bare through ``logging.lastResort``. So a command's handler
goes on the logger objects themselves (kept here as they are made), which no reset replaces.
Library use is untouched: without :func:`log_to_stderr` our loggers propagate as usual.

A command that runs AReaL's trainer (``vlrollout train``) also calls :func:`log_run_to`: AReaL
prints an INFO line per training step (each micro-batch's token counts) and other libraries log
at INFO too; those go to the run's log file, and the terminal keeps our own lines and the
libraries' warnings. Terminal lines are written through ``tqdm.write``, which clears a progress
bar and redraws it below the line instead of breaking it.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

_OURS: list[logging.Logger] = []
_COMMAND_LEVEL: int | None = None

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Terminal(logging.Handler):
    """Writes each record on whatever ``sys.stderr`` is when it comes (tests swap it), through
    ``tqdm.write`` so that an active progress bar is redrawn below the line, not broken by it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:
            self.handleError(record)


class _RunFile(logging.Handler):
    """Appends each record to the run's log file once :meth:`open` has named it; drops records
    before that. ``close`` only flushes: AReaL's ``getLogger`` closes every handler of the process
    on each call, and the run's file must stay open through those."""

    def __init__(self) -> None:
        super().__init__()
        self.path: Path | None = None
        self._file: TextIO | None = None

    def open(self, path: Path) -> None:
        """Append to ``path`` from now on (its folder is made), closing the previous file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.acquire()
        try:
            if self._file is not None:
                self._file.close()
            self._file = path.open("a", encoding="utf-8")
            self.path = path
        finally:
            self.release()

    def emit(self, record: logging.LogRecord) -> None:
        if self._file is None:
            return
        try:
            self._file.write(self.format(record) + "\n")
            self._file.flush()
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()


class _Fanout(logging.Handler):
    """Hands each record to every target whose level it reaches."""

    def __init__(self, *targets: logging.Handler) -> None:
        super().__init__()
        self.targets = targets

    def emit(self, record: logging.LogRecord) -> None:
        for target in self.targets:
            if record.levelno >= target.level:
                target.handle(record)


_HANDLER = _Terminal()
_LIBRARY_TERMINAL = _Terminal(logging.WARNING)
_FILE = _RunFile()
for _h in (_HANDLER, _LIBRARY_TERMINAL, _FILE):
    _h.setFormatter(logging.Formatter(FORMAT))
#: Our loggers' records: the terminal at the command's level, and the run's file.
_OURS_OUT = _Fanout(_HANDLER, _FILE)
#: Other libraries' records: the terminal from WARNING up (everything with debug), the run's file.
_LIBRARIES_OUT = _Fanout(_LIBRARY_TERMINAL, _FILE)


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


def debugging() -> bool:
    """Whether the command prints our DEBUG records (``--debug``)."""
    return _COMMAND_LEVEL is not None and _COMMAND_LEVEL <= logging.DEBUG


def log_run_to(path: Path, debug: bool | None = None) -> None:
    """For a command that runs AReaL's trainer: file every record of the run, keep the terminal short.

    ``path`` (appended to, so a resumed run continues it) gets our records at INFO and above
    (DEBUG with ``debug``), AReaL's and those other libraries log through logging's root at INFO
    and above, and Python warnings. The terminal shows our records at INFO and above and the
    libraries' warnings and errors; with ``debug`` (default: whether the command was started with
    ``--debug``) it shows everything the file gets, and transformers' progress bars (loading and
    saving weights, each training step) are left on. Calling it again moves the file and the
    terminal's levels.
    """
    # Imported here: they import AReaL and torch, which most users of this module never need.
    from transformers.utils import logging as transformers_logging

    from vlrollout.compat.areal_logging import route_areal_loggers

    debug = debugging() if debug is None else debug
    log_to_stderr(logging.DEBUG if debug else logging.INFO)
    _FILE.open(path)
    _LIBRARY_TERMINAL.setLevel(logging.NOTSET if debug else logging.WARNING)
    root = logging.getLogger()
    if _LIBRARIES_OUT not in root.handlers:
        root.addHandler(_LIBRARIES_OUT)
    root.setLevel(min(root.getEffectiveLevel(), logging.INFO))
    # A logger made under one of AReaL's replacement roots has no handler to reach.
    logging.lastResort = _LIBRARIES_OUT
    route_areal_loggers(_LIBRARIES_OUT)
    warnings.showwarning = _show_warning
    if debug:
        transformers_logging.enable_progress_bar()
    else:
        transformers_logging.disable_progress_bar()


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` for a run: a warning is a library record (terminal and file)."""
    text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
    record = logging.LogRecord("py.warnings", logging.WARNING, filename, lineno, text, None, None)
    _LIBRARIES_OUT.handle(record)


def _attach(logger: logging.Logger, level: int) -> None:
    if _OURS_OUT not in logger.handlers:
        logger.addHandler(_OURS_OUT)
    logger.setLevel(level)
    logger.propagate = False  # the root may have a handler too (basicConfig): print once
