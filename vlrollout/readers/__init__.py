"""Readers of the datasets users download, each producing data items (``docs/item_format.md``)
with no conversion step: JSONL and parquet items, Hugging Face parquet and ``save_to_disk``
folders, COCO captions and instances JSON, RefCOCO refs, LLaVA conversation JSON.

``docs/datasets.md`` describes every format, the column mapping, the image-folder rule and the
errors. A file that cannot be read at all raises :class:`DataFileError`; a malformed row becomes a
``LOAD_ERROR`` placeholder naming the file, row and field, so it is skipped and the run goes on.

>>> parse_mapping(["question=problem", "answer=solution"])
{'question': 'problem', 'answer': 'solution'}
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from vlrollout.jsonl import iter_jsonl
from vlrollout.logs import get_logger
from vlrollout.readers.coco import caption_items, instance_items, load_json
from vlrollout.readers.fields import RowError, placeholder
from vlrollout.readers.images import ImageFolders
from vlrollout.readers.llava import llava_items
from vlrollout.readers.prompts import TASK_PROMPTS, PromptFieldError, check_template, with_prompt
from vlrollout.readers.refcoco import refcoco_items
from vlrollout.readers.rows import check_data_path, jsonl_items
from vlrollout.readers.sources import LOAD_ERROR, DataFileError, resolve_item_sources, unreadable
from vlrollout.readers.tables import (
    disk_rows,
    disk_splits,
    other_shards,
    own_id,
    parquet_rows,
    parquet_shards,
    parquet_split,
    table_items,
)

logger = get_logger(__name__)

FORMATS = ("jsonl", "parquet", "hf_disk", "coco_captions", "coco_instances", "refcoco", "llava")
"""The formats :func:`read_items` reads (``fmt``; ``None`` detects it with :func:`detect_format`)."""

MAPPED = ("jsonl", "parquet", "hf_disk", "llava")
"""The formats whose rows a column mapping applies to."""


def parse_mapping(pairs: Sequence[str]) -> dict[str, str]:
    """``["canonical=source", ...]`` as ``{canonical: source}``.

    Raises:
        DataFileError: a pair is not ``name=column``, or a name is given twice.
    """
    mapping: dict[str, str] = {}
    for pair in pairs:
        canonical, sep, source = pair.partition("=")
        if not sep or not canonical.strip() or not source.strip():
            raise DataFileError(
                f"--map {pair!r}: write CANONICAL=COLUMN, e.g. question=problem answer=solution"
            )
        if canonical.strip() in mapping:
            raise DataFileError(f"--map names {canonical.strip()!r} twice")
        columns = [c.strip() for c in source.split(",")]
        if not all(columns):
            raise DataFileError(
                f"--map {pair!r}: an empty column name between commas; list the columns, e.g. "
                "choices=A,B,C,D"
            )
        mapping[canonical.strip()] = ",".join(columns)
    return mapping


def _json_format(data: Any, path: Path) -> str:
    if isinstance(data, dict) and isinstance(data.get("annotations"), list):
        first = next((a for a in data["annotations"] if isinstance(a, dict)), {})
        if "caption" in first:
            return "coco_captions"
        if "bbox" in first:
            return "coco_instances"
    if isinstance(data, list) and data and isinstance(data[0], dict):
        if "conversations" in data[0]:
            return "llava"
        if "sentences" in data[0] and "ann_id" in data[0]:
            return "refcoco"
    raise DataFileError(
        f"data file {path}: JSON of no known layout (COCO captions/instances with "
        "'annotations', RefCOCO refs with 'sentences' and 'ann_id', LLaVA rows with "
        "'conversations'); pass --format"
    )


def _detect(path: Path) -> tuple[str, Any]:
    """``(format, parsed JSON or None)`` of a checked data path."""
    if path.is_dir():
        if parquet_shards(path) and not (path / "state.json").is_file():
            return "parquet", None
        disk_splits(path)  # raises when it is no save_to_disk folder
        return "hf_disk", None
    if path.suffix in (".p", ".pkl", ".pickle"):
        return "refcoco", None
    if path.suffix == ".json":
        data = load_json(path)
        return _json_format(data, path), data
    return path.suffix.lstrip("."), None


def detect_format(path: str | Path) -> str:
    """The format of a data path: by suffix, folder content (``save_to_disk``) or JSON keys.

    Raises:
        DataFileError: no reader knows it (naming the path and ``--format``).
    """
    return _detect(check_data_path(path))[0]


def _table_items(
    path: Path, fmt: str, mapping: Mapping[str, str] | None, root: Path | None = None
) -> Iterator[dict[str, Any]]:
    """Items of a parquet file or a ``save_to_disk`` folder (a ``DatasetDict``'s splits become
    ``split``).

    Ids: the row's ``id``, else ``question_id``, else its position. A ``DatasetDict`` prefixes
    position ids by the split (``train-0``), and when it has more than one split it prefixes every
    id (``test-7``): published sets number their rows per split, so ids repeat across splits.
    Image paths are under ``root`` when given, else beside the file (or in the split's folder)."""
    if fmt == "parquet":
        sources = _parquet_sources(path)
    else:
        sources = [
            (split, str(folder), path, disk_rows(folder)) for split, folder in disk_splits(path)
        ]
    every = len({split for split, *_ in sources}) > 1
    counted: dict[str | None, int] = {}  # rows read per split: shards of a split number on
    for split, where, base, rows in sources:
        positions = f"{split}-" if split is not None and fmt == "hf_disk" and not every else ""
        prefix = f"{split}-" if every else ""
        start = counted.get(split, 0)
        for index, row in enumerate(rows):
            counted[split] = start + index + 1
            default_id = f"{positions}{start + index}"
            try:
                items = table_items(row, default_id, root or base, mapping)
            except RowError as e:
                failed = own_id(row, mapping, default_id)
                yield placeholder(f"{prefix}{failed}", where, index + 1, e)
                continue
            for item in items:
                item["id"] = f"{prefix}{item['id']}"
                if split is not None:
                    item.setdefault("split", split)
                yield item


def _parquet_sources(path: Path) -> list[tuple[str | None, str, Path, Iterator[dict]]]:
    """``(split, where, base, rows)`` of a parquet file, or of each file of a folder of them.
    A hub shard's split is in its name; in a folder, a file that is no hub shard is a split of
    its own (``train.parquet``). One shard of several read alone is warned about."""
    if not path.is_dir():
        if other_shards(path):
            logger.warning(
                "%s is 1 of %d shards of its split: the others are not read; pass the folder %s "
                "to read them all",
                path,
                other_shards(path) + 1,
                path.parent,
            )
        return [(parquet_split(path), str(path), path.parent, parquet_rows(path))]
    return [
        (parquet_split(p) or p.stem, str(p), p.parent, parquet_rows(p))
        for p in parquet_shards(path)
    ]


def _llava_rows(path: Path, data: Any) -> Any:
    if data is not None:
        return data
    if path.suffix == ".jsonl":
        return (row for _, row in iter_jsonl(path))
    data = load_json(path)
    if not isinstance(data, list):
        raise DataFileError(f"data file {path}: LLaVA data is a JSON list of conversations")
    return data


def _items(
    path: Path, fmt: str, data: Any, mapping: Mapping[str, str] | None, root: Path | None
) -> Iterator[dict[str, Any]]:
    folders = ImageFolders(path, root)
    if fmt in ("parquet", "hf_disk"):
        return _table_items(path, fmt, mapping, root)
    if fmt == "llava":
        return llava_items(_llava_rows(path, data), path, folders, mapping)
    if fmt == "refcoco":
        return refcoco_items(path, folders)
    data = load_json(path) if data is None else data
    reader = caption_items if fmt == "coco_captions" else instance_items
    return reader(data, path, folders)


def _finish(
    items: list[dict[str, Any]], path: Path, fmt: str, prompt: str | None, base: Path
) -> list[dict]:
    """Ids made unique (a repeated id is a ``duplicate_id`` placeholder), the prompt template
    applied to items without messages, media sources resolved against ``base``."""
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for n, item in enumerate(items, 1):
        if LOAD_ERROR not in item and item["id"] in seen:
            detail = f"{path}: id {item['id']!r} already used by item {seen[item['id']]}"
            item = unreadable(f"{item['id']}@item-{n}", "duplicate_id", detail)
        elif LOAD_ERROR not in item:
            seen[item["id"]] = n
            template = prompt or (None if fmt == "jsonl" else TASK_PROMPTS.get(item.get("task")))
            if template is not None:
                try:
                    item = with_prompt(item, template)
                except PromptFieldError as e:
                    item = unreadable(item["id"], e.reason, f"{path} item {n}: {e}")
            item = resolve_item_sources(item, base)
        out.append(item)
    return out


def read_all_items(
    path: str | Path,
    *,
    fmt: str | None = None,
    mapping: Mapping[str, str] | None = None,
    images_root: str | Path | None = None,
    prompt: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """:func:`read_items` without its last check: also when every row is a placeholder (so
    ``vlrollout validate-data`` can list every bad row)."""
    # Absolute, so a source resolved against the file's folder is never resolved against it again.
    path = check_data_path(path).absolute()
    if fmt is not None and fmt not in FORMATS:
        raise DataFileError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    fmt, data = _detect(path) if fmt is None else (fmt, None)
    if mapping and fmt not in MAPPED:
        raise DataFileError(f"--map applies to {', '.join(MAPPED)} rows, not to {fmt}")
    if prompt is not None:
        check_template(prompt)
    root = _images_root(images_root)
    base = root or (path if path.is_dir() else path.parent)
    if fmt == "jsonl":
        items = jsonl_items(path, limit, mapping, base)
        items = _finish(items, path, fmt, prompt, base) if prompt is not None else items
    else:
        rows = list(islice(_items(path, fmt, data, mapping, root), limit))
        items = _finish(rows, path, fmt, prompt, base)
    return unique_placeholder_ids(items)


def unique_placeholder_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` with each unreadable line's made-up name (``line-N``, ``ID@line-N``) changed,
    where an item has that name as its own id or another line the same name, to one no item has
    (``~2``, ``~3`` ... appended): each outcome file is one line's."""
    taken = {item["id"] for item in items if LOAD_ERROR not in item}
    out = []
    for item in items:
        if LOAD_ERROR in item:
            name, k = item["id"], 2
            while name in taken:
                name, k = f"{item['id']}~{k}", k + 1
            item = {**item, "id": name}
            taken.add(name)
        out.append(item)
    return out


def _images_root(images_root: str | Path | None) -> Path | None:
    """The image folder, absolute; one that is not a folder is refused before any row is read
    (every relative image path would otherwise be ``image_not_found``)."""
    if images_root is None:
        return None
    root = Path(images_root).absolute()
    if not root.is_dir():
        raise DataFileError(f"images_root (--images-root) {images_root}: not a folder")
    return root


def read_items(
    path: str | Path,
    *,
    fmt: str | None = None,
    mapping: Mapping[str, str] | None = None,
    images_root: str | Path | None = None,
    prompt: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The data items of ``path`` in any of :data:`FORMATS`.

    Args:
        path: A data file, or a folder written by ``save_to_disk``.
        fmt: One of :data:`FORMATS`; ``None`` detects it (:func:`detect_format`).
        mapping: ``{canonical field: source column}`` for table rows (:data:`MAPPED`).
        images_root: The folder relative image paths are under, in every format (JSONL items,
            table rows, the file names of COCO, RefCOCO and LLaVA); ``None``: the data file's
            folder, and for annotation files the rule of :mod:`vlrollout.readers.images`.
        prompt: A template (``str.format_map`` over the item's fields) for items without
            ``messages``; ``None``: the template of the item's ``task`` when the format implies
            one (COCO captions, RefCOCO), else no prompt is added.
        limit: Only the first ``limit`` items.

    Raises:
        DataFileError: the path cannot be read, its format is unknown, or not one row is an item.
    """
    items = read_all_items(
        path, fmt=fmt, mapping=mapping, images_root=images_root, prompt=prompt, limit=limit
    )
    if not items:
        raise DataFileError(f"data file {path} has no items")
    if all(LOAD_ERROR in item for item in items):
        row = "line" if Path(path).suffix == ".jsonl" else "row"
        raise DataFileError(
            f"data file {path}: no {row} is a data item ({items[0][LOAD_ERROR]['detail']} on the "
            f"first); run `vlrollout validate-data {path}` to list every bad {row}"
        )
    return items
