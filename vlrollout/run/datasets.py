"""Reading data items from JSONL or parquet, with image paths resolved against the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class DataFileError(ValueError):
    """The data file itself is unreadable (not one bad item: those are rejected one by one)."""


def _resolve_images(item: dict[str, Any], base: Path) -> dict[str, Any]:
    images = item.get("images")
    if not isinstance(images, list):
        return item
    resolved = []
    for image in images:
        # Relative paths are relative to the data file; data URLs, base64 and bytes pass through.
        if isinstance(image, str) and not image.startswith("data:") and len(image) < 4096:
            candidate = base / image
            resolved.append(str(candidate) if not Path(image).is_absolute() else image)
        else:
            resolved.append(image)
    return {**item, "images": resolved}


def load_items(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Load data items; every item gets an ``id`` (its own, else its line number).

    Args:
        path: A ``.jsonl`` or ``.parquet`` file.
        limit: Only the first ``limit`` items.

    Raises:
        DataFileError: the file is missing, has an unknown extension or a line that is not JSON.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"data file {path} does not exist")
    if path.suffix == ".jsonl":
        items = []
        with path.open() as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataFileError(f"{path}:{lineno}: not valid JSON ({e})") from e
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        items = pq.read_table(path).to_pylist()
    else:
        raise DataFileError(f"{path}: expected a .jsonl or .parquet file")
    out = []
    for index, item in enumerate(items[:limit] if limit is not None else items):
        if not isinstance(item, dict):
            raise DataFileError(f"{path}: item {index} is a {type(item).__name__}, not an object")
        item = {"id": str(index), **item}
        item["id"] = str(item["id"])
        out.append(_resolve_images(item, path.parent))
    ids = [item["id"] for item in out]
    if len(set(ids)) != len(ids):
        raise DataFileError(f"{path}: item ids are not unique; resuming a run needs unique ids")
    return out
