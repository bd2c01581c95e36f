"""``vlrollout train`` end to end as a user runs it (a subprocess: its own torch.distributed)."""

from __future__ import annotations

import json

import pytest

from tests.train.procs import SHIPPED_MODEL, run_train

SMALL = [
    SHIPPED_MODEL,
    "total_train_steps=2",
    "train_dataset.batch_size=2",
    "gconfig.n_samples=2",
    "gconfig.max_new_tokens=8",
    "vlrollout.train_items=8",
    "vlrollout.eval_items=4",
    "vlrollout.eval_every=1",
    "vlrollout.save_every=1",
    "vlrollout.progress=false",
]


def _train(out, *extra):
    return run_train(out, *SMALL, *extra)


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_train_writes_checkpoints_metrics_report_and_resumes(tmp_path):
    out = tmp_path / "run"
    proc = _train(out)
    assert "attn_impl" not in proc.stderr or "sdpa" in proc.stderr
    assert "torch.compile off" in proc.stderr and "packing fix installed" in proc.stderr
    steps = _jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert r["n_trajectories"] == 4 and r["time/step"] > 0
        for key in (
            "reward_mean",
            "reward_std",
            "frac_all_equal_groups",
            "ppo_approx_kl",
            "entropy",
            "clip_ratio",
            "tokens_per_s",
        ):
            assert r[key] is not None, key
    assert [r["step"] for r in _jsonl(out / "eval.jsonl")] == [0, 1, 2]
    # vlrollout.log_rollouts (4) held-out rollouts shown per evaluation
    assert [r["step"] for r in _jsonl(out / "eval_rollouts.jsonl")] == [0] * 4 + [1] * 4 + [2] * 4
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_2"
    assert list((out / "checkpoints" / "step_2").glob("*.safetensors"))
    report = (out / "report.html").read_text()
    assert report.count("<svg") >= 2 and "held-out" in report

    _train(out, "total_train_steps=3")  # resumes after step 2
    assert [r["step"] for r in _jsonl(out / "metrics.jsonl")] == [1, 2, 3]
    assert [r["step"] for r in _jsonl(out / "eval.jsonl")] == [0, 1, 2, 3]
    assert [r["step"] for r in _jsonl(out / "eval_rollouts.jsonl")] == sorted([0, 1, 2, 3] * 4)
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_3"


@pytest.mark.slow
def test_dynamic_sampling_trains_only_on_groups_with_spread(tmp_path):
    """Counting at T = 1 leaves many groups of 4 all-equal; with dynamic sampling the step's
    batch holds only groups whose rewards differ, topped up from further items."""
    out = tmp_path / "run"
    _train(
        out,
        "vlrollout.task=count",
        "gconfig.temperature=1.0",
        "gconfig.n_samples=4",
        "vlrollout.eval_every=0",
        "vlrollout.log_rollouts=0",
        "vlrollout.engine.deterministic=true",
        "vlrollout.dynamic_sampling=true",
        "vlrollout.dynamic_sampling_rounds=4",
    )
    steps = _jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in steps] == [1, 2]
    assert sum(r["dynamic/dropped"] for r in steps) > 0  # the filter had something to drop
    for r in steps:
        assert 1 <= r["dynamic/rounds"] <= 4 and r["dynamic/items"] >= 2
        if r["dynamic/kept"]:
            assert r["frac_all_equal_groups"] == 0.0
            assert r["n_trajectories"] == 4 * r["dynamic/kept"]


@pytest.mark.slow
def test_dynamic_sampling_scale_makes_a_short_steps_update_the_share_kept(tmp_path):
    """The same first step (deterministic rollouts from the same weights) with and without
    ``vlrollout.dynamic_sampling_scale``: one round leaves the batch short, and the scaled step's
    gradient is the plain step's times the share of groups kept."""
    common = (
        "actor.path=assets/tiny-qwen3vl-count",  # counts 0.78: groups with and without spread
        "vlrollout.task=count",
        "gconfig.temperature=1.0",
        "gconfig.n_samples=4",
        "train_dataset.batch_size=4",
        "total_train_steps=1",
        "vlrollout.eval_every=0",
        "vlrollout.log_rollouts=0",
        "vlrollout.engine.deterministic=true",
        "vlrollout.dynamic_sampling=true",
        "vlrollout.dynamic_sampling_rounds=1",
    )
    _train(tmp_path / "plain", *common)
    _train(tmp_path / "scaled", *common, "vlrollout.dynamic_sampling_scale=true")
    (plain,) = _jsonl(tmp_path / "plain" / "metrics.jsonl")
    (scaled,) = _jsonl(tmp_path / "scaled" / "metrics.jsonl")
    kept = scaled["dynamic/kept"]
    assert plain["dynamic/kept"] == kept and 0 < kept < 4  # the same short batch
    assert scaled["reward_mean"] == plain["reward_mean"]
    assert scaled["dynamic/scale"] == kept / 4 and "dynamic/scale" not in plain
    assert scaled["grad_norm"] == pytest.approx(kept / 4 * plain["grad_norm"], rel=1e-4)


@pytest.mark.slow
def test_train_groups_trains_the_widest_groups_of_a_larger_rollout(tmp_path):
    """Four items rolled out per step, the two groups whose GIoU rewards spread widest trained:
    the step's batch holds two groups and the sampled reward counts all four."""
    out = tmp_path / "run"
    _train(
        out,
        "train_dataset.batch_size=4",
        "gconfig.n_samples=4",
        "vlrollout.eval_every=0",
        "vlrollout.log_rollouts=0",
        "actor.path=assets/tiny-qwen3vl-ground",  # localises: groups of different spreads
        "gconfig.max_new_tokens=24",
        "vlrollout.train_groups=2",
    )
    steps = _jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert r["n_trajectories"] == 2 * 4  # two groups of four trained
        assert r["dynamic/items"] == 4 and r["dynamic/rounds"] == 1
        assert r["dynamic/kept"] + r["dynamic/surplus"] + r["dynamic/dropped"] <= 4
    assert any(r["reward_mean"] != r["dynamic/reward_mean_all"] for r in steps)
