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


def check_count(name: str, value: object, minimum: int) -> None:
    """Refuse a Python argument that is not a whole number of at least ``minimum`` (a bool and
    a float such as 2.0, which YAML and JSON settings deliver, are refused too: ``range`` and
    slicing would fail on them only when an episode runs).

    >>> check_count("max_turns", 2.0, 1)
    Traceback (most recent call last):
    ...
    TypeError: max_turns must be a whole number (int), got float 2.0
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be a whole number (int), got {type(value).__name__} {value!r}"
        )
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
