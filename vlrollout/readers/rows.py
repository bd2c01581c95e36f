"""Files whose rows are data items already (JSONL, and parquet written in the item format), and
the checks every reader shares: the data path, a row that is not an item, the placeholder of a
malformed row.

A JSONL row is kept as written (its relative image paths resolved against the file's folder); the
item format is described in ``docs/item_format.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from vlrollout.jsonl import iter_jsonl
from vlrollout.readers.fields import RowError, position_name, row_id
from vlrollout.readers.sources import DataFileError, resolve_item_sources, unreadable
from vlrollout.readers.tables import ID_KEYS, apply_mapping, own_id, table_fields

SUFFIXES = (".jsonl", ".parquet", ".json", ".p", ".pkl", ".pickle")
"""Suffixes of data files a reader takes (a folder is read as a ``save_to_disk`` dataset)."""


def check_data_path(path: str | Path, setting: str | None = None) -> Path:
    """``path`` as a ``Path`` if it is an existing data file of a known suffix, or a folder.
    ``setting``: the config key that named it (``train_dataset.path``), for a recipe without
    ``--data``.

    Raises:
        DataFileError: naming the path and what to pass instead.
    """
    path = Path(path)
    if not path.exists():
        where = "" if path.is_absolute() else f" (relative to the working folder {Path.cwd()})"
        if setting is not None:
            raise DataFileError(f"{setting} {path} does not exist{where}; set it to a data file")
        raise DataFileError(f"data file {path} does not exist{where}; give an existing file")
    if path.is_dir():
        return path
    if path.suffix not in SUFFIXES:
        raise DataFileError(
            f"data file {path}: expected a .jsonl or .parquet file (or .json, a refs .p pickle, "
            f"a save_to_disk folder), got {path.suffix or 'no'} suffix"
        )
    return path


def read_rows(path: Path) -> list[tuple[int, Any]]:
    """``(line number, parsed row)`` of every non-blank row (JSONL by
    :func:`vlrollout.jsonl.iter_jsonl`); a row that is not JSON is its ``json.JSONDecodeError``
    (so a checker can report every bad line at once)."""
    if path.is_dir():
        raise DataFileError(f"data path {path} is a folder; read it with vlrollout.readers")
    if path.suffix == ".parquet":
        return list(enumerate(read_parquet(path).to_pylist(), 1))
    try:
        return list(iter_jsonl(path))
    except UnicodeDecodeError as e:
        where = first_non_utf8(path.read_bytes())
        raise DataFileError(f"data file {path} is not UTF-8 text ({e.reason}{where})") from None


def first_non_utf8(raw: bytes) -> str:
    r"""Where the first byte that is not UTF-8 text is, as ``" at line N, column C (byte 0xff)"``
    (``""`` when every line decodes).

    >>> first_non_utf8(b'{"a": 1}\n{"b": "caf\xe9"}\n')
    ' at line 2, column 11 (byte 0xe9)'
    """
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            return f" at line {lineno}, column {e.start + 1} (byte 0x{line[e.start]:02x})"
    return ""


def read_parquet(path: Path) -> Any:
    """The ``pyarrow.Table`` of a parquet file.

    Raises:
        DataFileError: the file is not parquet (naming the path and the library's reason).
    """
    try:
        return pq.read_table(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise DataFileError(f"data file {path} cannot be read as parquet ({e})") from None


def row_problem(row: Any) -> tuple[str, str] | None:
    """``(reason, detail)`` when a row read from a data file is not an item at all, else ``None``.

    >>> row_problem([1, 2])
    ('bad_item', 'item is a list, not a JSON object')
    """
    if isinstance(row, json.JSONDecodeError):
        return "bad_json", f"not valid JSON ({row.msg})"
    if not isinstance(row, dict):
        return "bad_item", f"item is a {type(row).__name__}, not a JSON object"
    item_id = row.get("id")
    if item_id is not None and (
        isinstance(item_id, bool) or not isinstance(item_id, str | int | float)
    ):
        return (
            "bad_item",
            f"id {item_id!r:.60} is a {type(item_id).__name__}: an id is a string or a number",
        )
    where = lone_surrogate_at(row)
    if where is not None:
        return (
            "bad_item",
            f"field {where} holds half of a UTF-16 pair (a lone \\ud800-\\udfff escape), "
            "which is no Unicode text",
        )
    return None


def lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """Where in ``value`` (a parsed JSON value) a string holds a lone surrogate, which JSON can
    escape but UTF-8 cannot encode (an output file named by such an id, a tokenizer given such
    text, would raise); ``None`` when none does.

    >>> lone_surrogate_at({"id": "a", "messages": [{"content": "x\\ud800"}]})
    'messages[0].content'
    """
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "value"
        return None
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, inner in items:
        found = lone_surrogate_at(inner, where)
        if found is not None:
            return found
    return None


def jsonl_items(
    path: Path,
    limit: int | None = None,
    mapping: Mapping[str, str] | None = None,
    base: Path | None = None,
) -> list[dict[str, Any]]:
    """The items of a JSONL (or item-format parquet) file; every item gets an ``id`` (its own,
    else its 0-based position) and its relative media paths resolved against ``base`` (default:
    the file's folder).

    A line that cannot be an item (not valid JSON, not a JSON object, an id already used, a mapped
    column absent) becomes a placeholder item with id ``line-N`` (or ``ID@line-N``) carrying
    ``LOAD_ERROR``, so one bad line is one rejected item, not a stopped run.
    """
    rows = read_rows(path)
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    rows = rows[:limit] if limit is not None else rows
    own = {own_id(r, mapping, "") for _, r in rows if isinstance(r, dict)} - {""}
    for index, (lineno, row) in enumerate(rows):
        problem = row_problem(row)
        if problem is not None:
            out.append(unreadable(f"line-{lineno}", *problem))
            continue
        try:
            row = table_fields(apply_mapping(row, mapping) if mapping else row)
        except RowError as e:  # named by its own id where it has one free, as a table row is
            given = own_id(row, mapping, "")
            item_id = given if given and given not in seen else f"line-{lineno}"
            seen.setdefault(item_id, lineno)
            out.append(unreadable(item_id, e.reason, f"{path} line {lineno}: {e}"))
            continue
        item = {"id": "", **row}  # the id first, as in every item
        item["id"] = row_id(row, ID_KEYS, position_name(index, own))
        if item["id"] in seen:
            detail = f"id {item['id']!r} already used on line {seen[item['id']]}"
            out.append(unreadable(f"{item['id']}@line-{lineno}", "duplicate_id", detail))
            continue
        seen[item["id"]] = lineno
        out.append(resolve_item_sources(item, base or path.parent))
    return out
