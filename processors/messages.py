"""Normalise a data item's chat messages and pair every image and video placeholder with its source.

Accepted message content:

- a plain string, where each ``<image>`` marks one image taken from ``data["images"]`` in order and
  each ``<video>`` one video from ``data["videos"]``;
- a list of OpenAI-style parts: ``{"type": "text", "text": ...}``, ``{"type": "image"}`` (next image
  from ``data["images"]``; an inline ``"image"`` value is used instead when present, as in HF chat
  templates), ``{"type": "image_url", "image_url": {"url": ...}}`` (inline source; the URL may be a
  ``data:`` URL, a path or base64), and the same three for video (``{"type": "video"}``, an inline
  ``"video"`` value, ``{"type": "video_url", "video_url": {"url": ...}}``).

The output messages use list-of-parts content with ``{"type": "image"}`` / ``{"type": "video"}``
for every medium (what HF chat templates render as the family's placeholder); text-only string
content stays a string. Per kind, the number of placeholders taking a source from the item's field
must equal the field's length: a ``<video>`` with no ``videos`` is an error, never text.

>>> msgs, sources = normalize_messages([{"role": "user", "content": "<image>Count."}], ["a.png"], "item 0")
>>> msgs[0]["content"], sources
([{'type': 'image'}, {'type': 'text', 'text': 'Count.'}], ['a.png'])
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import PreprocessError

IMAGE_PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"
MARKERS = re.compile(f"({re.escape(IMAGE_PLACEHOLDER)}|{re.escape(VIDEO_PLACEHOLDER)})")
_KIND_OF_MARKER = {IMAGE_PLACEHOLDER: "image", VIDEO_PLACEHOLDER: "video"}


MEDIA_FIELDS = frozenset(
    {
        "images",
        "videos",
        "image",
        "video",
        "audio",
        "audios",
        "image_url",
        "image_urls",
        "video_url",
        "video_urls",
        "audio_url",
        "audio_urls",
    }
)
"""Item fields that hold media. A non-empty one that the preprocessor does not read is an error
(never dropped); every other field is free-form task data for rewards."""
_FIELD_HINTS = {
    "image": "give a list under 'images' (one <image> placeholder per image)",
    "video": "give a list under 'videos' (one <video> placeholder per video)",
    "image_url": "give a list under 'images'",
    "image_urls": "give a list under 'images'",
    "video_url": "give a list under 'videos'",
    "video_urls": "give a list under 'videos'",
}


def check_media_fields(data: dict[str, Any], read: Sequence[str], item: str) -> None:
    """Refuse a non-empty :data:`MEDIA_FIELDS` entry of ``data`` that is not in ``read``, and a
    read one that is not a list (one path given as ``"images": "a.png"`` would be read letter
    by letter).

    Raises:
        PreprocessError: ``media_field_unsupported`` naming the field and what to do instead;
            ``bad_images`` / ``bad_videos`` for a read field that is not a list.

    >>> check_media_fields({"images": [], "audio": None, "answer": 3}, ["images"], "item 0")
    """
    for name in read:
        value = data.get(name)
        if value is not None and not isinstance(value, list | tuple):
            raise PreprocessError(
                item, f"bad_{name}", f"{name} must be a list, got {described(value)}"
            )
    for name in sorted(MEDIA_FIELDS & data.keys()):
        value = data[name]
        if name in read or value is None or (isinstance(value, list | tuple) and not value):
            continue
        hint = _FIELD_HINTS.get(name)
        if hint is None:
            hint = (
                f"this preprocessor reads {', '.join(repr(r) for r in read) or 'no media'}; "
                "remove the field or use a model whose processor takes it"
            )
        raise PreprocessError(
            item,
            "media_field_unsupported",
            f"field {name!r} holds media this preprocessor does not read (it would be "
            f"dropped); {hint}",
        )


def _split_string(text: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for chunk in MARKERS.split(text):
        if chunk in _KIND_OF_MARKER:
            parts.append({"type": _KIND_OF_MARKER[chunk]})
        elif chunk:
            parts.append({"type": "text", "text": chunk})
    return parts


def _split_text_part(part: dict[str, Any]) -> list[dict[str, Any]]:
    """A text part whose text holds ``<image>``/``<video>`` markers, split as a string part is
    (LLaVA-style text moved into OpenAI parts); any other part as it is."""
    text = part.get("text")
    if _part_kind(part) != "text" or not isinstance(text, str) or not MARKERS.search(text):
        return [part]
    return _split_string(text)


def _url(part: dict[str, Any], key: str, item: str) -> Any:
    url = part.get(key)
    if isinstance(url, dict):
        url = url.get("url")
    if not url:
        raise PreprocessError(item, "bad_message", f"{key} part without a url: {part!r}")
    return url


@dataclass
class NormalizedMessages:
    """Messages with one ``{"type": "image"}`` / ``{"type": "video"}`` part per medium, and the
    media sources in prompt order."""

    messages: list[dict[str, Any]]
    images: list[Any] = field(default_factory=list)
    videos: list[Any] = field(default_factory=list)


MEDIUM_SETTINGS = {
    "fps": "video_fps",
    "sample_fps": "video_fps",
    "nframes": "video_max_frames",
    "min_frames": "video_max_frames",
    "max_frames": "video_max_frames",
    "video_start": None,
    "video_end": None,
    "min_pixels": "min_pixels",
    "max_pixels": "max_pixels",
    "total_pixels": "max_pixels",
    "resized_height": "max_pixels",
    "resized_width": "max_pixels",
}
"""Keys qwen-vl-utils reads from an image or video part, and the run setting that does their job
here (``None``: none, cut the clip first): a part carrying one is refused, not prepared without
it."""


def check_medium_settings(part: dict[str, Any], kind: str, item: str) -> None:
    """Refuse ``part`` when it carries a per-medium setting (:data:`MEDIUM_SETTINGS`). ``None``
    values are not settings: HF ``datasets`` give every part of a struct column every key."""
    given = [key for key in MEDIUM_SETTINGS if part.get(key) is not None]
    if not given:
        return
    prefix = "video_" if kind == "video" else ""
    instead = sorted(
        {
            f"{prefix}{s}" if s in ("min_pixels", "max_pixels") else s
            for s in (MEDIUM_SETTINGS[key] for key in given)
            if s is not None
        }
    )
    fix = f"set {' / '.join(instead)} for the run instead" if instead else ""
    if any(MEDIUM_SETTINGS[key] is None for key in given):
        fix += ("; " if fix else "") + "cut the clip to the span before the run"
    if kind == "video" and "video_fps" in instead:
        fix += " (a frame list is taken at video_fps)"
    keys = ", ".join(repr(k) for k in given)
    raise PreprocessError(
        item,
        "bad_message",
        f"{kind} part sets {keys}, which vlrollout does not read per {kind}: {fix}",
    )


SOURCE_KEYS = ("url", "path", "base64")
"""Keys of an image or video part that transformers' chat templates read its source from, besides
the part's own kind (``{"type": "image", "image": ...}``)."""


def part_source(part: dict[str, Any], kind: str) -> Any:
    """The source an ``image``/``video`` part gives inline (its ``kind`` key, else one of
    :data:`SOURCE_KEYS`), ``None`` for a bare placeholder.

    >>> part_source({"type": "image", "url": "a.png"}, "image")
    'a.png'
    """
    for key in (kind, *SOURCE_KEYS):
        if part.get(key) is not None:
            return part[key]
    return None


class _Media:
    """Sources of one kind: the item's field (consumed in order) and what the parts give."""

    def __init__(self, kind: str, field_values: Sequence[Any] | None) -> None:
        self.kind = kind
        self.given = list(field_values or [])
        self.pool = iter(self.given)
        self.slots = 0
        self.sources: list[Any] = []

    def take(self, part: dict[str, Any], item: str) -> dict[str, str]:
        check_medium_settings(part, self.kind, item)
        inline = part_source(part, self.kind)
        if part.get("type") == f"{self.kind}_url":
            self.sources.append(_url(part, f"{self.kind}_url", item))
        elif inline is not None:
            self.sources.append(inline)
        else:
            self.slots += 1
            self.sources.append(next(self.pool, None))
        return {"type": self.kind}

    def check(self, item: str) -> None:
        if self.slots != len(self.given):
            field_name = f"{self.kind}s"
            raise PreprocessError(
                item,
                "placeholder_mismatch",
                f"messages have {self.slots} {self.kind} placeholder(s) (<{self.kind}> or "
                f"{{'type': '{self.kind}'}}) but data['{field_name}'] has {len(self.given)} "
                f"{self.kind}(s); make them equal",
            )


def _part_kind(part: dict[str, Any]) -> str | None:
    kind = part.get("type")
    if kind in ("image", "image_url") or (kind is None and "image" in part):
        return "image"
    if kind in ("video", "video_url") or (kind is None and "video" in part):
        return "video"
    return kind


def _parts(content: list[Any], m: int, media: dict[str, _Media], item: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            part_list = _split_string(part)
        elif isinstance(part, dict):
            part_list = _split_text_part(part)
        else:
            raise PreprocessError(
                item,
                "bad_message",
                f"message {m}: a content part must be a string or a dict, got {part!r}",
            )
        for p in part_list:
            kind = _part_kind(p)
            if kind in media:
                parts.append(media[kind].take(p, item))
            elif kind == "text":
                text = p.get("text", "")
                if not isinstance(text, str):
                    raise PreprocessError(
                        item, "bad_message", f"message {m}: text part holds {text!r}, not a string"
                    )
                parts.append({"type": "text", "text": text})
            else:
                raise PreprocessError(
                    item, "bad_message", f"message {m}: unsupported content part type {kind!r}"
                )
    return parts


def normalize_media(
    messages: Sequence[dict[str, Any]] | str,
    images: Sequence[Any] | None,
    videos: Sequence[Any] | None,
    item: str,
) -> NormalizedMessages:
    """Pair every image and video placeholder with its source.

    Args:
        messages: OpenAI-style messages, or one string (taken as a single user turn).
        images: ``data["images"]``: sources for ``<image>`` / ``{"type": "image"}`` placeholders.
        videos: ``data["videos"]``: sources for ``<video>`` / ``{"type": "video"}`` placeholders.
        item: How errors name the data item.

    Raises:
        PreprocessError: ``placeholder_mismatch`` stating both numbers when a kind's placeholders
            and its field disagree (a ``<video>`` with no ``videos`` included); ``bad_message``
            for malformed messages.

    >>> n = normalize_media("<video>Where?", None, ["clip.mp4"], "item 0")
    >>> n.messages[0]["content"][0], n.videos
    ({'type': 'video'}, ['clip.mp4'])
    """
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, Sequence) or not messages:
        raise PreprocessError(
            item,
            "bad_message",
            "data['messages'] must be a prompt string or a non-empty list of {role, content} "
            f"messages, got {described(messages)}",
        )
    media = {"image": _Media("image", images), "video": _Media("video", videos)}
    out: list[dict[str, Any]] = []
    for m, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise PreprocessError(
                item, "bad_message", f"message {m} must be a dict with 'role', got {message!r}"
            )
        content = message.get("content", "")
        if isinstance(content, str):
            if not MARKERS.search(content):
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
        out.append({**message, "content": _parts(content, m, media, item)})
    for kind in media.values():
        kind.check(item)
    return NormalizedMessages(out, media["image"].sources, media["video"].sources)


def normalize_messages(
    messages: Sequence[dict[str, Any]] | str, images: Sequence[Any] | None, item: str
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Return ``(messages with {"type": "image"} parts, image sources in prompt order)``.

    For preprocessors that read images only: a ``<video>`` or ``{"type": "video"}`` placeholder is
    refused (``placeholder_mismatch``: no ``videos``), an inline video part (``video_url``, a
    ``"video"`` value) as ``videos_unsupported``; never left in the prompt as text. See :func:`normalize_media` for the arguments and the other errors.
    """
    normalized = normalize_media(messages, images, None, item)
    if normalized.videos:
        raise PreprocessError(
            item,
            "videos_unsupported",
            f"{len(normalized.videos)} video part(s) but this preprocessor reads images only",
        )
    return normalized.messages, normalized.images


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


def paired_image_sources(item: Mapping[str, Any]) -> list[Any] | None:
    """An item's image sources in prompt order, as :func:`normalize_media` pairs them with their
    placeholders (images in message parts included); ``None`` when its messages do not pair up
    (the preprocessor says why when the item runs)."""
    messages = item.get("messages")
    if messages is None:
        return None
    try:
        return list(
            normalize_media(messages, item.get("images"), item.get("videos"), "item").images
        )
    except (PreprocessError, TypeError, AttributeError):
        return None


def described(value: Any) -> str:
    """``value``'s kind for an error: ``"an empty list"``, ``"None"``, ``"an int"``."""
    if value is None:
        return "None"
    name = type(value).__name__
    if isinstance(value, Sequence) and not value:
        return f"an empty {name}"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"
