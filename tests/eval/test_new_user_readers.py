"""A new user's data, read the way `vlrollout eval` and `vlrollout run` read it: relative
`--data` paths (the usual way to type them), image files next to the data file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import datasets
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


def test_a_dataset_dict_whose_splits_reuse_question_ids_keeps_every_split(tmp_path):
    """Published sets number `question_id` per split (val 0, 1, ...; test 0, 1, ...). Read as one
    `DatasetDict`, the second split's rows must not all become `duplicate_id` rejections: every row
    is an item, ids unique, each with its split."""
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "question_id": datasets.Value("int64"),
            "question": datasets.Value("string"),
            "answer": datasets.Value("string"),
        }
    )

    def split(n: int) -> datasets.Dataset:
        columns = {"image": [Image.new("RGB", (8, 8))] * n, "question_id": list(range(n))}
        columns |= {"question": ["How many?"] * n, "answer": ["1"] * n}
        return datasets.Dataset.from_dict(columns, features=features)

    datasets.DatasetDict({"val": split(2), "test": split(2)}).save_to_disk(str(tmp_path / "dd"))
    items = load_items(tmp_path / "dd", prompt="{question}")
    assert [i.get(LOAD_ERROR) for i in items] == [None] * 4
    assert len({i["id"] for i in items}) == 4
    assert sorted(i["split"] for i in items) == ["test", "test", "val", "val"]


def test_a_llava_row_with_an_image_and_no_image_placeholder_is_named_by_file_and_row(tmp_path):
    """A LLaVA row with `image` but no `<image>` in its turns: either the reader names it (file,
    row, field) or it places the image; today it passes as an item and is rejected later as a
    `placeholder_mismatch` whose detail names neither the file nor the row."""
    _image(tmp_path / "a.jpg")
    rows = [
        {
            "id": "ok",
            "image": "a.jpg",
            "conversations": [{"from": "human", "value": "<image>\nColour?"}],
        },
        {
            "id": "bare",
            "image": "a.jpg",
            "conversations": [
                {"from": "human", "value": "What colour is it?"},
                {"from": "gpt", "value": "red"},
            ],
        },
    ]
    (tmp_path / "llava.json").write_text(json.dumps(rows))
    bare = load_items(tmp_path / "llava.json")[1]
    if LOAD_ERROR in bare:
        assert "llava.json row 2" in bare[LOAD_ERROR]["detail"]
        assert "conversations" in bare[LOAD_ERROR]["detail"]
    else:
        assert "<image>" in json.dumps(bare["messages"]) or '"image"' in json.dumps(
            bare["messages"]
        )


def test_a_question_that_places_its_image_with_a_marker_gets_one_placeholder(tmp_path):
    """EasyR1-style RL rows (geometry3k and most VLM RL sets): `problem` = "<image>Find x." with
    one image. With `--map question=problem --prompt '{question}'` the model must see the image
    once, where the marker is; today it gets an image part AND the literal text "<image>"."""
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="PNG")
    row = {"images": [{"bytes": buf.getvalue(), "path": None}], "problem": "<image>Find x."}
    pq.write_table(pa.Table.from_pylist([{**row, "answer": "3"}]), tmp_path / "geo.parquet")
    (item,) = load_items(
        tmp_path / "geo.parquet", mapping={"question": "problem"}, prompt="{question}"
    )
    assert LOAD_ERROR not in item
    content = item["messages"][0]["content"]
    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
    image_parts = sum(1 for p in parts if isinstance(p, dict) and p.get("type") == "image")
    markers = sum(p.get("text", "").count("<image>") for p in parts if isinstance(p, dict))
    assert image_parts + markers == 1
