"""The data item format (``docs/item_format.md``) as checks: what ``vlrollout run`` rejects before
an item reaches a workflow, and what ``vlrollout validate-data`` reports for every line.

A problem is ``(reason, detail)``. ``bad_message``, ``bad_images``, ``bad_videos``,
``media_field_unsupported`` (a media field nothing reads, e.g. ``audio``), ``placeholder_mismatch``
(an ``<image>``/``<video>`` without its medium, or a medium without its placeholder),
``reserved_field`` (a field named as a reward argument, e.g. ``prompt``) and every
reason of a reader's placeholder item (:data:`~vlrollout.readers.sources.LOAD_REASONS`:
``bad_json``, ``duplicate_id``, ``missing_field``, ``image_not_found``, ``bad_box``, ...) make the
run reject the item (every episode of its group, with that reason and the reader's detail);
``bad_field`` (a task field such as ``boxes`` of the wrong shape) is only reported by
``validate-data``: the reward decides what it can score.
``validate-data`` also opens every image (:func:`image_file_problems`) and every video
(:func:`video_file_problems`: a file's first frame, every frame of a list) as the preprocessor does, with its guards and
reasons (``image_not_found``, ``image_decode``, ``video_decode``, ``video_too_large``, ...).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlrollout.datasets import (
    LOAD_ERROR,
    LOAD_REASONS,
    DataFileError,
    check_data_path,
    read_rows,
    resolve_source,
    row_problem,
)
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import load_image
from vlrollout.processors.messages import (
    MARKERS,
    check_media_fields,
    described,
    normalize_media,
)
from vlrollout.processors.video_loading import load_video
from vlrollout.processors.video_sampling import VideoSampling
from vlrollout.readers.fields import RowError, position_name, row_id
from vlrollout.readers.tables import ID_KEYS, table_fields
from vlrollout.rewards.caller import reward_argument_clash
from vlrollout.rewards.grounding import box_problem

PART_TYPES = ("text", "image", "image_url", "video", "video_url")
ROLES = ("user", "assistant", "system", "tool")
"""Message roles the families' chat templates render (another is a typo rendered verbatim)."""
#: Media fields an item may hold; any other :data:`MEDIA_FIELDS` entry is refused.
READ_MEDIA = ("images", "videos")
#: Problems that make ``vlrollout run`` reject the item before any episode runs.
UNKNOWN_TASK = "unknown_task"
"""An item whose task the run's reward, routed by task, does not score (blocked up front)."""

BLOCKING = tuple(
    dict.fromkeys(
        (
            "bad_message",
            UNKNOWN_TASK,
            "bad_images",
            "bad_videos",
            "media_field_unsupported",
            "placeholder_mismatch",
            "reserved_field",
            *LOAD_REASONS,
        )
    )
)


def _part_problem(part: Any, where: str) -> str | None:
    if isinstance(part, str):
        return None
    if not isinstance(part, dict):
        return f"{where} is {described(part)}; use {{'type': 'text', 'text': ...}}"
    default = "image" if "image" in part else "video" if "video" in part else None
    kind = part.get("type", default)
    if kind not in PART_TYPES:
        return f"{where} has type {kind!r}; use one of {', '.join(PART_TYPES)}"
    if kind == "text" and not isinstance(part.get("text"), str):
        return f"{where}: 'text' must be a string, got {type(part.get('text')).__name__}"
    if kind in ("image_url", "video_url"):
        url = part.get(kind)
        url = url.get("url") if isinstance(url, dict) else url
        if not isinstance(url, str) or not url:
            return f"{where}: {kind} needs {{'url': SOURCE}}, got {part.get(kind)!r}"
    return None


def message_problems(messages: Any) -> list[str]:
    """Why ``messages`` is not a chat (a string, or a non-empty list of ``{role, content}``)."""
    if isinstance(messages, str):
        return [] if messages else ["messages is an empty string"]
    if not isinstance(messages, list) or not messages:
        return [
            "messages must be a prompt string or a non-empty list of {role, content}, got "
            + described(messages)
        ]
    problems = []
    for m, message in enumerate(messages):
        if not isinstance(message, dict):
            problems.append(f"message {m} is {described(message)}, not {{role, content}}")
            continue
        role = message.get("role")
        if not isinstance(role, str):
            problems.append(f"message {m} has no 'role' string ({', '.join(ROLES)})")
        elif role not in ROLES:
            problems.append(
                f"message {m} has role {role!r}, which chat templates do not know; use one of "
                f"{', '.join(ROLES)}"
            )
        content = message.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            what = "null" if content is None else described(content)
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
            elif (problem := box_problem(box)) is not None:  # wrong in any frame, any reward
                problems.append(f"boxes[{b}] = {box!r} cannot be scored: {problem}")
    captions = item.get("captions")
    if captions is not None and not (
        isinstance(captions, list) and all(isinstance(c, str) for c in captions)
    ):
        problems.append(f"captions must be a list of strings, got {captions!r:.80}")
    if "task" in item and not isinstance(item["task"], str):
        problems.append(f"task must be a string, got {item['task']!r}")
    return problems


def _prompt_hint(item: dict[str, Any]) -> str:
    """The fix of an item without messages: a prompt template over one of its text fields, or
    ``--format llava`` for LLaVA rows.

    >>> _prompt_hint({"id": "q1", "question": "How many?"})
    "pass --prompt TEMPLATE over its fields, e.g. --prompt '{question}' (vlrollout eval applies its task's template)"
    """
    if "conversations" in item:
        return (
            "its 'conversations' are LLaVA turns: pass --format llava (a .jsonl is read as our "
            "items unless told)"
        )
    not_text = ("id", "task", "split", "answer", "solution", "image", "video", "file_name")
    text = [k for k, v in item.items() if isinstance(v, str) and k not in not_text]
    field = next((k for k in ("question", "expression", "problem") if k in text), None)
    example = f"{{{field or (text[0] if text else 'question')}}}"
    return (
        f"pass --prompt TEMPLATE over its fields, e.g. --prompt '{example}' "
        "(vlrollout eval applies its task's template)"
    )


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
        return [("bad_message", f"item has no 'messages': {_prompt_hint(item)}")]
    problems = [("bad_message", p) for p in message_problems(item["messages"])]
    for name in READ_MEDIA:
        media = item.get(name)
        if media is not None and not isinstance(media, list):
            problems.append((f"bad_{name}", f"{name} must be a list, got {described(media)}"))
        elif media and any(i is None for i in media):
            problems.append((f"bad_{name}", f"{name} has a null entry"))
        elif media and any(isinstance(i, str) and not i.strip() for i in media):
            problems.append((f"bad_{name}", f"{name} has an empty entry"))
    try:
        table_fields(item)  # what run's reader makes of ``choices``
    except RowError as e:
        problems.append((e.reason, str(e)))
    problems += [p for p in media_problems(item, not problems) if p not in problems]  # once
    clash = reward_argument_clash(item)
    if clash is not None:
        problems.append(("reserved_field", clash))
    problems += [("bad_field", p) for p in field_problems(item)]
    return problems


def media_problems(item: dict[str, Any], well_formed: bool = True) -> list[tuple[str, str]]:
    """Media that would be dropped: a media field nothing reads (``audio``, singular ``image``,
    ...), a part carrying a per-medium setting, or placeholders and media that do not pair up
    (checked when the messages and media fields are ``well_formed``; a whole-prompt string
    without ``<image>``/``<video>`` that starts with a bracket may be chat-templated already,
    with the family's own placeholders, so it is left to the preprocessor)."""
    problems: list[tuple[str, str]] = []
    try:
        check_media_fields(item, READ_MEDIA, "item")
    except PreprocessError as e:
        problems.append((e.reason, e.detail))
    messages = item["messages"]
    templated = (
        isinstance(messages, str) and not MARKERS.search(messages) and _may_hold_tokens(messages)
    )
    if well_formed and not templated:
        try:
            normalize_media(messages, item.get("images"), item.get("videos"), "item")
        except PreprocessError as e:
            problems.append((e.reason, e.detail))
    return problems


TEMPLATE_START = re.compile(
    r"\s*(<\|[^|<>\s]+\|>|<(s|bos|start_of_turn)>|\[(INST|gMASK|SYSTEM_PROMPT)\])"
)
"""How the families' chat-templated prompts start: a ``<|...|>`` token (``<|im_start|>``,
``<|begin_of_text|>``, ``<|startoftext|>``), ``<s>``/``<bos>``/``<start_of_turn>``, or
``[INST]``/``[gMASK]``/``[SYSTEM_PROMPT]``."""


def _may_hold_tokens(text: str) -> bool:
    """Whether a prompt string may be chat-templated already, with a family's own media
    placeholders: the preprocessor takes a string for one when it starts with one of its
    tokenizer's special tokens, which without the model are recognised by their forms
    (:data:`TEMPLATE_START`). ``[Q] Where?`` and ``<b>Where</b>?`` are plain prompts.

    >>> [_may_hold_tokens(t) for t in ("<|im_start|>user", "[INST] a", "[Q] a", "<b>a</b>")]
    [True, True, False, False]
    """
    return TEMPLATE_START.match(text) is not None


def image_file_problems(
    item: dict[str, Any], base: Path, label: str = "item"
) -> list[tuple[str, str]]:
    """Open every image of the item (``images`` and inline message parts, in prompt order;
    relative paths against ``base``) as the preprocessor does, with its guards:
    ``[(reason, detail)]`` for those that fail (``image_source``, ``image_not_found``,
    ``image_decode``, ``image_too_large``...)."""
    try:
        sources = normalize_media(item["messages"], item.get("images"), item.get("videos"), label)
    except PreprocessError:
        return []  # reported by item_problems
    problems = []
    for k, source in enumerate(sources.images, start=1):
        try:
            load_image(resolve_source(source, base), f"image {k}")
        except PreprocessError as e:
            problems.append((e.reason, f"{e.item}: {e.detail}"))
    return problems


def video_file_problems(
    item: dict[str, Any], base: Path, label: str = "item"
) -> list[tuple[str, str]]:
    """Open every video of the item (``videos`` and inline message parts, in prompt order;
    relative paths against ``base``) as the preprocessor does (same guards), decoding only the
    first frame of a video file and every frame of a frame list (images, opened as images are):
    ``[(reason, detail)]`` for those that fail."""
    try:
        sources = normalize_media(item["messages"], item.get("images"), item.get("videos"), label)
    except PreprocessError:
        return []  # reported by item_problems
    problems = []
    for k, source in enumerate(sources.videos, start=1):
        if source is None:
            continue
        if isinstance(source, list):
            source = [resolve_source(f, base) for f in source]
        else:
            source = resolve_source(source, base)
        frames = len(source) if isinstance(source, list) and source else 1
        try:
            load_video(source, f"video {k}", VideoSampling(fps=1.0, max_frames=frames))
        except PreprocessError as e:
            problems.append((e.reason, f"{e.item}: {e.detail}"))
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


def media_file_problems(item: Any, base: Path) -> list[tuple[str, str]]:
    """:func:`item_problems`, and what opening the item's images and videos finds (relative
    paths against ``base``), as ``vlrollout run`` would: every problem of the item at once,
    unless it is no item or its messages and media do not pair up (nothing to open by)."""
    problems = item_problems(item)
    if not isinstance(item, dict) or LOAD_ERROR in item or "messages" not in item:
        return problems
    if any(reason in _NOTHING_TO_OPEN_BY for reason, _ in problems):
        return problems
    return problems + image_file_problems(item, base) + video_file_problems(item, base)


_NOTHING_TO_OPEN_BY = frozenset({"bad_message", "bad_images", "bad_videos"})
"""Problems that leave no media list to open (media that do not pair with the prompt's
placeholders leave none either: :func:`image_file_problems` finds nothing then)."""


def validate_data(path: str | Path) -> tuple[int, list[BadLine]]:
    """Check every line of a data file; returns ``(number of items, every problem)``.

    Raises:
        DataFileError: the file itself is missing, a folder or of an unknown type.
    """
    # Media paths named as run names them: against the folder the file is named in (a symlink's
    # own, as in a Hugging Face cache snapshot), not its target's.
    path = check_data_path(path).absolute()
    rows = read_rows(path)
    bad: list[BadLine] = []
    seen: dict[str, int] = {}
    own = {row_id(r, ID_KEYS, "") for _, r in rows if isinstance(r, dict)} - {""}
    for index, (lineno, item) in enumerate(rows):
        item_id = (
            row_id(item, ID_KEYS, position_name(index, own)) if isinstance(item, dict) else None
        )
        for reason, detail in media_file_problems(item, path.parent):
            bad.append(BadLine(lineno, item_id, reason, detail))
        if item_id is not None:
            if item_id in seen:
                bad.append(
                    BadLine(lineno, item_id, "duplicate_id", f"same id as line {seen[item_id]}")
                )
            seen.setdefault(item_id, lineno)
    if not rows:
        raise DataFileError(f"data file {path} has no items")
    return len(rows), bad
