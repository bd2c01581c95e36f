"""``vlrollout.min_pixels``/``max_pixels``: each image's pixel budget in training, as
``vlrollout run --min-pixels/--max-pixels``, for the training workflow and the held-out ones."""

from __future__ import annotations

from transformers import AutoProcessor

from vlrollout.train.config import load_config
from vlrollout.train.session import build_workflows


def zero(prompt, completions, prompt_ids, completion_ids, **task_data) -> float:
    return 0.0


def test_the_image_budget_reaches_every_workflow(tmp_path):
    overrides = [f"vlrollout.output={tmp_path}", "+vlrollout.min_pixels=4000"]
    cfg = load_config("examples/train_grounding.yaml", [*overrides, "+vlrollout.max_pixels=25088"])
    processor = AutoProcessor.from_pretrained(cfg.actor.path, local_files_only=True)
    workflow, held_out = build_workflows(cfg, processor, zero, zero, None, [])
    for wf in (workflow, held_out.greedy, held_out.sampled):
        images_kwargs = wf.ctx.preprocessor.processor_kwargs["images_kwargs"]
        assert images_kwargs["size"] == {"shortest_edge": 4000, "longest_edge": 25088}


def test_a_run_on_servers_at_another_image_budget_is_refused_at_the_start(
    tmp_path, monkeypatch, capsys
):
    from tests.serve.conftest import serving
    from vlrollout.cli import main
    from vlrollout.engine import LocalInferenceEngine

    def never(cfg):
        raise AssertionError("a budget mismatch must be refused before training starts")

    monkeypatch.setattr("vlrollout.train.loop.train", never)
    cfg = load_config("examples/train_grounding.yaml", [f"vlrollout.output={tmp_path}"])
    engine = LocalInferenceEngine.from_pretrained(cfg.actor.path).initialize()
    with serving("sglang", engine, max_pixels=28 * 28 * 32) as (server, _):
        argv = ["train", "--config", "examples/train_grounding.yaml"]
        argv += [f"vlrollout.output={tmp_path}", "vlrollout.engine.kind=sglang"]
        argv += [f"vlrollout.engine.addresses=[{server.address}]"]
        assert main(argv) == 2
    engine.destroy()
    err = capsys.readouterr().err
    assert f"the server at {server.address} resizes images to size" in err, err
    assert "vlrollout.min_pixels/max_pixels" in err
