"""``vlrollout train`` on video items, as a user runs it: the video recipe loads with its frame
settings, and two GRPO steps of the shipped tiny model on video items accept every episode, the
trainer's logprobs agreeing with the rollout's (a video item that ran as text, or lost its tensors
on the way to the trainer, would be rejected or disagree)."""

from __future__ import annotations

import json

import pytest

from tests.train.procs import run_train
from tests.workflows.test_video_workflows import write_clip
from vlrollout.train.config import check_rules, load_config

RECIPE = "examples/train_video.yaml"


def test_the_video_recipe_loads_with_its_frame_settings(tmp_path):
    cfg = load_config(RECIPE, [f"vlrollout.output={tmp_path}"])
    vl = cfg.vlrollout
    assert (vl.video_fps, vl.video_max_frames, vl.video_min_pixels) == (2.0, 8, 3136)
    assert cfg.actor.temperature == cfg.gconfig.temperature
    assert cfg.actor.reward_norm.group_size == cfg.gconfig.n_samples >= 2
    check_rules(cfg, 1)
    with pytest.raises(ValueError, match="vlrollout.video_fps must be a positive number"):
        load_config(RECIPE, [f"vlrollout.output={tmp_path}", "vlrollout.video_fps=0"])


@pytest.mark.slow
def test_two_steps_on_video_items(tmp_path):
    rows = []
    for k, frames in enumerate((4, 6)):
        write_clip(tmp_path / f"clip{k}.mp4", frames=frames)
        rows.append(
            {
                "id": f"clip{k}",
                "messages": "<video>How many shapes appear? Answer with a number.",
                "videos": [f"clip{k}.mp4"],
                "answer": "1",
            }
        )
    data = tmp_path / "videos.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    run_train(
        out,
        "total_train_steps=2",
        "train_dataset.batch_size=2",
        f"train_dataset.path={data}",
        f"valid_dataset.path={data}",
        "gconfig.n_samples=2",
        "vlrollout.reward=count",
        "gconfig.max_new_tokens=4",
        "vlrollout.eval_every=0",
        "vlrollout.log_rollouts=1",
        "vlrollout.progress=false",
        "vlrollout.video_max_frames=4",
        config=RECIPE,
    )
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["n_trajectories"] == 4 and r["rejected"] == 0 for r in steps)
    # On-policy, the update's first forward recomputes the rollout's logprobs: a trainer that
    # lost the video tensors (its placeholders embedded as text) would not agree this closely.
    assert all(abs(r["ppo_approx_kl"]) < 1e-4 for r in steps)
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_2"
