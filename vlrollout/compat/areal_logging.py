"""AReaL's loggers handed to a handler of ours, written for AReaL 1.0.

``areal.utils.logging.getLogger`` gives each logger it makes a handler of its own that prints
INFO records on stdout (the ``handlers`` of its ``log_config``), and rebuilds logging's root and
manager on every call, so a handler put on logging's root never sees AReaL's records. AReaL's
public ``setup_file_logging`` reaches every AReaL logger, made before or after it, through two
module registries (``_created_loggers``, ``_file_handlers``); it runs once per process, with
AReaL's file names and colour codes. :func:`route_areal_loggers` uses the same two registries to
give every AReaL logger a handler of ours instead of AReaL's stdout ones.

Importing this module checks AReaL's version (:func:`vlrollout.compat.require`).
"""

from __future__ import annotations

import logging

from vlrollout.compat import IncompatibleLibrary, installed, require

LOWEST, BELOW = (1, 0), (1, 1)
require("areal", LOWEST, BELOW, installed("areal"))

from areal.utils import logging as areal_logging  # noqa: E402

__all__ = ["SILENT", "route_areal_loggers"]

#: Above CRITICAL: a handler at this level prints nothing.
SILENT = logging.CRITICAL + 1

_REGISTRIES = ("log_config", "_created_loggers", "_file_handlers", "_loggers_lock")


def route_areal_loggers(handler: logging.Handler) -> None:
    """Give every AReaL logger, made already or later, ``handler`` and none of AReaL's stdout ones.

    AReaL's stream handlers are taken off the loggers made so far, and the ones AReaL makes later
    are set to :data:`SILENT`; file handlers (AReaL's own ``setup_file_logging``) are left as they
    are. Calling it again with the same handler changes nothing.

    Raises:
        IncompatibleLibrary: the installed AReaL lacks a registry this relies on.
    """
    missing = [name for name in _REGISTRIES if not hasattr(areal_logging, name)]
    if missing:
        raise IncompatibleLibrary(
            f"areal.utils.logging has no {', '.join(missing)} in areal {installed('areal')}; "
            "vlrollout.compat.areal_logging was written for areal 1.0"
        )
    for spec in areal_logging.log_config["handlers"].values():
        spec["level"] = SILENT
    with areal_logging._loggers_lock:
        if handler not in areal_logging._file_handlers:
            areal_logging._file_handlers.append(handler)
        for logger in areal_logging._created_loggers.values():
            for h in list(logger.handlers):
                if type(h) is logging.StreamHandler:
                    logger.removeHandler(h)
            if handler not in logger.handlers:
                logger.addHandler(handler)
