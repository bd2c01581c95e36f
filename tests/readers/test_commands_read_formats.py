"""``vlrollout run`` and ``vlrollout validate-data`` read the downloaded formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.readers.conftest import save_image, write_json
from vlrollout import cli

REPO = Path(__file__).resolve().parents[2]


def _captions(tmp_path):
    for k in (1, 2):
        save_image(tmp_path / "val2017" / f"{k}.jpg", (56, 56))
    images = [{"id": k, "file_name": f"{k}.jpg"} for k in (1, 2)]
    anns = [{"id": 10 + k, "image_id": k, "caption": f"a red square {k}"} for k in (1, 2)]
    return write_json(
        tmp_path / "annotations" / "captions_val2017.json", {"images": images, "annotations": anns}
    )


@pytest.mark.slow
def test_run_reads_coco_captions(tmp_path):
    out = tmp_path / "out"
    flags = ["--data", str(_captions(tmp_path)), "--output", str(out), "--group-size", "1"]
    flags += ["--model", str(REPO / "assets" / "tiny-qwen2vl"), "--no-progress", "--seed", "1"]
    flags += ["--max-new-tokens", "4", "--reward", "tiny_task"]
    assert cli.main(["run", *flags]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items"]["total"] == 2 and summary["episodes"]["accepted"] == 2


def test_validate_data_reads_mapped_llava_rows(tmp_path, capsys):
    save_image(tmp_path / "a.jpg", (8, 8))
    rows = [
        {"id": "1", "picture": "a.jpg", "conversations": [{"from": "human", "value": "<image>?"}]},
        {
            "id": "2",
            "picture": "gone.jpg",
            "conversations": [{"from": "human", "value": "<image>"}],
        },
    ]
    path = write_json(tmp_path / "d.json", rows)
    assert (
        cli.main(["validate-data", str(path), "--format", "llava", "--map", "image=picture"]) == 1
    )
    out = capsys.readouterr().out
    assert f"{path}:item 2 (id 2): image_not_found: {path} row 2: field image: " in out
    assert f"{path}: 2 items, 1 with problems" in out


def test_run_flags_and_yaml_reach_the_config(tmp_path):
    cfg = cli.run_config_from_flags(
        [
            "--map",
            "question=problem",
            "answer=solution",
            "--format",
            "parquet",
            "--prompt",
            "{question}",
        ]
    )
    assert cfg.data_map == {"question": "problem", "answer": "solution"}
    assert (cfg.data_format, cfg.prompt) == ("parquet", "{question}")
    yaml = tmp_path / "c.yaml"
    yaml.write_text("data_map: {images: pics}\nimages_root: /data/coco\n")
    cfg = cli.run_config_from_flags(["--config", str(yaml)])
    assert cfg.data_map == {"images": "pics"} and cfg.images_root == "/data/coco"


def test_validate_data_opens_the_images_of_every_format(tmp_path, capsys):
    """A parquet row's undecodable bytes, and a file a JSONL row names that is not there, are
    found by validate-data as by run, whatever the format or flags."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.readers.conftest import png

    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "id": ["good", "garbage"],
            "question": ["?", "?"],
            "image": pa.array(
                [{"bytes": png((8, 8)), "path": None}, {"bytes": b"not an image", "path": None}],
                type=image,
            ),
            "answer": ["a", "b"],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    assert cli.main(["validate-data", str(tmp_path / "t.parquet"), "--prompt", "{question}"]) == 1
    out = capsys.readouterr().out
    assert "garbage" in out and "image_decode" in out and "(id good)" not in out
    save_image(tmp_path / "a.jpg", (8, 8))
    lines = [
        {"id": "here", "images": ["a.jpg"], "question": "?"},
        {"id": "gone", "images": ["missing.jpg"], "question": "?"},
    ]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in lines))
    assert cli.main(["validate-data", str(tmp_path / "d.jsonl"), "--prompt", "{question}"]) == 1
    out = capsys.readouterr().out
    assert "(id gone)" in out and "image_not_found" in out and "(id here)" not in out


def test_validate_data_format_flag_is_used_before_the_layout_is_guessed(tmp_path, capsys):
    rows = [{"id": "1", "images": ["a.jpg"], "messages": [{"role": "user", "content": "?"}]}]
    path = write_json(tmp_path / "rows.json", rows)
    assert cli.main(["validate-data", str(path), "--format", "llava"]) == 1
    captured = capsys.readouterr()
    assert "no known layout" not in captured.err
    assert "missing_field" in captured.out and "conversations" in captured.out
