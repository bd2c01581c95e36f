"""How every benchmark script ends: its exit status, and Ctrl-C as one line instead of a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def run(main: Callable[[], int | None]) -> None:
    """Call ``main`` and exit with its status (0 for ``None``); on Ctrl-C say so and exit 130."""
    try:
        status = main()
    except KeyboardInterrupt:
        print(f"{sys.argv[0]}: interrupted, no result", file=sys.stderr)
        sys.exit(130)
    sys.exit(status or 0)


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer of at least 1 (a count of rows, requests, runs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
