"""Hugging Face tables: parquet files and folders written by ``Dataset.save_to_disk`` /
``DatasetDict.save_to_disk``, read with pyarrow (images stay the raw bytes the table holds).

Each row becomes an item in three steps:

1. the column mapping ``{canonical: source}`` renames columns (the source column is dropped, so
   ``images=image`` leaves no singular ``image`` behind); an absent source is a malformed row;
2. an ``image``/``images`` column of ``{"bytes", "path"}`` structs (one, or a list) becomes
   ``images``: the bytes, else the path against the file's folder;
3. the published lmms-lab layouts are recognised: RefCOCO rows (``bbox`` x, y, w, h in pixels and
   ``answer`` a list of referring expressions) give one item per expression with ``expression``,
   ``boxes`` ``[[x1, y1, x2, y2]]`` and ``task: "refcoco"``, as lmms-eval's ``refcoco_bbox_rec``
   expands them; COCO-Caption2017 rows (``answer`` a list of captions, ``question`` absent or
   asking for a caption, no ``messages`` or ``task``) give ``captions`` and ``task: "caption"``.
   Other rows pass through.

A row is numbered from 1 in its file (``<folder>/<split>`` for a ``DatasetDict``). The split of a
hub parquet file is read from its name (``val-00000-of-00001.parquet`` -> ``val``).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from vlrollout.processors.image_loading import IMAGE_MAGIC
from vlrollout.readers.fields import RowError, row_id, strings, text_list_problem, xywh_box
from vlrollout.readers.images import image_sources
from vlrollout.readers.orientation import upright_boxes
from vlrollout.readers.sources import DataFileError

_HUB_SHARD = re.compile(r"^(?P<split>[A-Za-z0-9_.-]+?)-\d{5}-of-\d{5}")
REFCOCO_KEPT = ("question_id", "file_name")
"""Columns of a RefCOCO row kept beside the canonical fields (``segmentation`` is dropped)."""


def parquet_split(path: Path) -> str | None:
    """The split a hub parquet shard's name carries, else ``None``.

    >>> parquet_split(Path("data/testA-00000-of-00001.parquet"))
    'testA'
    """
    match = _HUB_SHARD.match(path.name)
    return match["split"] if match else None


_SHARD_COUNT = re.compile(r"-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet$")


def parquet_shards(folder: Path) -> list[Path]:
    """The parquet files of a dataset repository as the hub lays it out: in ``folder``, else in
    its ``data/`` folder; by split, then shard, in name order. Empty when there are none."""
    for where in (folder, folder / "data"):
        shards = sorted(where.glob("*.parquet"))
        if shards:
            return shards
    return []


def other_shards(path: Path) -> int:
    """How many shards of ``path``'s split its name says there are besides it
    (``val-00000-of-00004.parquet``: 3), 0 for a file that is not a hub shard."""
    match = _SHARD_COUNT.search(path.name)
    return int(match["count"]) - 1 if match else 0


def parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a parquet file, read a batch at a time.

    Raises:
        DataFileError: the file is not parquet.
    """
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=256)
        for batch in batches:
            yield from batch.to_pylist()
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise DataFileError(f"data file {path} cannot be read as parquet ({e})") from None


def _arrow_table(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        try:
            return pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            return pa.ipc.open_file(source).read_all()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as e:
        raise DataFileError(
            f"{path} cannot be read ({e}); is the folder a save_to_disk copy?"
        ) from None


def disk_splits(folder: Path) -> list[tuple[str | None, Path]]:
    """``(split, folder)`` of a ``save_to_disk`` folder: one ``(None, folder)`` for a
    ``Dataset``, one per split of a ``DatasetDict``.

    Raises:
        DataFileError: the folder is neither (no ``state.json`` nor ``dataset_dict.json``) nor
            holds parquet shards.
    """
    if not folder.is_dir():
        raise DataFileError(
            f"data path {folder} is a file, not a folder written by save_to_disk: give the "
            "format of the file (or leave --format out to detect it)"
        )
    if (folder / "dataset_dict.json").is_file():
        splits = _read_json(folder / "dataset_dict.json").get("splits") or []
        return [(str(split), folder / str(split)) for split in splits]
    if (folder / "state.json").is_file():
        return [(None, folder)]
    raise DataFileError(
        f"data path {folder} is a folder holding neither state.json nor dataset_dict.json nor "
        "parquet files (in it or in data/): pass a data file (.jsonl, .parquet, .json), a "
        "folder of parquet shards or a folder written by save_to_disk"
    )


def disk_rows(folder: Path) -> Iterator[dict[str, Any]]:
    """The rows of one ``Dataset`` folder written by ``save_to_disk`` (its Arrow files in order).

    Raises:
        DataFileError: a file ``state.json`` lists cannot be read.
    """
    state = _read_json(folder / "state.json")
    for entry in state.get("_data_files") or []:
        path = folder / entry["filename"]
        try:
            table = _arrow_table(path)
        except (OSError, pa.ArrowInvalid) as e:
            raise DataFileError(f"{path} cannot be read as Arrow ({e})") from None
        for batch in table.to_batches(max_chunksize=256):
            yield from batch.to_pylist()


def apply_mapping(row: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    """``row`` with each ``canonical`` field taken from its ``source`` column, or gathered into
    a list from several (``A,B,C,D``: :func:`gathered`); the sources are dropped.

    Raises:
        RowError: ``missing_field`` naming an absent source column and the columns there are;
            ``bad_row`` from :func:`gathered`.
    """
    out = dict(row)
    columns = {canonical: source.split(",") for canonical, source in mapping.items()}
    for canonical, sources in columns.items():
        for source in sources:
            if source not in row:
                there = ", ".join(sorted(row))
                raise RowError(
                    "missing_field", source, f"mapped to {canonical}, absent (columns: {there})"
                )
    for source in {s for sources in columns.values() for s in sources} - set(mapping):
        out.pop(source, None)
    for canonical, sources in columns.items():
        out[canonical] = row[sources[0]] if len(sources) == 1 else gathered(row, sources)
    return out


def gathered(row: dict[str, Any], columns: list[str]) -> list[Any]:
    """The values of ``columns`` in order, up to the first missing one (:func:`_missing`:
    MMBench's options ``A`` to ``D``, null or "nan" past the last; MMMU's ``image_1`` to
    ``image_7``).

    Raises:
        RowError: ``bad_row`` when a null comes before a value, which would move the values
            after it (an option's letter).
    """
    values = [row[c] for c in columns]
    nulls = [_missing(v) for v in values]
    end = nulls.index(True) if True in nulls else len(values)
    if not all(nulls[end:]):
        later = columns[nulls.index(False, end)]
        raise RowError("bad_row", columns[end], f"null before {later}, which has a value")
    return values[:end]


def listed_choices(text: str) -> list[Any]:
    """Options a table keeps as the text of a Python list (MMMU: ``"['Baroque', 'Rococo']"``),
    read as lmms-eval reads them (``ast.literal_eval``).

    Raises:
        RowError: ``bad_row`` when the text is not a list of option texts.
    """
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        value = None
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise RowError("bad_row", "choices", f"{text[:80]!r} is not a list of option texts")
    return value


READ_MEDIA_COLUMNS = ("images", "videos", "messages")
"""Columns whose images an item's preparation reads (message parts may hold images)."""


def holds_image(value: Any, depth: int = 3) -> bool:
    """Whether a column's value holds an image: a ``datasets`` image struct (``{"bytes",
    "path"}`` with either), raw bytes of a known image format, or either inside lists and
    structs (up to ``depth`` levels)."""
    if isinstance(value, dict):
        if set(value) == {"bytes", "path"} and (value["bytes"] or value["path"]):
            return True
        return depth > 0 and any(holds_image(v, depth - 1) for v in value.values())
    if isinstance(value, (bytes, bytearray)):
        head = bytes(value[:12])
        return head.startswith(IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")
    if isinstance(value, (list, tuple)):
        return depth > 0 and any(holds_image(v, depth - 1) for v in value)
    return False


def check_unread_images(row: dict[str, Any]) -> None:
    """Refuse a row holding images in a column other than ``images`` (MMMU's and BLINK's
    ``image_1`` ... ``image_7``, MathVista's ``decoded_image``): read as task data, they would
    leave the model blind while the item is scored.

    Raises:
        RowError: ``media_field_unsupported`` naming the column and the mapping that reads it.
    """
    unread = [c for c, v in row.items() if c not in READ_MEDIA_COLUMNS and holds_image(v)]
    if unread:
        raise RowError(
            "media_field_unsupported",
            unread[0],
            "holds images that are not read (only the images or image column is); read the "
            f"row's image columns with --map images={','.join(unread)}",
        )


def _is_caption_row(row: dict[str, Any]) -> bool:
    """A COCO-Caption2017 row as lmms-lab publishes it: never an item of ours, which has
    ``messages`` or a ``task``. A row asking for a caption is one whatever its ``answer`` holds
    (its captions are checked after), so a row missing them is told so."""
    if row.get("messages") is not None or row.get("task") is not None:
        return False
    answer, question = row.get("answer"), row.get("question")
    asks = question is not None and "caption" in str(question).lower()
    if asks and (answer is None or isinstance(answer, list)):
        return True
    captions = isinstance(answer, list) and answer and all(isinstance(a, str) for a in answer)
    return bool(captions) and question is None


def table_items(
    row: dict[str, Any], default_id: str, base: Path, mapping: Mapping[str, str] | None
) -> list[dict[str, Any]]:
    """The items of one table row (``default_id`` when it has no ``id``/``question_id``; see
    the module docstring).

    Raises:
        RowError: the row is malformed (the field and why).
    """
    if mapping:
        row = apply_mapping(row, mapping)
    row = dict(row)
    if "images" in row:
        row["images"] = image_sources(row["images"], base, "images")
    elif "image" in row:
        row["images"] = image_sources(row.pop("image"), base, "image")
    check_unread_images(row)
    row = table_fields(row)
    if "bbox" in row and isinstance(row.get("answer"), list) and "expression" not in row:
        return _refcoco_items(row, default_id)
    if "captions" not in row and _is_caption_row(row):
        if (problem := text_list_problem(row.get("answer"), "caption")) is not None:
            raise RowError("missing_field", "answer", f"the caption row's captions: {problem}")
        row["captions"] = row.pop("answer")
        row.pop("question", None)
        row.setdefault("task", "caption")
    row["id"] = row_id(row, ID_KEYS, default_id)
    return [row]


ID_KEYS = ("id", "question_id")
"""Where a row's id is, first found first: ours, then lmms-eval's."""


def own_id(row: dict[str, Any], mapping: Mapping[str, str] | None, default: str) -> str:
    """The id ``row`` gives itself, read from the column ``mapping`` takes ``id`` from if it
    does: what names a row that cannot be an item."""
    source = (mapping or {}).get("id")
    return row_id(row, (source,) if source and "," not in source else ID_KEYS, default)


def _missing(value: Any) -> bool:
    """A null, a NaN, or the text ``"nan"`` that a NaN becomes in a table written from text
    (MMBench's TSVs; lmms-eval skips such an option)."""
    if isinstance(value, float) and math.isnan(value):
        return True
    return value is None or value == "nan"


def _no_option(value: Any) -> bool:
    """A missing (:func:`_missing`) or blank option: a fixed option column past the last option."""
    return _missing(value) or (isinstance(value, str) and not value.strip())


def option_texts(value: Any) -> Any:
    """``choices`` as the options they list: a list with the nulls and blanks after its last
    option dropped (as :func:`gathered` and lmms-eval's MMBench skip options past the last), a
    dict keyed ``A``, ``B``, ``C`` ... in letter order; anything else as it is (the task names
    it).

    Raises:
        RowError: ``bad_row`` naming the letters of a null or blank option before one with text,
            or the keys of a dict that are not the letters from ``A`` on.

    >>> option_texts(["cedar", "oak", None, ""]), option_texts({"B": "oak", "A": "cedar"})
    (['cedar', 'oak'], ['cedar', 'oak'])
    """
    if isinstance(value, dict):
        letters = [chr(ord("A") + k) for k in range(len(value))]
        if sorted(map(str, value)) != letters:
            keys = ", ".join(sorted(map(str, value)))
            why = f"is a dict keyed {keys}; key options A, B, C, ... without gaps, or give a list"
            raise RowError("bad_row", "choices", why)
        value = [value[letter] for letter in letters]
    if not isinstance(value, (list, tuple)):
        return value
    empty = [_no_option(v) for v in value]
    end = len(value) - empty[::-1].index(False) if False in empty else 0
    if True in empty[:end]:
        gap = empty.index(True)
        later = chr(ord("A") + empty.index(False, gap))
        why = f"option {chr(ord('A') + gap)} is null or blank before option {later}, which has text"
        raise RowError("bad_row", "choices", why)
    return list(value[:end])


def table_fields(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the fields benchmark exports store as text read as what they are, the same
    from a table or a JSONL line: ``choices`` given as the text of a list (:func:`listed_choices`),
    and its options as :func:`option_texts` reads them.

    Raises:
        RowError: ``bad_row`` when such a field is not what it should hold.
    """
    if "choices" not in row:
        return row
    choices = row["choices"]
    if isinstance(choices, str):
        choices = listed_choices(choices)
    return {**row, "choices": option_texts(choices)}


def _refcoco_items(row: dict[str, Any], default_id: str) -> list[dict[str, Any]]:
    box = xywh_box(row["bbox"], "bbox")
    expressions = strings(row["answer"], "answer")
    if not row.get("images"):
        raise RowError("missing_field", "image", "a RefCOCO row needs its image")
    stem = row_id(row, ("question_id", "id"), default_id)
    kept = {k: row[k] for k in REFCOCO_KEPT if row.get(k) is not None}
    boxes = upright_boxes([box], row["images"][0])
    return [
        {
            "id": f"{stem}-{k}",
            "images": row["images"],
            "expression": expression,
            "boxes": boxes,
            "task": "refcoco",
            **({"split": row["split"]} if row.get("split") else {}),
            **kept,
        }
        for k, expression in enumerate(expressions)
    ]
