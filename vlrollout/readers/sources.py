"""Image and video sources in data items, recognised by their form, never by their length.

=====================================  ===========================================================
form                                   what happens
=====================================  ===========================================================
``data:image/...;base64,...``          passed through (decoded by the loader)
``file:///abs/x.jpg``, ``file:/abs``    passed through (a local file; a host other than
                                       ``localhost`` is refused)
``http://``, ``https://``, ``s3://``…  passed through; the loader refuses it with ``image_source``
absolute path ``/abs/x.jpg``           passed through
relative path ``img/x.jpg``            made absolute against the data file's folder
``~/x.jpg``                            the user's home folder, as a shell reads it
base64 (standard or base64url, with   passed through (decoded by the loader), unless a file of
or without padding, no ``.``) whose    that name exists next to the data file; base64 text whose
bytes start as an image or video       bytes do not (``photo001``, an md5 name) is a path
file does
=====================================  ===========================================================

The same applies to sources inside messages (``image_url`` parts and inline ``image`` values).
Also here: :class:`DataFileError` (the file itself is unusable) and :data:`LOAD_ERROR` (the
placeholder a row that cannot be an item becomes), shared by every reader.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Any

from vlrollout.errors import UsageError
from vlrollout.processors.image_loading import has_scheme, standard_base64, starts_like_media

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_BASE64 = re.compile(r"^[A-Za-z0-9+/_\-\s]+={0,2}\s*$")
_HEAD_CHARS = 64
"""Base64 characters decoded to recognise inline media (48 bytes: every signature fits)."""


class DataFileError(UsageError):
    """The data file itself is unusable (not one bad item: those are rejected one by one)."""


def source_form(text: str) -> str:
    """``"data_url"``, ``"file_url"``, ``"url"`` (any other scheme), ``"path"`` or ``"base64"``.

    >>> [source_form(s) for s in ("data:image/png;base64,AAAA", "file:///a.png", "http://x/a.png",
    ...                           "/abs/a.png", "img/a.png", "iVBORw0KGgo=")]
    ['data_url', 'file_url', 'url', 'path', 'path', 'base64']
    """
    if has_scheme(text.strip(), "data:"):
        return "data_url"
    if has_scheme(text.strip(), "file:"):
        return "file_url"
    if _SCHEME.match(text):
        return "url"
    compact = "".join(text.split())
    if compact and "." not in text and _BASE64.match(text) and _media_bytes(compact):
        return "base64"
    return "path"


def _media_bytes(compact: str) -> bool:
    """Whether base64 text ``compact`` decodes to bytes that start as an image or video."""
    head = standard_base64(compact[:_HEAD_CHARS].rstrip("="))
    head = head[: len(head) // 4 * 4]
    try:
        return starts_like_media(base64.b64decode(head, validate=True))
    except (binascii.Error, ValueError):
        return False


def resolve_source(source: Any, base: Path) -> Any:
    """``source`` with a relative path made absolute against ``base``; other forms unchanged."""
    if isinstance(source, dict) and not source.get("bytes") and isinstance(source.get("path"), str):
        return {**source, "path": resolve_source(source["path"], base)}  # a datasets image struct
    if not isinstance(source, str) or not source.strip():
        return source  # an empty source stays empty, for the item's checks to name
    form = source_form(source)
    if form == "base64" and not _exists(base / source):
        return source
    if form in ("path", "base64"):
        path = Path(source).expanduser()  # "~/pics/a.png": the user's home, as a shell reads it
        return str(path if path.is_absolute() else base / source)
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
            if part.get("type") in ("image", "video"):  # transformers' {"url" | "path": ...}
                for key in ("url", "path"):
                    if isinstance(part.get(key), str):
                        part = {**part, key: resolve_source(part[key], base)}
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


LOAD_ERROR = "_load_error"
"""Key of the placeholder item that a line which cannot be an item becomes (not valid JSON, not an
object, an id seen before): ``{"reason": ..., "detail": ...}``. ``vlrollout run`` rejects it with
that reason like any other bad item (:data:`vlrollout.run.items.BLOCKING`) instead of stopping."""


LOAD_REASONS = (
    "bad_json",
    "bad_item",
    "duplicate_id",
    "missing_field",
    "bad_box",
    "bad_row",
    "image_not_found",
    "placeholder_mismatch",
    "media_field_unsupported",
)
"""Every reason a placeholder carries; all of them block the item in ``vlrollout run``."""


def unreadable(item_id: str, reason: str, detail: str) -> dict[str, Any]:
    """The placeholder item of a row that cannot be an item: ``{"id", LOAD_ERROR: {reason, detail}}``.

    Raises:
        ValueError: ``reason`` is not one of :data:`LOAD_REASONS` (a reader's bug: the run would
            not know the reason blocks the item).
    """
    if reason not in LOAD_REASONS:
        raise ValueError(f"placeholder reason {reason!r} is not one of {', '.join(LOAD_REASONS)}")
    return {"id": item_id, LOAD_ERROR: {"reason": reason, "detail": detail}}
