"""Default prompts of the evaluation tasks, and :func:`with_prompt`, which gives an item without
``messages`` its prompt from a template over the item's own fields.

The referring-expression prompt is deliberately neutral ("output its bounding box"): it names no
coordinate frame, so each model family answers in the convention it was trained on (Qwen2-VL's
0-1000 ``<|box_start|>``, Qwen2.5-VL's pixel ``bbox_2d`` JSON, ...), which the family's box parser
then reads with the image's resize geometry. lmms-eval's ``refcoco_bbox_rec`` prompt instead asks
for 0-1 floats, which families trained on another frame ignore. The caption prompt is the
``question`` of lmms-lab's COCO-Caption2017 rows; the VQA and multiple-choice suffixes are LLaVA's
evaluation prompts (the short-answer and letter-answer instructions lmms-eval uses for them).
"""

from __future__ import annotations

import re
import string
from typing import Any

from vlrollout.processors.messages import IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER
from vlrollout.readers.sources import DataFileError

_MARKERS = re.compile(f"({re.escape(IMAGE_PLACEHOLDER)}|{re.escape(VIDEO_PLACEHOLDER)})")
"""Splits a prompt text at its image and video markers, keeping them."""

TASK_PROMPTS: dict[str, str] = {
    "refcoco": "Locate {expression} in the image and output its bounding box.",
    "caption": "Provide a one-sentence caption for the provided image.",
    "count": "{question}\nAnswer with a single number.",
    "mc": "{question}\n{options}\nAnswer with the option's letter from the given choices directly.",
    "vqa": "{question}\nAnswer the question using a single word or phrase.",
}
"""The default prompt template of each task of ``vlrollout eval`` (``str.format_map`` over the
item's fields, plus ``options``: the item's ``choices`` as lines ``A. text``)."""


BRACES = "write a literal brace as {{ or }} (e.g. 'Answer as {{\"bbox_2d\": [x1, y1, x2, y2]}}')"
"""The fix of a template whose braces are meant as text."""


class PromptFieldError(ValueError):
    """A prompt cannot be made of the item: ``reason`` ``missing_field`` (a field the template
    reads is absent) or ``placeholder_mismatch`` (its ``<image>`` markers do not pair with the
    item's images)."""

    def __init__(self, message: str, reason: str = "missing_field") -> None:
        super().__init__(message)
        self.reason = reason


REFERENCE_FIELDS = ("answer", "boxes", "captions", "segments")
"""The fields the built-in rewards and eval tasks score against: a prompt that shows one gives
the model its own reference."""


def check_template(template: str) -> None:
    """Refuse a template ``str.format_map`` cannot read, whose field names are not names (a JSON
    answer format written with single braces), that reads a field's attribute or item
    (``{images[0]}`` is a local path, ``{x.__class__}`` no text of the item), or that shows a
    reference field (:data:`REFERENCE_FIELDS`), before any item is read.

    Raises:
        DataFileError: naming ``--prompt`` and the fix (literal braces doubled).

    >>> check_template('Locate {expression}. Answer as {{"bbox_2d": [...]}}')
    >>> try:
    ...     check_template("{question} {answer}")
    ... except DataFileError as e:
    ...     print(str(e).split("': ")[1].split(";")[0])
    {answer} is the reference the rewards and eval tasks score against
    """
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as e:
        raise DataFileError(f"--prompt {template!r}: {e}; {BRACES}") from None
    for name in names:
        field = name.split(".")[0].split("[")[0]
        if not field.isidentifier():
            raise DataFileError(
                f"--prompt {template!r}: {{{name}}} is not a field name; fields are written "
                f"{{question}}, {{expression}}, ...; {BRACES}"
            )
        if name != field:
            raise DataFileError(
                f"--prompt {template!r}: {{{name}}} reads an attribute or an item of "
                f"{{{field}}}; a template shows whole fields"
            )
        if field in REFERENCE_FIELDS:
            raise DataFileError(
                f"--prompt {template!r}: {{{field}}} is the reference the rewards and eval "
                "tasks score against; the model would be shown its own answer"
            )


def template_fields(template: str) -> list[str]:
    """The field names a template reads.

    >>> template_fields("{question}\\n{options}")
    ['question', 'options']
    """
    names = [name for _, name, _, _ in string.Formatter().parse(template) if name]
    return [name.split(".")[0].split("[")[0] for name in names]


def _fields(item: dict[str, Any]) -> dict[str, Any]:
    fields = dict(item)
    choices = item.get("choices")
    if isinstance(choices, (list, tuple)) and "options" not in fields:
        fields["options"] = "\n".join(
            f"{chr(ord('A') + k)}. {choice}" for k, choice in enumerate(choices)
        )
    return fields


def with_prompt(item: dict[str, Any], template: str) -> dict[str, Any]:
    """``item`` with a user message built from ``template`` when it has no ``messages``.

    The message holds one ``{"type": "image"}`` part per entry of ``images`` (in order), one
    ``{"type": "video"}`` part per entry of ``videos``, and then the text
    ``template.format_map(fields)``; when that text holds one ``<image>`` (``<video>``) marker per
    image (video), those parts stand at the markers instead. An item that has ``messages`` is
    returned unchanged.

    Raises:
        PromptFieldError: the template names a field the item lacks or holds a list or a mapping
            (the message names it), or the text's ``<image>`` (``<video>``) markers are neither 0 nor one per image (video).

    >>> with_prompt({"id": "1", "images": ["a.png"], "expression": "the dog"},
    ...             "Locate {expression}.")["messages"]
    [{'role': 'user', 'content': [{'type': 'image'}, {'type': 'text', 'text': 'Locate the dog.'}]}]
    """
    if item.get("messages"):
        return item
    fields = _fields(item)
    for name in template_fields(template):
        if fields.get(name) is None:
            source = " (built from 'choices', a list of option texts)" if name == "options" else ""
            raise PromptFieldError(
                f"field {name}: the prompt template {template!r} reads it and the item has none"
                f"{source} (map a column to it, or pass another prompt; {BRACES})"
            )
        if isinstance(fields[name], (list, tuple, dict)):  # its repr is no prompt text
            raise PromptFieldError(
                f"field {name}: the prompt template {template!r} reads it and it is a "
                f"{type(fields[name]).__name__}, not text (map a text column to it)"
            )
        if isinstance(fields[name], str) and not fields[name].strip():
            raise PromptFieldError(
                f"field {name}: is blank, and the prompt template {template!r} reads it (the "
                "prompt would ask about nothing); fix the item"
            )
    try:
        text = template.format_map(fields)
    except (ValueError, LookupError, AttributeError, TypeError) as e:
        raise PromptFieldError(
            f"the prompt template {template!r} cannot be filled from the item's fields "
            f"({type(e).__name__}: {e}); {BRACES}"
        ) from None
    content = _content(text, len(item.get("images") or []), len(item.get("videos") or []))
    return {**item, "messages": [{"role": "user", "content": content}]}


def _content(text: str, images: int, videos: int = 0) -> list[dict[str, Any]]:
    """The message parts of a prompt ``text`` for ``images`` images and ``videos`` videos. Per
    kind, a text without its marker gets one part per medium first (images, then videos); a text
    with as many markers as media (EasyR1 / Video-R1 rows: ``"<image>Find x."``) gets a part at
    each marker.

    Raises:
        PromptFieldError: ``placeholder_mismatch``, a number of markers other than 0 or the
            number of media of that kind.
    """
    parts: list[dict[str, Any]] = []
    for marker, kind, count in (
        (IMAGE_PLACEHOLDER, "image", images),
        (VIDEO_PLACEHOLDER, "video", videos),
    ):
        found = text.count(marker)
        if found == 0:
            parts += [{"type": kind} for _ in range(count)]
        elif found != count:
            raise PromptFieldError(
                f"the prompt text has {found} {marker} for the item's {count} {kind}(s); write "
                f"one {marker} per {kind} where it goes, or none ({kind}s first)",
                "placeholder_mismatch",
            )
    markers = {IMAGE_PLACEHOLDER: "image", VIDEO_PLACEHOLDER: "video"}
    for piece in _MARKERS.split(text):
        if piece in markers:
            parts.append({"type": markers[piece]})
        elif piece:
            parts.append({"type": "text", "text": piece})
    return parts
