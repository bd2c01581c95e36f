"""A new user's data, read the way `vlrollout eval` and `vlrollout run` read it: relative
`--data` paths (the usual way to type them), image files next to the data file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from vlrollout.datasets import LOAD_ERROR, load_items


def _image(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (20, 10), "red").save(path)


def test_jsonl_images_resolve_once_with_a_relative_data_path_and_a_prompt(tmp_path, monkeypatch):
    """`vlrollout eval --data d/items.jsonl` (the task's prompt applied): an image named
    `a.png` beside the file is `d/a.png`, not `d/d/a.png`."""
    _image(tmp_path / "d" / "a.png")
    row = {"id": "r", "images": ["a.png"], "expression": "the red", "boxes": [[0, 0, 5, 5]]}
    (tmp_path / "d" / "items.jsonl").write_text(json.dumps(row) + "\n")
    monkeypatch.chdir(tmp_path)
    (item,) = load_items("d/items.jsonl", prompt="{expression}")
    assert LOAD_ERROR not in item
    assert Path(item["images"][0]).resolve() == (tmp_path / "d" / "a.png").resolve()


def test_parquet_image_path_struct_resolves_once_with_a_relative_data_path(tmp_path, monkeypatch):
    """A `{"bytes": None, "path": "x.png"}` image struct is relative to the parquet's folder."""
    _image(tmp_path / "d" / "x.png")
    rows = [{"image": {"bytes": None, "path": "x.png"}, "question": "how many?", "answer": "2"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d" / "t.parquet")
    monkeypatch.chdir(tmp_path)
    (item,) = load_items("d/t.parquet")
    assert Path(item["images"][0]).resolve() == (tmp_path / "d" / "x.png").resolve()
