"""A prompt longer than the model's context is rejected, not scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlrollout import cli

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_is_prompt_too_long(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    rows = [
        {"id": "long", "messages": "count " * 2400, "answer": "3", "task": "count"},
        {"id": "short", "messages": "count the shapes", "answer": "3", "task": "count"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    flags = ["--data", str(data), "--output", str(out), "--workflow", "text", "--group-size", "1"]
    flags += ["--model", str(REPO / "assets" / "tiny-qwen2vl"), "--no-progress", "--seed", "1"]
    assert cli.main(["run", *flags]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"]["rejected_by_reason"] == {"prompt_too_long": 1}
    assert [r["id"] for r in summary["rejections"]] == ["long"]
    # The same limit from the command line; it rejects every episode, which fails the run (3).
    assert (
        cli.main(["run", *flags, "--max-prompt-tokens", "3", "--output", str(tmp_path / "o2")]) == 3
    )
    assert "prompt_too_long: 2 (e.g. item " in capsys.readouterr().err
    summary = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert summary["episodes"]["rejected_by_reason"] == {"prompt_too_long": 2}
