"""Catching one module's log records in a test.

``caplog`` listens on logging's root, but AReaL's ``getLogger`` replaces the root and the manager
on every call, so a module logger made before such a reset propagates to a root ``caplog`` never
sees. :class:`Records` listens on the module's own logger object instead.
"""

from __future__ import annotations

import logging


class Records(logging.Handler):
    """The messages ``logger`` emits at ``level`` or above while the ``with`` block runs."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING):
        super().__init__(level)
        self.logger = logger
        self.text = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.text += record.getMessage() + "\n"

    def __enter__(self) -> Records:
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
