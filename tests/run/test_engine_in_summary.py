"""What ran is on record: ``summary.json`` and the printed summary name the engine, its model's
class, dtype and device, so a run meant for a GPU or for bfloat16 shows at a glance where it ran."""

from __future__ import annotations

import json
from pathlib import Path

from vlrollout.cli import main, run_config_from_flags
from vlrollout.run.main import engine_summary

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny-qwen2vl"


def test_a_run_names_its_engine_model_dtype_and_device(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    first = (REPO / "assets" / "samples" / "data.jsonl").read_text().splitlines()[0]
    data.write_text(first + "\n")
    (tmp_path / "images").symlink_to(REPO / "assets" / "samples" / "images")
    out = tmp_path / "out"
    code = main(
        ["run", "--data", str(data), "--model", str(MODEL), "--output", str(out)]
        + ["--group-size", "1", "--max-new-tokens", "2", "--no-progress"]
    )
    printed = capsys.readouterr().out
    assert code == 0
    engine = json.loads((out / "summary.json").read_text())["engine"]
    assert engine == {
        "kind": "local",
        "model": str(MODEL),
        "class": "Qwen2VLForConditionalGeneration",
        "dtype": "float32",
        "device": "cpu",
    }
    assert '"dtype": "float32"' in printed and '"device": "cpu"' in printed


class _Remote:
    """A remote engine: no model of its own."""


def test_a_remote_engine_is_named_by_its_protocol_and_addresses():
    cfg = run_config_from_flags(
        ["--engine", "sglang", "--address", "10.0.0.5:30000", "--model", str(MODEL)]
    )
    assert engine_summary(cfg, _Remote()) == {
        "kind": "sglang",
        "model": str(MODEL),
        "addresses": ["10.0.0.5:30000"],
    }
