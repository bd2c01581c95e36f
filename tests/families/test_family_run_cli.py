"""``vlrollout run`` on a saved tiny model of each family: the sample images (photos of shapes,
several sizes) through the vision, multi-attempt and tool workflows, every episode accepted
(a random model rarely calls a tool: the tool turns themselves are checked per family in
``test_family_tool_turns``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vlrollout import cli
from vlrollout.testing.tiny_families import TINY_FAMILIES, save_tiny_vlm

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "assets" / "samples" / "data.jsonl"


@pytest.fixture(scope="module")
def sample_rows(tmp_path_factory) -> Path:
    """Three sample items (count, ground, caption) with absolute image paths."""
    rows = [json.loads(line) for line in SAMPLES.read_text().splitlines()[:3]]
    for row in rows:
        row["images"] = [str(SAMPLES.parent / p) for p in row["images"]]
    path = tmp_path_factory.mktemp("data") / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("workflow", ["vision", "vision_multi_attempt", "vision_tool"])
def test_run_accepts_every_episode(family, workflow, sample_rows, tmp_path, capsys):
    torch.set_num_threads(1)
    model = save_tiny_vlm(family, tmp_path / "model")
    out = tmp_path / "out"
    flags = ["--data", str(sample_rows), "--output", str(out), "--model", str(model)]
    flags += ["--workflow", workflow, "--reward", "format_think_answer", "--group-size", "2"]
    flags += ["--no-progress", "--concurrency", "2", "--max-new-tokens", "6"]
    code = cli.main(["run", *flags])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0, capsys.readouterr().err
    assert summary["episodes"]["rejected"] == 0, summary["rejections"]
    assert summary["episodes"]["accepted"] == 6
