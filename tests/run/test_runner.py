"""The runner: outputs a trainer can load, counts that add up, fail-fast, kill-and-resume."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.workflow_executor import check_trajectory_format

from vlrollout.datasets import DataFileError, load_items
from vlrollout.files import atomic_write_bytes, item_stem
from vlrollout.run.runner import Runner
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import RLVRWorkflow

REPO = Path(__file__).resolve().parents[2]


def _write_items(path: Path, n: int, bad: set[int] = frozenset()) -> Path:
    with path.open("w") as f:
        for i in range(n):
            messages = 3 if i in bad else [{"role": "user", "content": f"2+2? ({i})"}]
            f.write(json.dumps({"id": f"q{i}", "messages": messages, "answer": "4"}) + "\n")
    return path


def _runner(tokenizer, out, fail_fast=False, group_size=2):
    answer = tokenizer.encode("4", add_special_tokens=False) + [tokenizer.eos_token_id]
    wf = RLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer", GenerationHyperparameters(), tokenizer
    )
    return Runner(
        wf,
        ScriptedEngine([answer]),
        tokenizer,
        out,
        group_size=group_size,
        concurrency=3,
        fail_fast=fail_fast,
    )


def test_outputs_reload_and_counts_add_up(tokenizer, tmp_path):
    items = load_items(_write_items(tmp_path / "d.jsonl", 6, bad={2, 4}))
    summary = asyncio.run(_runner(tokenizer, tmp_path / "out").run(items, progress=False))
    assert summary["items"] == {"total": 6, "done": 6, "accepted": 4, "rejected": 2}
    # Each bad item's group of 2 episodes is rejected with its reason.
    assert summary["episodes"]["accepted"] == 8
    assert summary["episodes"]["rejected_by_reason"] == {"bad_message": 4}
    assert {r["id"] for r in summary["rejections"]} == {"q2", "q4"}
    assert summary["reward"]["mean"] == 1.0
    traj = torch.load(
        tmp_path / "out" / "trajectories" / f"{item_stem('q0')}.pt", weights_only=False
    )
    assert check_trajectory_format(traj, batch_size=2)
    assert not (tmp_path / "out" / "trajectories" / f"{item_stem('q2')}.pt").exists()
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert on_disk["items"] == summary["items"]


def test_fail_fast_stops_at_the_first_rejected_item(tokenizer, tmp_path):
    items = load_items(_write_items(tmp_path / "d.jsonl", 30, bad={0}))
    runner = _runner(tokenizer, tmp_path / "out", fail_fast=True)
    summary = asyncio.run(runner.run(items, progress=False))
    assert summary["stopped_early"]["item"] == "q0"
    # No item starts after the failure: only the items in flight with q0 finish.
    assert 1 <= summary["items"]["done"] <= runner.concurrency
    assert summary["this_run"]["items_run"] == summary["items"]["done"]


def test_resume_skips_finished_items(tokenizer, tmp_path):
    items = load_items(_write_items(tmp_path / "d.jsonl", 5))
    runner = _runner(tokenizer, tmp_path / "out")
    asyncio.run(runner.run(items[:3], progress=False))
    calls_before = len(runner.engine.requests)
    summary = asyncio.run(runner.run(items, progress=False))
    assert len(runner.engine.requests) - calls_before == 2 * 2  # only the 2 new items, group of 2
    assert summary["items"]["done"] == 5


def test_resume_runs_again_the_items_that_changed_or_were_rejected(tokenizer, tmp_path):
    items = load_items(_write_items(tmp_path / "d.jsonl", 4, bad={3}))
    runner = _runner(tokenizer, tmp_path / "out")
    asyncio.run(runner.run(items, progress=False))
    calls_before = len(runner.engine.requests)
    edited = [dict(item) for item in items]
    edited[0]["answer"] = "5"  # a label changed: its rewards must be computed again
    edited[1]["messages"] = [{"role": "user", "content": "3+1?"}]  # a prompt changed
    summary = asyncio.run(runner.run(edited, progress=False))
    assert len(runner.engine.requests) - calls_before == 2 * 2  # q0 and q1; q2 is reused
    assert summary["this_run"]["redone"] == ["q0", "q1"]
    assert summary["this_run"]["retried"] == ["q3"]  # rejected again (still bad), not reused
    assert summary["items"] == {"total": 4, "done": 4, "accepted": 3, "rejected": 1}
    assert summary["reward"]["mean"] == pytest.approx(4 / 6)  # q0's answer is 5 now


def test_an_item_redone_and_rejected_leaves_no_trajectory_of_its_earlier_version(
    tokenizer, tmp_path
):
    """A trainer loading trajectories/*.pt must not get rollouts of an item summary.json calls
    rejected: an item accepted, then edited into one that is rejected, loses its old file."""
    items = load_items(_write_items(tmp_path / "d.jsonl", 2))
    runner = _runner(tokenizer, tmp_path / "out")
    asyncio.run(runner.run(items, progress=False))
    assert runner.trajectory_path("q0").exists()
    edited = [dict(item) for item in items]
    edited[0]["messages"] = 3  # now a bad item
    summary = asyncio.run(runner.run(edited, progress=False))
    assert summary["items"]["rejected"] == 1 and summary["this_run"]["redone"] == ["q0"]
    assert not runner.trajectory_path("q0").exists()
    assert runner.trajectory_path("q1").exists()


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "f.json"
    atomic_write_bytes(target, b"old")

    with pytest.raises(TypeError):  # fails mid-write: the old content must survive
        atomic_write_bytes(target, 12345)  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_bad_lines_become_rejectable_items_naming_the_line(tmp_path):
    from vlrollout.datasets import LOAD_ERROR
    from vlrollout.run.items import BLOCKING, item_problems

    bad = tmp_path / "d.jsonl"
    bad.write_text('{"id": 1}\n{not json\n[1, 2]\n{"id": 1}\n')
    items = load_items(bad)
    assert [i["id"] for i in items] == ["1", "line-2", "line-3", "1@line-4"]
    problems = [item_problems(i)[0] for i in items[1:]]
    assert [r for r, _ in problems] == ["bad_json", "bad_item", "duplicate_id"]
    assert all(r in BLOCKING for r, _ in problems)
    assert "line 1" in problems[2][1]
    assert LOAD_ERROR not in items[0]
    only_bad = tmp_path / "only_bad.jsonl"
    only_bad.write_text("{oops\n")
    with pytest.raises(DataFileError, match="no line is a data item"):
        load_items(only_bad)


def test_killed_run_resumes_without_losing_or_repeating_items(tmp_path):
    data = _write_items(tmp_path / "d.jsonl", 40)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tests.run.run_scripted", str(data), str(out), "0.05"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    items_dir = out / "items"
    deadline = time.time() + 120
    while time.time() < deadline:
        if items_dir.exists() and len(list(items_dir.glob("*.json"))) >= 5:
            break
        if proc.poll() is not None:
            pytest.fail(f"run ended before it was killed: {proc.stdout.read().decode()[-2000:]}")
        time.sleep(0.05)
    # Kill the whole process group, as a terminal's Ctrl-C or a job scheduler does: the run and its
    # reward worker processes die together, mid-write at worst.
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {json.loads(p.read_text())["id"] for p in items_dir.glob("*.json")}
    assert 5 <= len(done_before) < 40
    # Nothing half-written: every outcome and trajectory file parses.
    for p in items_dir.glob("*.json"):
        json.loads(p.read_text())
    for p in (out / "trajectories").glob("*.pt"):
        torch.load(p, weights_only=False)

    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    done_after = sorted(json.loads(p.read_text())["id"] for p in items_dir.glob("*.json"))
    assert done_after == sorted(f"q{i}" for i in range(40))
    assert len(list((out / "trajectories").glob("*.pt"))) == 40
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items"] == {"total": 40, "done": 40, "accepted": 40, "rejected": 0}
    assert summary["this_run"]["items_run"] == 40 - len(done_before)
    assert not list(out.rglob("*.tmp"))
