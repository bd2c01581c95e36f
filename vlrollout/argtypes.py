"""``argparse`` types shared by our commands and benchmarks."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def whole_number(minimum: int) -> Callable[[str], int]:
    """An ``argparse`` type: a whole number of at least ``minimum`` (a count of items, steps,
    rows), refused in one line naming the value otherwise.

    >>> whole_number(1)("3")
    3
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse
