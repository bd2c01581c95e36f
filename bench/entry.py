"""How every benchmark script ends: its exit status, and Ctrl-C as one line instead of a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

from vlrollout.argtypes import whole_number


def run(main: Callable[[], int | None]) -> None:
    """Call ``main`` and exit with its status (0 for ``None``); on Ctrl-C say so and exit 130."""
    try:
        status = main()
    except KeyboardInterrupt:
        print(f"{sys.argv[0]}: interrupted, no result", file=sys.stderr)
        sys.exit(130)
    sys.exit(status or 0)


positive_int = whole_number(1)
"""An ``argparse`` type: an integer of at least 1 (a count of rows, requests, runs)."""
