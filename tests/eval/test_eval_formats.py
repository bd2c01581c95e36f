"""``vlrollout eval`` on a small dataset in each downloaded format, made here: a parquet with image
bytes (lmms-lab RefCOCO layout), a ``save_to_disk`` DatasetDict (COCO-Caption layout), COCO
captions JSON with its image folder, RefCOCO refs with instances.json, LLaVA conversation JSON.
Each holds one malformed row: it is counted under the reader's reason with its file and row, the
other items are scored, and the run ends normally."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.readers.conftest import png, save_image, write_json
from vlrollout.cli import main
from vlrollout.datasets import LOAD_ERROR, load_items
from vlrollout.eval.tasks import get_task

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-qwen2vl"
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def refcoco_parquet(tmp: Path) -> Path:
    path = tmp / "val-00000-of-00001.parquet"
    columns = {
        "question_id": ["a", "b", "c"],
        "image": [{"bytes": png((40, 30)), "path": None}] * 3,
        "answer": [["the red box"], ["the box"], ["nothing"]],
        "bbox": [[2.0, 3.0, 10.0, 5.0], [0.0, 0.0, 20.0, 20.0], [0.0, 0.0, 0.0, 4.0]],
    }
    types = {"image": IMAGE}
    pq.write_table(pa.table({k: pa.array(v, type=types.get(k)) for k, v in columns.items()}), path)
    return path


def caption_dataset_dict(tmp: Path) -> Path:
    features = datasets.Features(
        {"image": datasets.Image(), "answer": datasets.Sequence(datasets.Value("string"))}
    )
    good = {"bytes": png((12, 9)), "path": None}
    val = {"image": [good, None], "answer": [["a red square", "red"], ["a square"]]}
    test = {"image": [good], "answer": [["a red picture"]]}
    splits = {
        name: datasets.Dataset.from_dict(rows, features=features)
        for name, rows in (("val", val), ("test", test))
    }
    datasets.DatasetDict(splits).save_to_disk(str(tmp / "coco_caption"))
    return tmp / "coco_caption"


def coco_captions(tmp: Path) -> Path:
    save_image(tmp / "val2017" / "1.jpg", (40, 30))
    save_image(tmp / "val2017" / "2.jpg", (20, 10))
    images = [{"id": i, "file_name": f"{i}.jpg"} for i in (1, 2)]
    images.append({"id": 3, "file_name": "missing.jpg"})
    anns = [{"id": 10 + i, "image_id": i, "caption": f"a red box number {i}"} for i in (1, 2, 3)]
    return write_json(
        tmp / "annotations" / "captions_val2017.json", {"images": images, "annotations": anns}
    )


def refcoco_refs(tmp: Path) -> Path:
    save_image(tmp / "train2014" / "COCO_train2014_000000000009.jpg", (50, 40))
    write_json(
        tmp / "refcoco" / "instances.json",
        {
            "images": [{"id": 9, "file_name": "COCO_train2014_000000000009.jpg"}],
            "annotations": [
                {"id": 100, "image_id": 9, "bbox": [5, 6, 20, 10], "category_id": 1},
                {"id": 101, "image_id": 9, "bbox": [0, 0, 3, 0], "category_id": 1},
            ],
            "categories": [{"id": 1, "name": "person"}],
        },
    )
    refs = [
        {"ref_id": 0, "ann_id": 100, "image_id": 9, "split": "testA",
         "sentences": [{"sent": "man on left"}, {"sent": "guy"}]},
        {"ref_id": 1, "ann_id": 101, "image_id": 9, "split": "val", "sentences": [{"sent": "x"}]},
    ]  # fmt: skip
    return write_json(tmp / "refcoco" / "refs.json", refs)


def llava(tmp: Path) -> Path:
    save_image(tmp / "images" / "a.jpg", (12, 9))
    turns = [
        {"from": "human", "value": "<image>\nWhat colour is it?"},
        {"from": "gpt", "value": "Red"},
    ]
    rows = [
        {"id": "r1", "image": "a.jpg", "conversations": turns},
        {"id": "r2", "image": "a.jpg", "conversations": turns},
        {"id": "r3", "image": "a.jpg", "conversations": []},
    ]
    return write_json(tmp / "llava.json", rows)


@pytest.mark.parametrize(
    "build, task, scored",
    [
        (refcoco_parquet, "refcoco", 2),
        (caption_dataset_dict, "caption", 2),
        (coco_captions, "caption", 2),
        (refcoco_refs, "refcoco", 2),
        (llava, "vqa", 2),
    ],
    ids=["parquet", "save_to_disk", "coco_captions", "refcoco_refs", "llava"],
)
def test_each_format_is_evaluated_with_its_malformed_row_named_and_skipped(
    tmp_path, build, task, scored
):
    data = build(tmp_path)
    placeholders = [i for i in load_items(data) if LOAD_ERROR in i]
    assert len(placeholders) == 1, placeholders
    out = tmp_path / "out"
    argv = ["eval", "--data", str(data), "--task", task, "--model", str(TINY), "--output", str(out)]
    assert main([*argv, "--max-new-tokens", "6", "--bootstrap", "0", "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["items"] == scored
    reason = placeholders[0][LOAD_ERROR]["reason"]
    assert results["rejected"] == {reason: 1}
    (rejection,) = results["rejections"]
    assert str(data) in rejection["detail"] and "row" in rejection["detail"]
    assert get_task(task).primary in results["metrics"]
