"""``vlrollout run --engine sglang|vllm`` end to end on the sample set against ``vlrollout serve``."""

from __future__ import annotations

import json

import pytest
import torch
from areal.infra.workflow_executor import check_trajectory_format

from tests.serve.conftest import ASSET, SAMPLES
from vlrollout.checks import logprob_consistency
from vlrollout.cli import main
from vlrollout.files import item_stem


def _sample_items(tmp_path):
    """The whole sample set (counting, grounding and captioning items), image paths made absolute.

    Returns:
        The data file, and the ids of its items.
    """
    items = [json.loads(line) for line in SAMPLES.read_text().splitlines()]
    for item in items:
        item["images"] = [str(SAMPLES.parent / p) for p in item["images"]]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path, [item["id"] for item in items]


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_run_against_the_served_engine(protocol, sglang_server, vllm_server, tmp_path):
    server, engine = sglang_server if protocol == "sglang" else vllm_server
    data, ids = _sample_items(tmp_path)
    n_items = len(ids)
    # Grounding items travel the HTTP path too: their boxes are scored and drawn in the report.
    assert any(i.startswith("ground-") for i in ids)
    out = tmp_path / "run"
    argv = ["run", "--engine", protocol, "--address", server.address, "--model", str(ASSET)]
    argv += ["--data", str(data), "--output", str(out), "--group-size", "2", "--no-progress"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    # Summary keys may move with the run CLI's rework; the files on disk are the contract.
    assert summary["episodes"]["accepted"] == 2 * n_items, summary["rejections"]
    files = sorted((out / "trajectories").glob("*.pt"))
    assert sorted(f.name for f in files) == sorted(f"{item_stem(i)}.pt" for i in ids)
    assert (out / "report.html").is_file()
    episodes = 0
    for f in files:
        traj = torch.load(f, weights_only=False)
        assert check_trajectory_format(traj)
        for row in range(traj["input_ids"].shape[0]):
            report = logprob_consistency(engine.model, traj, 1.0, row)
            assert report.ok(atol=1e-4), (f.name, row, report)
            episodes += 1
    assert episodes == 2 * n_items


def test_a_run_at_another_image_budget_than_the_server_is_refused_at_the_start(tmp_path, capsys):
    """The served budget differs from the run's: exit 2 with both sizes and the flags, before
    any episode; the same budget on both sides runs."""
    from tests.serve.conftest import serving

    data, _ = _sample_items(tmp_path)
    budget = 28 * 28 * 32
    with serving("sglang", max_pixels=budget) as (server, _):
        argv = ["run", "--engine", "sglang", "--address", server.address, "--model", str(ASSET)]
        argv += ["--data", str(data), "--limit", "2", "--group-size", "1", "--no-progress"]
        assert main([*argv, "--output", str(tmp_path / "a")]) == 2
        err = capsys.readouterr().err
        assert "resizes images to size {'shortest_edge': 3136, 'longest_edge': 25088}" in err
        assert "this run to {'shortest_edge': 3136, 'longest_edge': 12544}" in err, err
        assert not (tmp_path / "a" / "trajectories").exists()
        out = tmp_path / "b"
        assert main([*argv, "--max-pixels", str(budget), "--output", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"]["accepted"] == 2, summary["rejections"]


def test_a_served_run_refuses_prompts_too_long_for_the_models_context(sglang_server, tmp_path):
    """Without --max-prompt-tokens a run on servers holds prompts to the served model's context
    less the completion, as a local run does: a prompt of 40 images is ``prompt_too_long``, not
    an engine error after the server refused it three times."""
    from PIL import Image

    server, _ = sglang_server
    Image.new("RGB", (120, 120), (200, 30, 30)).save(tmp_path / "red.png")
    item = {"id": "long", "messages": "<image>" * 40 + "How many?", "answer": "1"}
    item["images"] = [str(tmp_path / "red.png")] * 40
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps(item) + "\n")
    out = tmp_path / "run"
    argv = ["run", "--engine", "sglang", "--address", server.address, "--model", str(ASSET)]
    argv += ["--data", str(data), "--output", str(out), "--group-size", "2", "--no-progress"]
    argv += ["--reward", "count"]
    main(argv)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"]["rejected_by_reason"] == {"prompt_too_long": 2}, summary
