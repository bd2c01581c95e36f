"""``images_root`` (``--images-root``) is where relative image paths of any format are looked up,
JSONL items and table rows included, and a folder that does not exist is refused."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vlrollout.readers import read_items
from vlrollout.readers.sources import DataFileError


@pytest.fixture
def layout(tmp_path):
    """``data/`` holds the data files, ``pics/`` the images they name by relative path."""
    (tmp_path / "data").mkdir()
    (tmp_path / "pics").mkdir()
    Image.new("RGB", (20, 10), "red").save(tmp_path / "pics" / "a.png")
    item = {"id": "a", "images": ["a.png"], "question": "How many?", "answer": 1}
    (tmp_path / "data" / "items.jsonl").write_text(json.dumps(item) + "\n")
    table = pa.table(
        {
            "id": ["a"],
            "image": [{"bytes": None, "path": "a.png"}],
            "question": ["How many?"],
            "answer": [1],
        }
    )
    pq.write_table(table, tmp_path / "data" / "rows.parquet")
    return tmp_path


@pytest.mark.parametrize("name", ["items.jsonl", "rows.parquet"])
def test_relative_images_are_found_under_images_root(layout, name):
    items = read_items(layout / "data" / name, images_root=layout / "pics")
    assert "_load_error" not in items[0], items[0]
    assert items[0]["images"] == [str(layout / "pics" / "a.png")]


def test_an_images_root_that_does_not_exist_is_refused(layout):
    with pytest.raises(DataFileError, match=r"images_root \(--images-root\).*nope.*not a folder"):
        read_items(layout / "data" / "items.jsonl", images_root=layout / "nope")
