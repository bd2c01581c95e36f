"""JSON Lines files: one JSON value per line, UTF-8, the one reader and writer of every ``.jsonl``
this package writes or reads (training metrics, data items, generated datasets).

Writing: one compact ``json.dumps`` per record and ``"\\n"`` after each; NumPy and PyTorch scalars
are written as the Python numbers they hold (an integer stays an integer). Reading: blank lines are
skipped; :func:`iter_jsonl` hands back a line that is not JSON as its ``json.JSONDecodeError``,
with its line number, so a checker can report every bad line, while :func:`read_jsonl` raises on
the first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from vlrollout.files import atomic_write_bytes


def _scalar(value: Any) -> Any:
    """A NumPy or PyTorch scalar as the Python number it holds; anything else is refused."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (ValueError, RuntimeError):  # more than one element
            pass
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps_line(record: Any) -> str:
    """``record`` as one line of JSON Lines, ending in ``"\\n"``.

    >>> dumps_line({"step": 1, "reward": 0.5})
    '{"step": 1, "reward": 0.5}\\n'
    """
    return json.dumps(record, default=_scalar) + "\n"


def append_jsonl(path: str | Path, record: Any) -> None:
    """Add ``record`` as the last line of ``path`` (created if missing)."""
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(dumps_line(record))


def write_jsonl(path: str | Path, records: Iterable[Any]) -> Path:
    """Write ``records`` as the whole of ``path``; returns the path.

    The file is replaced atomically (:func:`vlrollout.files.atomic_write_bytes`): a reader, or a
    write that fails part-way, leaves the previous file whole.
    """
    path = Path(path)
    atomic_write_bytes(path, "".join(dumps_line(r) for r in records).encode("utf-8"))
    return path


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of every non-blank line; a line that is not JSON gives its
    ``json.JSONDecodeError`` as the value.

    Raises:
        UnicodeDecodeError: the file is not UTF-8 text.
    """
    # utf-8-sig: a byte order mark (Windows editors write one) is not part of the first line.
    # newline="\n": JSON Lines ends records at \n only; a \r inside a record is whitespace.
    with Path(path).open(encoding="utf-8-sig", newline="\n") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                yield lineno, e


def read_jsonl(path: str | Path) -> list[Any]:
    """Every value of ``path``; ``[]`` when the file does not exist (nothing written yet).

    Raises:
        ValueError: a line is not JSON (the message names the file and the line).
    """
    path = Path(path)
    if not path.exists():
        return []
    values = []
    for lineno, value in iter_jsonl(path):
        if isinstance(value, json.JSONDecodeError):
            raise ValueError(f"{path}, line {lineno}: not valid JSON ({value.msg})")
        values.append(value)
    return values
