"""``vlrollout train`` end to end as a user runs it (a subprocess: its own torch.distributed)."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial

import pytest

from tests.train.procs import ROOT, SHIPPED_MODEL, run_side_by_side, run_train, subprocess_env

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


def _refused(tmp_path, *args):
    """``vlrollout train ARGS`` that is expected to stop before training: its exit status and
    the lines it printed to stderr."""
    cmd = [sys.executable, "-m", "vlrollout.cli", "train", *args, f"vlrollout.output={tmp_path}"]
    env = subprocess_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stderr.strip().splitlines()


@pytest.mark.parametrize(
    ("args", "mode"),
    [
        (["--nproc", "2"], "--nproc 2"),
        (["rollout.max_head_offpolicyness=1"], "rollout.max_head_offpolicyness=1"),
    ],
)
def test_the_counting_recipe_names_the_one_override_for_async_or_several_processes(
    tmp_path, args, mode
):
    """Dynamic sampling runs on-policy in one process: the recipe that sets it is refused in one
    line, before torchrun or a model is started, and the line names the one override."""
    status, lines = _refused(tmp_path, "--config", "examples/train_count.yaml", *args)
    assert status == 2, lines
    assert len(lines) == 1, lines
    assert "vlrollout.dynamic_sampling=false" in lines[0] and mode in lines[0]


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
        assert 2**28 < r["memory/rss"] < 2**34  # the trainer's resident bytes: a leak shows
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

    _train(out, "total_train_steps=3", "vlrollout.keep_checkpoints=0")  # resumes after step 2
    kept = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
    assert kept == ["step_1", "step_2", "step_3"]  # the first run kept 2, this one every one
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
    runs = run_side_by_side(
        [
            partial(_train, tmp_path / "plain", *common),
            partial(_train, tmp_path / "scaled", *common, "vlrollout.dynamic_sampling_scale=true"),
        ]
    )
    for run in runs:
        run.result()
    (plain,) = _jsonl(tmp_path / "plain" / "metrics.jsonl")
    (scaled,) = _jsonl(tmp_path / "scaled" / "metrics.jsonl")
    kept = scaled["dynamic/kept"]
    assert plain["dynamic/kept"] == kept and 0 < kept < 4  # the same short batch
    assert scaled["reward_mean"] == plain["reward_mean"]
    assert scaled["dynamic/scale"] == kept / 4 and "dynamic/scale" not in plain
    assert scaled["grad_norm"] == pytest.approx(kept / 4 * plain["grad_norm"], rel=1e-4)
