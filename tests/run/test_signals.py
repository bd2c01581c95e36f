"""Ctrl-C and SIGTERM: one line with the count and how to resume, exit 130/143, no traceback,
no process left behind. Resuming after a kill: tests/run/test_runner.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (the run was started as a session leader)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields[3]: session id; Z: zombie
            members.append(int(stat.parent.name))
    return members


def _start(cmd: list[str], out: Path, ready: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline:
        items = out / "items"
        if items.is_dir() and len(list(items.glob("*.json"))) >= ready:
            return proc
        if proc.poll() is not None:
            pytest.fail(f"run ended before the signal: {proc.communicate()[1].decode()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("run did not start")


def _check_stop(proc: subprocess.Popen, sig: int, to_group: bool, out: Path, total: int) -> None:
    (os.killpg if to_group else os.kill)(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=120)
    err = stderr.decode()
    assert proc.returncode == 128 + sig, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if "stopped by" in line]
    assert len(lines) == 1, err
    done = len(list((out / "items").glob("*.json")))
    assert f"stopped by {signal.Signals(sig).name}: {done} of {total} items done" in lines[0]
    assert "rerun the same command to resume" in lines[0]
    time.sleep(0.5)
    assert _session_members(proc.pid) == [], "a child process outlived the run"
    assert not list(out.rglob("*.tmp"))


def _data(tmp_path: Path, n: int) -> Path:
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "messages": "2+2?", "answer": "4"}) + "\n" for i in range(n)
        )
    )
    return data


@pytest.mark.parametrize(("sig", "to_group"), [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_a_signal_stops_the_run_cleanly(tmp_path, sig, to_group):
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "tests.run.run_scripted",
        str(_data(tmp_path, 60)),
        str(out),
        "0.05",
    ]
    proc = _start(cmd, out, ready=3)
    _check_stop(proc, sig, to_group, out, total=60)


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "to_group"), [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_vlrollout_run_on_the_tiny_model_stops_cleanly(tmp_path, sig, to_group):
    data = REPO / "assets" / "samples" / "data.jsonl"
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "vlrollout.cli", "run", "--config", "examples/demo.yaml",
        "--data", str(data), "--output", str(out), "--concurrency", "1", "--no-progress",
        "--max-new-tokens", "48",
    ]  # fmt: skip
    proc = _start(cmd, out, ready=1)
    _check_stop(proc, sig, to_group, out, total=12)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] and summary["items"]["done"] >= 1
    assert summary["wall_s"] > 0  # the time it ran before the stop, not a placeholder
    assert summary["engine"]["device"] == "cpu"  # what ran is on record for a stopped run too


@pytest.mark.parametrize(
    ("command", "kept"),
    [("run", "finished items are kept"), ("train", "checkpoints are kept"), ("serve", None)],
)
def test_the_stop_line_names_what_the_command_keeps(capsys, command, kept):
    """A stopped `serve` (or `snapshot`, ...) has no items to resume: its line must not say so."""
    from vlrollout.cli import run_command

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert run_command(command, interrupted) == 130
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"vlrollout {command}: stopped by SIGINT"), line
    if kept is None:
        assert "resume" not in line and "kept" not in line, line
    else:
        assert kept in line and "rerun the same command to resume" in line, line


def test_a_second_ctrl_c_while_stopping_cuts_the_wait_short_without_a_traceback(
    capsys, monkeypatch
):
    """Shutting the reward pools down waits up to a few seconds, long enough for a second
    Ctrl-C: it ends the wait (no grace left) and the command still ends with its one line."""
    from vlrollout import cli
    from vlrollout.rewards import executor

    graces = []

    def shutdown(keep=(), grace_s=5.0):
        graces.append(grace_s)
        if len(graces) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(executor, "shutdown_reward_pools", shutdown)

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert cli.run_command("run", interrupted) == 130
    assert graces == [5.0, 0.0]
    assert "Traceback" not in capsys.readouterr().err


def _sigterm_then(after) -> int:
    """Send this process SIGTERM (run_command's handler raises SignalExit here), then let
    ``after`` decide what a library that caught it does."""
    import os
    import signal

    from vlrollout.cli import SignalExit

    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except SignalExit:
        return after()
    raise AssertionError("the handler did not run")


def _wrapped() -> int:
    raise RuntimeError("SchemaError: Error building `definitions` serializer")


@pytest.mark.parametrize(
    "after", [_wrapped, lambda: 0], ids=["turned-into-another-error", "swallowed"]
)
def test_a_sigterm_a_library_caught_still_stops_the_command_with_143(capsys, after):
    """pydantic-core turns an exception raised inside it into a SchemaError, and other code may
    swallow it: the command still ends as stopped by SIGTERM, with its one line."""
    from vlrollout.cli import run_command

    assert run_command("run", lambda: _sigterm_then(after)) == 143
    line = capsys.readouterr().err.strip()
    assert line.startswith("vlrollout run: stopped by SIGTERM"), line
