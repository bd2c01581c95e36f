"""Normalise a data item's chat messages and pair every image placeholder with its image source.

Accepted message content:

- a plain string, where each ``<image>`` marks one image taken from ``data["images"]`` in order;
- a list of OpenAI-style parts: ``{"type": "text", "text": ...}``, ``{"type": "image"}`` (next image
  from ``data["images"]``; an inline ``"image"`` value is used instead when present, as in HF chat
  templates), ``{"type": "image_url", "image_url": {"url": ...}}`` (inline source; the URL may be a
  ``data:`` URL, a path or base64).

The output messages use list-of-parts content with ``{"type": "image"}`` for every image (what HF
chat templates render as the family's placeholder); text-only string content stays a string. The
number of placeholders taking an image from ``data["images"]`` must equal ``len(data["images"])``.

>>> msgs, sources = normalize_messages([{"role": "user", "content": "<image>Count."}], ["a.png"], "item 0")
>>> msgs[0]["content"], sources
([{'type': 'image'}, {'type': 'text', 'text': 'Count.'}], ['a.png'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import PreprocessError

IMAGE_PLACEHOLDER = "<image>"


def _split_string(text: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for k, chunk in enumerate(text.split(IMAGE_PLACEHOLDER)):
        if k:
            parts.append({"type": "image"})
        if chunk:
            parts.append({"type": "text", "text": chunk})
    return parts


def _image_url(part: dict[str, Any], item: str) -> Any:
    url = part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if not url:
        raise PreprocessError(item, "bad_message", f"image_url part without a url: {part!r}")
    return url


def normalize_messages(
    messages: Sequence[dict[str, Any]] | str, images: Sequence[Any] | None, item: str
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Return ``(messages with {"type": "image"} parts, image sources in prompt order)``.

    Args:
        messages: OpenAI-style messages, or one string (taken as a single user turn).
        images: ``data["images"]``: sources for ``<image>`` / ``{"type": "image"}`` placeholders.
        item: How errors name the data item.

    Raises:
        PreprocessError: ``placeholder_mismatch`` stating both numbers when placeholders and
            ``images`` disagree; ``bad_message`` for malformed messages.
    """
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, Sequence) or not messages:
        raise PreprocessError(item, "bad_message", "data['messages'] must be a non-empty list")
    images = list(images or [])
    pool = iter(images)
    n_slots = 0
    sources: list[Any] = []
    out: list[dict[str, Any]] = []
    for m, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise PreprocessError(
                item, "bad_message", f"message {m} must be a dict with 'role', got {message!r}"
            )
        content = message.get("content", "")
        if isinstance(content, str):
            if IMAGE_PLACEHOLDER not in content:
                out.append(dict(message))
                continue
            content = _split_string(content)
        if not isinstance(content, list):
            raise PreprocessError(
                item,
                "bad_message",
                f"message {m}: content must be a string or a list of parts, got "
                f"{type(content).__name__}",
            )
        parts: list[dict[str, Any]] = []
        for part in content:
            if isinstance(part, str):
                parts.extend(_split_string(part))
                continue
            if not isinstance(part, dict):
                raise PreprocessError(
                    item,
                    "bad_message",
                    f"message {m}: a content part must be a string or a dict, got {part!r}",
                )
            kind = part.get("type")
            if kind == "image_url":
                sources.append(_image_url(part, item))
                parts.append({"type": "image"})
            elif kind == "image" or (kind is None and "image" in part):
                inline = part.get("image")
                if inline is not None:
                    sources.append(inline)
                else:
                    n_slots += 1
                    sources.append(next(pool, None))
                parts.append({"type": "image"})
            elif kind == "text":
                text = part.get("text", "")
                if not isinstance(text, str):
                    raise PreprocessError(
                        item, "bad_message", f"message {m}: text part holds {text!r}, not a string"
                    )
                parts.append({"type": "text", "text": text})
            else:
                raise PreprocessError(
                    item, "bad_message", f"message {m}: unsupported content part type {kind!r}"
                )
        out.append({**message, "content": parts})
    if n_slots != len(images):
        raise PreprocessError(
            item,
            "placeholder_mismatch",
            f"messages have {n_slots} image placeholder(s) (<image> or {{'type': 'image'}}) but "
            f"data['images'] has {len(images)} image(s); make them equal",
        )
    return out, sources


def to_openai_messages(messages: list[dict[str, Any]], data_urls: Sequence[str]) -> list[dict]:
    """OpenAI-style messages for vLLM: each ``{"type": "image"}`` becomes an ``image_url`` part.

    ``data_urls`` are in prompt order (one per image part).
    """
    urls = iter(data_urls)
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [
                {"type": "image_url", "image_url": {"url": next(urls)}}
                if p.get("type") == "image"
                else dict(p)
                for p in content
            ]
        out.append({**message, "content": content})
    return out
