"""`vlrollout run --data` on the downloaded formats: a row the reader could not read is rejected
under the reader's reason, with its file, row and field."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from vlrollout import cli

REPO = Path(__file__).resolve().parents[2]


def test_run_rejects_a_coco_image_that_is_not_found_under_its_own_reason(tmp_path):
    """COCO captions JSON naming an image no folder holds: the run rejects that item as
    `image_not_found` with the reader's detail (file, row, field), not as an item without messages."""
    (tmp_path / "val2017").mkdir()
    for k in (1, 3):  # 2.jpg does not exist
        Image.new("RGB", (56, 56), "red").save(tmp_path / "val2017" / f"{k}.jpg")
    images = [{"id": k, "file_name": f"{k}.jpg"} for k in (1, 2, 3)]
    anns = [{"id": 10 + k, "image_id": k, "caption": f"a red square {k}"} for k in (1, 2, 3)]
    data = tmp_path / "annotations" / "captions_val2017.json"
    data.parent.mkdir()
    data.write_text(json.dumps({"images": images, "annotations": anns}))
    out = tmp_path / "out"
    flags = ["--data", str(data), "--output", str(out), "--group-size", "1", "--no-progress"]
    flags += ["--model", str(REPO / "assets" / "tiny-qwen2vl"), "--max-new-tokens", "2"]
    cli.main(["run", *flags, "--reward", "tiny_task"])
    summary = json.loads((out / "summary.json").read_text())
    (rejection,) = [r for r in summary["rejections"] if r["id"] == "2"]
    assert rejection["reason"] == "image_not_found"
    assert "captions_val2017.json images row 2: field file_name" in rejection["detail"]


def test_run_on_refcoco_rows_without_a_reward_for_them_names_the_fix(tmp_path, capsys):
    """An lmms-lab/RefCOCO parquet row reads as `task: refcoco`; the default reward (the tiny
    model's `tiny_task`) has none for it. Whether the run stops or rejects the items, the message
    says to pass `--reward` (e.g. `iou`), not only that the task is unknown."""
    buf = io.BytesIO()
    Image.new("RGB", (56, 56), "red").save(buf, format="PNG")
    row = {"question_id": "7", "image": {"bytes": buf.getvalue(), "path": "a.jpg"}, "question": "q"}
    row |= {"answer": ["the red square"], "bbox": [1.0, 2.0, 30.0, 20.0], "file_name": "a.jpg"}
    data = tmp_path / "val-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist([row]), data)
    out = tmp_path / "out"
    flags = ["--data", str(data), "--output", str(out), "--group-size", "1", "--no-progress"]
    flags += ["--model", str(REPO / "assets" / "tiny-qwen2vl"), "--max-new-tokens", "2"]
    cli.main(["run", *flags])
    said = capsys.readouterr().err
    if (out / "summary.json").exists():
        said += json.dumps(json.loads((out / "summary.json").read_text())["rejections"])
    assert "refcoco" in said and "--reward" in said


def test_validate_data_on_rows_without_messages_names_the_prompt_flag(tmp_path, capsys):
    """Question/answer rows (no messages, no implied task; a JSONL, as a save_to_disk folder): each is
    reported `bad_message: item has no 'messages'`, which does not say that `--prompt
    '{question}'` (or `vlrollout eval`'s task template) makes them items."""
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    row = {"id": "q1", "images": [str(tmp_path / "a.png")], "question": "How many?", "answer": "1"}
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(row) + "\n")
    assert cli.main(["validate-data", str(data)]) == 1
    assert "--prompt" in capsys.readouterr().out


def test_validate_data_on_llava_rows_in_a_jsonl_points_at_format_llava(tmp_path, capsys):
    """LLaVA rows (`image` + `conversations`) saved as .jsonl are read as our items without
    `--format llava`; the hint then proposes `--prompt '{image}'`. Either the rows are detected
    as LLaVA (exit 0) or the message says `--format llava`."""
    Image.new("RGB", (8, 8)).save(tmp_path / "a.jpg")
    row = {"id": "1", "image": "a.jpg"}
    row["conversations"] = [
        {"from": "human", "value": "<image>\nColour?"},
        {"from": "gpt", "value": "black"},
    ]
    data = tmp_path / "llava.jsonl"
    data.write_text(json.dumps(row) + "\n")
    rc = cli.main(["validate-data", str(data)])
    assert rc == 0 or "--format llava" in capsys.readouterr().out
