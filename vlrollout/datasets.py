"""The one loader of data items: ``vlrollout run``, ``vlrollout train``, ``vlrollout eval``,
``vlrollout validate-data`` and the tiny model's dataset reader all read items through
:func:`load_items`, which reads every format of :mod:`vlrollout.readers` (JSONL and parquet
items, Hugging Face parquet and ``save_to_disk`` folders, COCO, RefCOCO refs, LLaVA JSON).

Image sources are recognised by their form, never by their length
(:mod:`vlrollout.readers.sources`); the item format is described in ``docs/item_format.md`` and
the readers in ``docs/datasets.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlrollout.readers import read_items
from vlrollout.readers.rows import check_data_path, read_rows, row_problem
from vlrollout.readers.sources import (
    LOAD_ERROR,
    LOAD_REASONS,
    DataFileError,
    resolve_item_sources,
    resolve_source,
    resolve_video,
    source_form,
)

__all__ = [
    "LOAD_ERROR",
    "LOAD_REASONS",
    "DataFileError",
    "check_data_path",
    "load_items",
    "read_rows",
    "resolve_item_sources",
    "resolve_source",
    "resolve_video",
    "row_problem",
    "source_form",
]


def load_items(
    path: str | Path,
    limit: int | None = None,
    *,
    fmt: str | None = None,
    mapping: Mapping[str, str] | None = None,
    images_root: str | Path | None = None,
    prompt: str | None = None,
) -> list[dict[str, Any]]:
    """Load data items; every item gets an ``id`` (its own, else its 0-based position).

    A row that cannot be an item (not valid JSON, not an object, an id already used, a missing
    image or a bad box) becomes a placeholder item carrying :data:`LOAD_ERROR` whose detail names
    the file, row and field, so one bad row is one rejected item, not a stopped run.

    Args:
        path: A data file (``.jsonl``, ``.parquet``, ``.json``, a refs ``.p``) or a folder
            written by ``save_to_disk``.
        limit: Only the first ``limit`` items.
        fmt, mapping, images_root, prompt: See :func:`vlrollout.readers.read_items`.

    Raises:
        DataFileError: the file is missing, empty, of an unknown format, or not one of its rows
            is an item (``vlrollout validate-data`` lists every bad row).
    """
    return read_items(
        path, fmt=fmt, mapping=mapping, images_root=images_root, prompt=prompt, limit=limit
    )
