"""The data item format (``docs/item_format.md``) as checks: what ``vlrollout run`` rejects before
an item reaches a workflow, and what ``vlrollout validate-data`` reports for every line.

A problem is ``(reason, detail)``. ``bad_message``, ``bad_images`` and the line-level ``bad_json``,
``bad_item`` and ``duplicate_id`` make the run reject the item (every episode of its group, with
that reason); ``bad_field`` (a task field such as ``boxes`` of
the wrong shape) is only reported by ``validate-data``: the reward decides what it can score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlrollout.datasets import LOAD_ERROR, check_data_path, read_rows, row_problem

PART_TYPES = ("text", "image", "image_url")
#: Problems that make ``vlrollout run`` reject the item before any episode runs.
BLOCKING = ("bad_message", "bad_images", "bad_json", "bad_item", "duplicate_id")


def _part_problem(part: Any, where: str) -> str | None:
    if isinstance(part, str):
        return None
    if not isinstance(part, dict):
        return f"{where} is a {type(part).__name__}; use {{'type': 'text', 'text': ...}}"
    kind = part.get("type", "image" if "image" in part else None)
    if kind not in PART_TYPES:
        return f"{where} has type {kind!r}; use one of {', '.join(PART_TYPES)}"
    if kind == "text" and not isinstance(part.get("text"), str):
        return f"{where}: 'text' must be a string, got {type(part.get('text')).__name__}"
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if not isinstance(url, str) or not url:
            return f"{where}: image_url needs {{'url': SOURCE}}, got {part.get('image_url')!r}"
    return None


def message_problems(messages: Any) -> list[str]:
    """Why ``messages`` is not a chat (a string, or a non-empty list of ``{role, content}``)."""
    if isinstance(messages, str):
        return [] if messages else ["messages is an empty string"]
    if not isinstance(messages, list) or not messages:
        what = "an empty list" if messages == [] else f"a {type(messages).__name__}"
        return [f"messages must be a non-empty list of {{role, content}}, got {what}"]
    problems = []
    for m, message in enumerate(messages):
        if not isinstance(message, dict):
            problems.append(f"message {m} is a {type(message).__name__}, not {{role, content}}")
            continue
        if not isinstance(message.get("role"), str):
            problems.append(f"message {m} has no 'role' string (user, assistant, system)")
        content = message.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            what = "null" if content is None else f"a {type(content).__name__}"
            problems.append(f"message {m}: content is {what}; use a string or a list of parts")
            continue
        for p, part in enumerate(content):
            problem = _part_problem(part, f"message {m} part {p}")
            if problem:
                problems.append(problem)
    return problems


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def field_problems(item: dict[str, Any]) -> list[str]:
    """Task fields of the wrong shape (``boxes``, ``captions``, ``task``)."""
    problems = []
    boxes = item.get("boxes")
    if boxes is not None:
        rows = (
            boxes if isinstance(boxes, list) and boxes and isinstance(boxes[0], list) else [boxes]
        )
        for b, box in enumerate(rows):
            if not (isinstance(box, list) and len(box) == 4 and all(map(_is_number, box))):
                problems.append(f"boxes[{b}] must be [x1, y1, x2, y2] (4 numbers), got {box!r}")
    captions = item.get("captions")
    if captions is not None and not (
        isinstance(captions, list) and all(isinstance(c, str) for c in captions)
    ):
        problems.append(f"captions must be a list of strings, got {captions!r:.80}")
    if "task" in item and not isinstance(item["task"], str):
        problems.append(f"task must be a string, got {item['task']!r}")
    return problems


def item_problems(item: Any) -> list[tuple[str, str]]:
    """Every ``(reason, detail)`` problem of one item (``[]`` for a good item).

    >>> item_problems({"id": "x", "messages": [{"role": "user", "content": None}]})
    [('bad_message', 'message 0: content is null; use a string or a list of parts')]
    """
    problem = row_problem(item)
    if problem is not None:
        return [problem]
    if LOAD_ERROR in item:  # a line load_items could not make an item of
        return [(item[LOAD_ERROR]["reason"], item[LOAD_ERROR]["detail"])]
    if "messages" not in item:
        return [("bad_message", "item has no 'messages'")]
    problems = [("bad_message", p) for p in message_problems(item["messages"])]
    images = item.get("images")
    if images is not None and not isinstance(images, list):
        problems.append(("bad_images", f"images must be a list, got a {type(images).__name__}"))
    elif images and any(i is None for i in images):
        problems.append(("bad_images", "images has a null entry"))
    problems += [("bad_field", p) for p in field_problems(item)]
    return problems


@dataclass
class BadLine:
    """One problem of one line of a data file."""

    line: int
    id: str | None
    reason: str
    detail: str

    def __str__(self) -> str:
        name = f" (id {self.id})" if self.id is not None else ""
        return f"line {self.line}{name}: {self.reason}: {self.detail}"


def validate_data(path: str | Path) -> tuple[int, list[BadLine]]:
    """Check every line of a data file; returns ``(number of items, every problem)``.

    Raises:
        DataFileError: the file itself is missing, a folder or of an unknown type.
    """
    path = check_data_path(path)
    rows = read_rows(path)
    bad: list[BadLine] = []
    seen: dict[str, int] = {}
    for index, (lineno, item) in enumerate(rows):
        item_id = str(item.get("id", index)) if isinstance(item, dict) else None
        for reason, detail in item_problems(item):
            bad.append(BadLine(lineno, item_id, reason, detail))
        if item_id is not None:
            if item_id in seen:
                bad.append(
                    BadLine(lineno, item_id, "duplicate_id", f"same id as line {seen[item_id]}")
                )
            seen.setdefault(item_id, lineno)
    if not rows:
        bad.append(BadLine(0, None, "empty", "the file has no items"))
    return len(rows), bad
