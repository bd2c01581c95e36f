"""``bench/bench_learning.py``'s summary of its runs, on fabricated per-run metrics.

The benchmark itself trains (minutes per run); what is checked here is that its tables and
headline say what the runs measured: mean ± sd over seeds per arm and step, the difference
trained - control, the sampled reward per step and the minutes, on steps every run has.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from bench_learning import (  # noqa: E402
    QUICK,
    RunResult,
    headline,
    parse_args,
    summarize,
    tables,
    train_overrides,
)


def _runs() -> list[RunResult]:
    trained = [
        RunResult("trained", 1, {0: 0.05, 5: 0.10, 10: 0.20}, {1: 0.1, 2: 0.3}, 3.0, 2.0),
        RunResult("trained", 2, {0: 0.05, 5: 0.12, 10: 0.16}, {1: 0.2, 2: 0.4}, 4.0, 3.0),
    ]
    control = [
        RunResult("control", 1, {0: 0.05, 5: 0.05, 10: 0.06}, {1: 0.1, 2: 0.1}, 2.5, 1.5),
        # A run that stopped early: its steps bound the table.
        RunResult("control", 2, {0: 0.05, 5: 0.07}, {1: 0.2}, 2.5, 1.5),
    ]
    return trained + control


def test_summary_is_mean_and_sd_over_seeds_on_the_steps_every_run_has():
    s = summarize(_runs())
    assert s.eval_steps == [0, 5] and s.reward_steps == [1] and s.seeds == [1, 2]
    assert s.eval_mean["trained"][5] == pytest.approx(0.11)
    assert s.eval_sd["trained"][5] == pytest.approx(0.0141421, abs=1e-6)  # sample sd
    assert s.eval_mean["control"][5] == pytest.approx(0.06)
    assert s.reward_mean["trained"][1] == pytest.approx(0.15)
    assert s.minutes["trained"] == [3.0, 4.0] and s.train_minutes["control"] == [1.5, 1.5]


def test_tables_and_headline_show_both_arms_and_their_difference():
    s = summarize(_runs())
    held_out, reward, minutes = tables(s, "held-out greedy mean IoU")
    assert held_out.columns[-1] == "trained - control"
    assert held_out.rows[-1] == ["5", "0.110 ± 0.014", "0.060 ± 0.014", "+0.050"]
    assert reward.rows == [["1", "0.150", "0.150"]]
    assert minutes.rows[0] == ["trained", "2.0, 3.0", "3.0, 4.0"]
    line = headline(s, "grounding")
    assert line.startswith("headline: held-out greedy mean IoU at step 5")
    assert "trained 0.110 ± 0.014" in line and "control 0.060 ± 0.014" in line
    assert "difference +0.050" in line and "(start 0.050)" in line


def test_a_trained_arm_alone_has_no_difference_column():
    s = summarize([r for r in _runs() if r.arm == "trained"])
    held_out, _, _ = tables(s, "m")
    assert held_out.columns == ["step", "trained m"]
    assert "difference" not in headline(s, "counting")


def test_quick_fills_only_what_was_not_given_and_overrides_reach_every_run():
    args = parse_args(["--quick", "--steps", "4", "vlrollout.ground_metric=iou"])
    assert args.steps == 4 and args.seeds == QUICK["seeds"]
    assert args.eval_items == QUICK["eval_items"] and args.overrides == [
        "vlrollout.ground_metric=iou"
    ]
    settings = train_overrides(args)
    assert "total_train_steps=4" in settings
    assert f"train_dataset.batch_size={QUICK['batch_size']}" in settings
    assert parse_args([]).seeds == [1, 2, 3] and train_overrides(parse_args([]))[-1].startswith(
        "vlrollout.log_rollouts"
    )


def test_jobs_run_side_by_side_with_a_share_of_the_cores_and_report_in_plan_order(
    tmp_path, monkeypatch, capsys
):
    import json
    import threading
    import time

    import bench_learning

    calls: list[tuple[str, int, int | None]] = []
    running, peak = [0], [0]
    lock = threading.Lock()

    def fake_run_one(config, arm, seed, out, overrides, threads=None):
        with lock:
            calls.append((arm, seed, threads))
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2 if (arm, seed) == ("trained", 1) else 0.05)  # the first finishes last
        with lock:
            running[0] -= 1
        end = 0.1 if arm == "trained" else 0.05
        return RunResult(arm, seed, {0: 0.05, 5: end}, {1: 0.1}, 1.0, 0.5)

    monkeypatch.setattr(bench_learning, "run_one", fake_run_one)
    monkeypatch.setattr(bench_learning.os, "cpu_count", lambda: 4)
    bench_learning.main(["--jobs", "2", "--seeds", "1", "2", "--record-dir", str(tmp_path)])
    assert peak[0] == 2 and {t for _, _, t in calls} == {2}  # 4 cores, 2 jobs: 2 threads each
    order = [
        (r["arm"], r["seed"])
        for r in json.loads((tmp_path / "learning_grounding.json").read_text())["numbers"]["runs"]
    ]
    assert order == [("trained", 1), ("control", 1), ("trained", 2), ("control", 2)]
    printed = [
        line.split(":")[0] for line in capsys.readouterr().out.splitlines() if " seed " in line
    ]
    assert printed[:4] == ["trained seed 1", "control seed 1", "trained seed 2", "control seed 2"]


def test_one_run_gets_the_thread_count_unless_the_environment_sets_one(tmp_path, monkeypatch):
    import subprocess

    import bench_learning

    seen: list[str | None] = []

    def fake_subprocess_run(cmd, cwd, env, capture_output, text):
        seen.append(env.get("OMP_NUM_THREADS"))
        out = Path(next(a for a in cmd if a.startswith("vlrollout.output=")).split("=", 1)[1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "eval.jsonl").write_text('{"step": 0, "eval/mean": 0.1}\n')
        (out / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.2, "time/step": 3.0}\n')
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bench_learning.subprocess, "run", fake_subprocess_run)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    bench_learning.run_one("c.yaml", "trained", 1, tmp_path / "a", [], threads=3)
    bench_learning.run_one("c.yaml", "trained", 1, tmp_path / "b", [])
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    bench_learning.run_one("c.yaml", "trained", 1, tmp_path / "c", [], threads=3)
    assert seen == ["3", None, "5"]


def test_jobs_below_one_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(["--jobs", "0"])
    assert stop.value.code == 2 and "--jobs" in capsys.readouterr().err


def test_a_runs_sampled_reward_under_dynamic_sampling_is_every_episodes(tmp_path, monkeypatch):
    """The trained groups' mean (``reward_mean``) sits near the middle of a 0/1 reward under
    dynamic sampling; the curve beside the control is every rolled-out episode's mean."""
    import subprocess

    import bench_learning

    def fake_subprocess_run(cmd, cwd, env, capture_output, text):
        out = Path(next(a for a in cmd if a.startswith("vlrollout.output=")).split("=", 1)[1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "eval.jsonl").write_text('{"step": 0, "eval/mean": 0.1}\n')
        rows = [
            {"step": 1, "reward_mean": 0.5, "dynamic/reward_mean_all": 0.9, "time/step": 3.0},
            {"step": 2, "reward_mean": 0.25, "time/step": 3.0},
        ]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bench_learning.subprocess, "run", fake_subprocess_run)
    run = bench_learning.run_one("c.yaml", "trained", 1, tmp_path / "a", [])
    assert run.rewards == {1: 0.9, 2: 0.25}


def test_runs_are_evaluated_on_the_test_split_unless_dev_is_asked_for(capsys):
    from splits import SPLITS

    assert parse_args([]).split == "test"
    assert train_overrides(parse_args([]))[0] == f"vlrollout.eval_seed={SPLITS['test']}"
    assert train_overrides(parse_args(["--split", "dev"]))[0] == "vlrollout.eval_seed=200"
    with pytest.raises(SystemExit) as exc:
        parse_args(["vlrollout.eval_seed=5"])
    assert exc.value.code == 2 and "--split" in capsys.readouterr().err


def test_the_record_names_the_split_its_runs_were_evaluated_on(tmp_path, monkeypatch):
    import bench_learning

    seen: list[list[str]] = []

    def fake_run_one(config, arm, seed, out, overrides, threads=None):
        seen.append(list(overrides))
        return RunResult(arm, seed, {0: 0.05, 5: 0.1}, {1: 0.1}, 1.0, 0.5)

    monkeypatch.setattr(bench_learning, "run_one", fake_run_one)
    bench_learning.main(["--seeds", "1", "--split", "dev", "--record-dir", str(tmp_path)])
    rec = json.loads((tmp_path / "learning_grounding.json").read_text())
    assert rec["numbers"]["split"] == "dev" and rec["numbers"]["eval_seed"] == 200
    assert all("vlrollout.eval_seed=200" in o for o in seen) and len(seen) == 2
    assert rec["headline"].endswith("on the dev split (eval_seed 200)")
    assert rec["mode"].startswith("changed:")


def test_no_recipe_was_chosen_on_the_test_split(tmp_path):
    """The test seed is neither the recipes' evaluation seed (the dev split) nor their data
    seed, and none of its items is a training item (same image or id)."""
    import hashlib

    from bench_learning import RECIPES
    from splits import SPLITS

    from vlrollout.tiny.synthetic import generate_items
    from vlrollout.train.config import load_config

    def keys(items: list[dict]) -> set[str]:
        return {i["id"] for i in items} | {
            hashlib.sha256(i["images"][0].tobytes()).hexdigest() for i in items
        }

    for name, config in RECIPES.items():
        out = tmp_path / name
        vl = load_config(str(REPO / config), [f"vlrollout.output={out}"]).vlrollout
        assert vl.eval_seed == SPLITS["dev"] != SPLITS["test"]
        assert SPLITS["test"] != vl.data_seed
        test = keys(generate_items(vl.task, vl.eval_items, SPLITS["test"]))
        assert not test & keys(generate_items(vl.task, vl.train_items, vl.data_seed)), name
