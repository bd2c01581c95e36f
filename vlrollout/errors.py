"""Errors the user fixes (a flag, a config key, a file, an output folder): every command prints
their message and exits 2, without a traceback."""

from __future__ import annotations


class UsageError(ValueError):
    """A value the user gave (flag, config key, file) cannot work; the message names it and the fix.

    The CLI prints the message on one or two lines and exits with status 2, without a traceback.
    """


class ConfigError(UsageError):
    """A configuration value is unknown, of the wrong type or out of range."""


class OutputFolderError(UsageError):
    """The output folder cannot be used: not a folder, not writable, or holds another run."""


class Interrupted(Exception):  # noqa: N818 - not an error: the user asked the run to stop
    """The run stopped on SIGINT/SIGTERM after writing every finished item.

    Attributes:
        signum: The signal received.
        done: Items finished in the output folder (this run and earlier ones).
        total: Items in the data file.
        output: The output folder.
    """

    def __init__(self, signum: int, done: int, total: int, output: str) -> None:
        self.signum, self.done, self.total, self.output = signum, done, total, output
        super().__init__(f"stopped by signal {signum}: {done}/{total} items done in {output}")


class SignalExit(BaseException):  # noqa: N818 - a request to stop, like KeyboardInterrupt
    """SIGTERM (or SIGINT) that stops a command: the CLI prints what was kept and exits
    128 + ``signum``."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signum)


class EngineNotInitialized(RuntimeError):
    """An engine used before ``initialize()``: the caller's bug, so a workflow raises it instead
    of rejecting the episode as it does a failing server's error."""
