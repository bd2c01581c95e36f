"""``bench/bench_offpolicy_learning.py``'s arms and verdict, on fabricated runs (the benchmark
itself trains for minutes per run)."""

from __future__ import annotations

import doctest
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import bench_offpolicy_learning as bench  # noqa: E402
import record  # noqa: E402
from bench_learning import RunResult  # noqa: E402


def test_docstring_examples_of_the_script_and_of_the_tables_it_prints():
    assert doctest.testmod(bench).failed == 0
    assert doctest.testmod(record).failed == 0


def test_the_asynchronous_arm_sets_what_areal_needs_and_k0_is_the_recipe():
    assert bench.Arm(0).overrides(2e-4) == []
    k1 = bench.Arm(1).overrides(2e-4)
    assert "rollout.max_head_offpolicyness=1" in k1
    assert {"actor.use_decoupled_loss=true", "actor.recompute_logprob=true"} <= set(k1)
    assert not any(key.startswith("actor.optimizer.lr") for key in k1)


def test_the_behave_clip_arm_takes_ppo_s_ratio_against_the_sampling_policy():
    keys = bench.Arm(1, behave_clip=True).overrides(2e-4)
    assert "rollout.max_head_offpolicyness=1" in keys
    assert {"actor.use_decoupled_loss=false", "actor.recompute_logprob=false"} <= set(keys)
    names = [a.name for a in bench.arms([1], scaled_lr=False, behave_clip=True)]
    assert names == ["k0", "k1", "k1-clip"]


def test_the_scaled_arm_divides_the_recipe_rate_by_k_plus_one():
    k2 = bench.Arm(2, scaled_lr=True).overrides(3e-4)
    assert "actor.optimizer.lr=0.0001" in k2 and "rollout.max_head_offpolicyness=2" in k2
    assert [a.name for a in bench.arms([0, 2], scaled_lr=False)] == ["k0", "k2"]
    assert [a.name for a in bench.arms([2], scaled_lr=True)] == ["k0", "k2", "k2-lr/3"]


def test_the_recipe_rate_is_the_one_the_run_trains_with():
    from vlrollout.train.config import load_config

    assert load_config(bench.RECIPES["counting"]).actor.optimizer.lr == 2e-4


def test_the_verdict_compares_the_last_common_step_against_the_larger_seed_sd():
    on = bench.per_step(
        [RunResult("k0", s, {0: 0.8, 8: v}, {}, 1.0) for s, v in ((1, 0.90), (2, 0.86))]
    )
    late = bench.per_step(
        [RunResult("k1", s, {0: 0.8, 8: v, 16: 0.99}, {}, 1.0) for s, v in ((1, 0.80), (2, 0.81))]
    )
    verdict = bench.verdict(on, late)
    assert verdict.startswith("gap -0.075") and verdict.endswith("outside the spread")
    close = bench.per_step([RunResult("k1", 1, {8: 0.87}, {}, 1.0)])
    assert bench.verdict(on, close).endswith("within the spread")


def test_an_arm_whose_seeds_scatter_is_not_within_k0_s_spread():
    on = bench.per_step([RunResult("k0", s, {8: v}, {}, 1.0) for s, v in ((1, 0.97), (2, 0.99))])
    scattered = bench.per_step(
        [RunResult("k1", s, {8: v}, {}, 1.0) for s, v in ((1, 0.60), (2, 0.98), (3, 0.96))]
    )
    assert bench.verdict(on, scattered).endswith("outside the spread")


def test_every_run_is_evaluated_on_the_split_and_the_record_names_it(tmp_path, monkeypatch):
    calls = []

    def fake_run_one(config, arm, seed, out, overrides, threads):
        calls.append(overrides)
        return RunResult(arm, seed, {0: 0.5, 8: 0.7}, {}, 1.0)

    monkeypatch.setattr(bench, "run_one", fake_run_one)
    bench.main(["--seeds", "1", "--no-scaled-lr", "--record-dir", str(tmp_path)])
    assert len(calls) == 2 and all("vlrollout.eval_seed=7001" in c for c in calls)
    calls.clear()
    bench.main(["--seeds", "1", "--split", "dev", "--no-scaled-lr", "--record-dir", str(tmp_path)])
    assert all("vlrollout.eval_seed=200" in c for c in calls)
    written = json.loads((tmp_path / "offpolicy_learning_counting.json").read_text())
    assert written["numbers"]["split"] == "dev" and written["numbers"]["eval_seed"] == 200


def test_an_eval_seed_override_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(["vlrollout.eval_seed=5"])
    assert stop.value.code == 2 and "--split" in capsys.readouterr().err
