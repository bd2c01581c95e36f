"""LLaVA-style conversation JSON: a list of ``{"id", "image", "conversations": [{"from":
"human"|"gpt", "value": "...<image>..."}]}`` (``image`` a path or a list of paths).

The last ``gpt`` turn becomes ``answer`` and the turns before it ``messages`` (``human`` ->
``user``, ``gpt`` -> ``assistant``, ``system`` kept), ``<image>`` placeholders kept; a
conversation that does not end with ``gpt`` is all ``messages``. ``image`` becomes ``images``
(paths found by the image-folder rule of :mod:`vlrollout.readers.images`); a row without
``image`` is a text-only item. Other fields pass through. The turns must hold one ``<image>`` per
image (LLaVA's training code inserts none where a row has none): a row that does not is named as a
``placeholder_mismatch`` row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from vlrollout.processors.messages import IMAGE_PLACEHOLDER
from vlrollout.readers.fields import RowError, placeholder
from vlrollout.readers.images import ImageFolders
from vlrollout.readers.tables import apply_mapping

ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}
"""LLaVA's ``from`` values and the chat roles they become."""


def _turns(conversations: Any) -> list[dict[str, str]]:
    if conversations is not None and not isinstance(conversations, list):
        raise RowError(
            "bad_row",
            "conversations",
            f"conversations is a list of turns, got a {type(conversations).__name__}",
        )
    if not conversations:
        raise RowError("missing_field", "conversations", "no conversation turns")
    turns = []
    for k, turn in enumerate(conversations):
        role = ROLES.get(turn.get("from")) if isinstance(turn, dict) else None
        if role is None or not isinstance(turn.get("value"), str):
            raise RowError(
                "bad_row",
                f"conversations[{k}]",
                "a turn is {'from': 'human'|'gpt'|'system', 'value': text}",
            )
        turns.append({"role": role, "content": turn["value"]})
    return turns


def llava_item(
    row: Any, index: int, folders: ImageFolders, mapping: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The item of one LLaVA row (``index`` 0-based, the id when the row has none).

    Raises:
        RowError: the row is malformed.
    """
    if not isinstance(row, dict):
        raise RowError("bad_row", "row", f"a row is an object, got a {type(row).__name__}")
    if mapping:
        row = apply_mapping(row, mapping)
    item = {k: v for k, v in row.items() if k not in ("image", "conversations")}
    item["id"] = str(row.get("id", index))
    turns = _turns(row.get("conversations"))
    if turns[-1]["role"] == "assistant" and len(turns) > 1:
        item["answer"] = turns.pop()["content"]
    item["messages"] = turns
    image = row.get("image")
    if image not in (None, [], ""):
        names = image if isinstance(image, list) else [image]
        if not all(isinstance(n, str) and n for n in names):
            raise RowError("missing_field", "image", f"{image!r} is not a path or list of paths")
        item["images"] = [folders.find(n, "image") for n in names]
    _check_placeholders(turns, len(item.get("images", [])))
    return item


def _check_placeholders(turns: list[dict[str, str]], images: int) -> None:
    """One ``<image>`` per image across the turns, else the row is named here (file, row,
    field): LLaVA's training code moves a turn's ``<image>`` to the front of that turn but inserts
    none, so a row whose image has no ``<image>`` has no place for it that LLaVA would agree on.

    Raises:
        RowError: ``placeholder_mismatch`` naming the counts and the fix.
    """
    found = sum(turn["content"].count(IMAGE_PLACEHOLDER) for turn in turns)
    if found != images:
        fix = (
            "write '<image>\\n' at the start of the first human turn"
            if found < images
            else "drop the extra <image> or list its file in 'image'"
        )
        raise RowError(
            "placeholder_mismatch",
            "conversations",
            f"{found} {IMAGE_PLACEHOLDER} for the row's {images} image(s) in 'image'; {fix}",
        )


def llava_items(
    rows: Any, path: Path, folders: ImageFolders, mapping: Mapping[str, str] | None = None
) -> Iterator[dict[str, Any]]:
    """Items of the rows of a LLaVA JSON list (see the module docstring)."""
    for index, row in enumerate(rows):
        try:
            yield llava_item(row, index, folders, mapping)
        except RowError as e:
            row_id = row.get("id", index) if isinstance(row, dict) else index
            yield placeholder(str(row_id), str(path), index + 1, e)
