"""``vlrollout train`` end to end as a user runs it (a subprocess: its own torch.distributed)."""

from __future__ import annotations

import json

import pytest

from tests.train.procs import run_train

SMALL = [
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
