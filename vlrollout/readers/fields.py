"""Checks of single fields every reader shares: a row error naming its field, COCO boxes.

A reader turns a :class:`RowError` into a ``LOAD_ERROR`` placeholder whose detail reads
``<file> row <n>: field <f>: <why>``: the row is named and skipped, the others are read.
"""

from __future__ import annotations

import math
from typing import Any

from vlrollout.readers.sources import unreadable


class RowError(ValueError):
    """One row cannot be an item: ``reason`` (``missing_field``, ``bad_box``, ``bad_row``,
    ``image_not_found``) and ``field`` name what to fix."""

    def __init__(self, reason: str, field_name: str, why: str) -> None:
        super().__init__(f"field {field_name}: {why}")
        self.reason, self.field, self.why = reason, field_name, why


def row_id(row: dict[str, Any], keys: tuple[str, ...], default: str) -> str:
    """The first of ``keys`` the row gives a value (not null) for, as text, else ``default``
    (the row's position): a null id is no id, not the id "None".

    >>> row_id({"id": None, "question_id": 7}, ("id", "question_id"), "3")
    '7'
    """
    for key in keys:
        if row.get(key) is not None:
            return str(row[key])
    return default


def position_name(index: int, taken: set[str]) -> str:
    """The id of an item that gives none: its 0-based position, unless another item gives that
    as its own id (then ``~2``, ``~3``... appended): a made-up id never takes a real one.

    >>> position_name(2, {"2"}), position_name(3, {"2"})
    ('2~2', '3')
    """
    name, k = str(index), 2
    while name in taken:
        name, k = f"{index}~{k}", k + 1
    return name


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def xywh_box(value: Any, field_name: str = "bbox") -> list[float]:
    """A COCO ``[x, y, width, height]`` box (pixels) as ``[x1, y1, x2, y2]`` (pixels).

    Raises:
        RowError: ``bad_box`` when it is not 4 finite numbers or its width or height is <= 0.

    >>> xywh_box([10, 20, 30, 40])
    [10, 20, 40, 60]
    """
    if not isinstance(value, (list, tuple)) or len(value) != 4 or not all(map(_number, value)):
        raise RowError("bad_box", field_name, f"{value!r} is not 4 numbers [x, y, width, height]")
    x, y, w, h = value
    if w <= 0 or h <= 0:
        raise RowError("bad_box", field_name, f"{list(value)} has width or height <= 0")
    return [x, y, x + w, y + h]


def text_list_problem(value: Any, entry: str = "entry") -> str | None:
    """What keeps ``value`` from being a non-empty list of non-blank strings (``None``: nothing),
    naming the first bad ``entry`` by its 1-based position.

    >>> text_list_problem(["a dog", " "], "caption")
    'caption 2 of 2 is blank'
    """
    if isinstance(value, str):
        return "is a string: give a list of them"
    if not isinstance(value, (list, tuple)):
        return f"is not a list but {type(value).__name__}"
    if not value:
        return "is an empty list"
    for k, text in enumerate(value, 1):
        if not isinstance(text, str):
            return f"{entry} {k} of {len(value)} is not a string but {type(text).__name__}"
        if not text.strip():
            return f"{entry} {k} of {len(value)} is blank"
    return None


def strings(value: Any, field_name: str) -> list[str]:
    """``value`` if it is a non-empty list of non-blank strings.

    Raises:
        RowError: ``missing_field`` otherwise, saying which entry is wrong.
    """
    problem = text_list_problem(value)
    if problem is not None:
        raise RowError("missing_field", field_name, f"{value!r:.80} {problem}")
    return list(value)


def placeholder(item_id: str, where: str, row: int, error: RowError) -> dict[str, Any]:
    """The ``LOAD_ERROR`` placeholder of a malformed row: detail ``<where> row <row>: field ...``."""
    return unreadable(item_id, error.reason, f"{where} row {row}: {error}")
