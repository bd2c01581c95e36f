"""Reading data items from JSONL or parquet, with image sources resolved against the file.

Image strings are recognised by their form, never by their length:

=====================================  ===========================================================
form                                   what happens
=====================================  ===========================================================
``data:image/...;base64,...``          passed through (decoded by the loader)
``file:///abs/x.jpg``                  passed through (a local file)
``http://``, ``https://``, ``s3://``…  passed through; the loader refuses it with ``image_source``
absolute path ``/abs/x.jpg``           passed through
relative path ``img/x.jpg``            made absolute against the data file's folder
base64 (only ``A-Za-z0-9+/=``, no      passed through (decoded by the loader), unless a file of
``.``, length a multiple of 4)         that name exists next to the data file
=====================================  ===========================================================

The same applies to sources inside messages (``image_url`` parts and inline ``image`` values).
The item format is described in ``docs/item_format.md``; ``vlrollout validate-data`` checks it.
This is the one loader of data items: ``vlrollout run``, ``vlrollout train`` and the tiny model's
dataset reader all read items through :func:`load_items`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from vlrollout.errors import UsageError
from vlrollout.jsonl import iter_jsonl

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_BASE64 = re.compile(r"^[A-Za-z0-9+/\s]+={0,2}\s*$")


class DataFileError(UsageError):
    """The data file itself is unusable (not one bad item: those are rejected one by one)."""


def source_form(text: str) -> str:
    """``"data_url"``, ``"file_url"``, ``"url"`` (any other scheme), ``"path"`` or ``"base64"``.

    >>> [source_form(s) for s in ("data:image/png;base64,AAAA", "file:///a.png", "http://x/a.png",
    ...                           "/abs/a.png", "img/a.png", "iVBORw0KGgo=")]
    ['data_url', 'file_url', 'url', 'path', 'path', 'base64']
    """
    if text.startswith("data:"):
        return "data_url"
    if text.startswith("file://"):
        return "file_url"
    if _SCHEME.match(text):
        return "url"
    compact = "".join(text.split())
    if compact and "." not in text and len(compact) % 4 == 0 and _BASE64.match(text):
        return "base64"
    return "path"


def resolve_source(source: Any, base: Path) -> Any:
    """``source`` with a relative path made absolute against ``base``; other forms unchanged."""
    if not isinstance(source, str):
        return source
    form = source_form(source)
    if form == "base64" and not _exists(base / source):
        return source
    if form in ("path", "base64") and not Path(source).expanduser().is_absolute():
        return str(base / source)
    return source


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # name too long, NUL byte
        return False


def _resolve_url_part(part: dict[str, Any], key: str, base: Path) -> dict[str, Any]:
    """An ``image_url``/``video_url`` part with its url resolved (a dict ``{"url": ...}`` or a str)."""
    url = part.get(key)
    if isinstance(url, dict) and isinstance(url.get("url"), str):
        return {**part, key: {**url, "url": resolve_source(url["url"], base)}}
    if isinstance(url, str):
        return {**part, key: resolve_source(url, base)}
    return part


def _resolve_parts(content: Any, base: Path) -> Any:
    if not isinstance(content, list):
        return content
    out = []
    for part in content:
        if isinstance(part, dict):
            if part.get("image") is not None:
                part = {**part, "image": resolve_source(part["image"], base)}
            if part.get("video") is not None:
                part = {**part, "video": resolve_video(part["video"], base)}
            for key in ("image_url", "video_url"):
                if part.get("type") == key:
                    part = _resolve_url_part(part, key, base)
        out.append(part)
    return out


def resolve_video(source: Any, base: Path) -> Any:
    """A video source resolved: a path like an image's, a list of frames frame by frame."""
    if isinstance(source, list):
        return [resolve_source(frame, base) for frame in source]
    return resolve_source(source, base)


def resolve_item_sources(item: dict[str, Any], base: Path) -> dict[str, Any]:
    """The item with every media source (``images``, ``videos`` and inside ``messages``) resolved."""
    item = dict(item)
    if isinstance(item.get("images"), list):
        item["images"] = [resolve_source(image, base) for image in item["images"]]
    if isinstance(item.get("videos"), list):
        item["videos"] = [resolve_video(video, base) for video in item["videos"]]
    if isinstance(item.get("messages"), list):
        item["messages"] = [
            {**m, "content": _resolve_parts(m.get("content"), base)} if isinstance(m, dict) else m
            for m in item["messages"]
        ]
    return item


def check_data_path(path: str | Path) -> Path:
    """``path`` as a ``Path`` if it is a readable ``.jsonl``/``.parquet`` file.

    Raises:
        DataFileError: naming the path and what to pass instead.
    """
    path = Path(path)
    if path.is_dir():
        raise DataFileError(f"data path {path} is a folder; pass --data FILE.jsonl (or .parquet)")
    if not path.exists():
        where = "" if path.is_absolute() else f" (relative to the working folder {Path.cwd()})"
        raise DataFileError(f"data file {path} does not exist{where}; pass --data FILE.jsonl")
    if path.suffix not in (".jsonl", ".parquet"):
        raise DataFileError(
            f"data file {path}: expected a .jsonl or .parquet file, got {path.suffix or 'no'} suffix"
        )
    return path


def read_rows(path: Path) -> list[tuple[int, Any]]:
    """``(line number, parsed row)`` of every non-blank row (JSONL by
    :func:`vlrollout.jsonl.iter_jsonl`); a row that is not JSON is its ``json.JSONDecodeError``
    (so a checker can report every bad line at once)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(enumerate(pq.read_table(path).to_pylist(), 1))
    try:
        return list(iter_jsonl(path))
    except UnicodeDecodeError as e:
        raise DataFileError(f"data file {path} is not UTF-8 text ({e.reason})") from None


LOAD_ERROR = "_load_error"
"""Key of the placeholder item that a line which cannot be an item becomes (not valid JSON, not an
object, an id seen before): ``{"reason": ..., "detail": ...}``. ``vlrollout run`` rejects it with
that reason like any other bad item (:data:`vlrollout.run.items.BLOCKING`) instead of stopping."""


def _unreadable(item_id: str, reason: str, detail: str) -> dict[str, Any]:
    return {"id": item_id, LOAD_ERROR: {"reason": reason, "detail": detail}}


def row_problem(row: Any) -> tuple[str, str] | None:
    """``(reason, detail)`` when a row read from a data file is not an item at all, else ``None``.

    >>> row_problem([1, 2])
    ('bad_item', 'item is a list, not a JSON object')
    """
    if isinstance(row, json.JSONDecodeError):
        return "bad_json", f"not valid JSON ({row.msg})"
    if not isinstance(row, dict):
        return "bad_item", f"item is a {type(row).__name__}, not a JSON object"
    return None


def load_items(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Load data items; every item gets an ``id`` (its own, else its 0-based position).

    A line that cannot be an item (not valid JSON, not a JSON object, an id already used) becomes a
    placeholder item with id ``line-N`` (or ``ID@line-N``) carrying :data:`LOAD_ERROR`, so one bad
    line is one rejected item, not a stopped run.

    Args:
        path: A ``.jsonl`` or ``.parquet`` file.
        limit: Only the first ``limit`` items.

    Raises:
        DataFileError: the file is missing, a folder, empty, has an unknown extension, or not one
            of its lines is an item (``vlrollout validate-data`` lists every bad line).
    """
    path = check_data_path(path)
    rows = read_rows(path)
    if not rows:
        raise DataFileError(f"data file {path} has no items")
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for index, (lineno, item) in enumerate(rows[:limit] if limit is not None else rows):
        problem = row_problem(item)
        if problem is not None:
            out.append(_unreadable(f"line-{lineno}", *problem))
            continue
        item = {"id": str(index), **item}
        item["id"] = str(item["id"])
        if item["id"] in seen:
            detail = f"id {item['id']!r} already used on line {seen[item['id']]}"
            out.append(_unreadable(f"{item['id']}@line-{lineno}", "duplicate_id", detail))
            continue
        seen[item["id"]] = lineno
        out.append(resolve_item_sources(item, path.parent))
    if all(LOAD_ERROR in item for item in out):
        raise DataFileError(
            f"data file {path}: no line is a data item ({out[0][LOAD_ERROR]['detail']} on the "
            f"first); run `vlrollout validate-data {path}` to list every bad line"
        )
    return out
