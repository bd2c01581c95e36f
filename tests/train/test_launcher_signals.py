"""``vlrollout train --nproc N`` stopped by a signal stops its training processes.

The launcher waits on torchrun (:func:`vlrollout.train.main.supervise`). A stop must reach
torchrun as one SIGTERM, which it passes on to its workers (they run in sessions of their own,
so a terminal's Ctrl-C never reaches them, and ignore SIGINT when started in the background),
and the launcher must wait for it: a launcher that killed torchrun outright would leave the
workers training with no one to stop them. A stand-in for torchrun records each signal it gets
and takes a moment to stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.procs import ROOT

TORCHRUN_STAND_IN = """
import pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    with marker.open("a") as f:
        f.write(signal.Signals(signum).name + "\\n")
    time.sleep(1.0)  # stopping the workers
    with marker.open("a") as f:
        f.write("stopped\\n")
    sys.exit(1)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
print("ready", flush=True)
time.sleep(60)
"""

LAUNCHER = """
import signal, sys
# A terminal's foreground job: SIGHUP as its default, whatever the test runner inherited (nohup).
signal.signal(signal.SIGHUP, signal.SIG_IGN if "--nohup" in sys.argv else signal.SIG_DFL)
from vlrollout.cli import run_command
from vlrollout.train.main import supervise
cmd = [sys.executable, sys.argv[1], sys.argv[2]]
sys.exit(run_command("train", lambda: supervise(cmd)))
"""


def _launch(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, Path]:
    (tmp_path / "torchrun.py").write_text(TORCHRUN_STAND_IN)
    marker = tmp_path / "signals.txt"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "torchrun.py"), str(marker), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell's foreground job
    )
    assert launcher.stdout.readline().strip() == "ready"
    return launcher, marker


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_launcher_reaches_torchrun_once_and_is_waited_for(tmp_path, signum):
    """SIGHUP: the terminal closed or the ssh session dropped."""
    launcher, marker = _launch(tmp_path)
    launcher.send_signal(signum)
    launcher.communicate(timeout=30)
    assert marker.read_text().split() == ["SIGTERM", "stopped"]
    assert launcher.returncode in (128 + signum, -signum)


def test_ctrl_c_on_the_terminal_reaches_torchrun_once(tmp_path):
    """The terminal signals the whole foreground group; torchrun must not get a second signal while it stops its workers (a second one cuts its shutdown short)."""
    launcher, marker = _launch(tmp_path)
    os.killpg(launcher.pid, signal.SIGINT)
    launcher.communicate(timeout=30)
    assert marker.read_text().split() == ["SIGTERM", "stopped"]
    assert launcher.returncode == 128 + signal.SIGINT


def test_a_launcher_started_under_nohup_keeps_training_through_a_hangup(tmp_path):
    # nohup ignores SIGHUP so that closing the terminal does not stop the run; the launcher must
    # not take that signal back and stop torchrun on it.
    launcher, marker = _launch(tmp_path, "--nohup")
    launcher.send_signal(signal.SIGHUP)
    with pytest.raises(subprocess.TimeoutExpired):
        launcher.wait(timeout=2)
    assert not marker.exists()
    launcher.send_signal(signal.SIGTERM)
    launcher.communicate(timeout=30)
    assert marker.read_text().split() == ["SIGTERM", "stopped"]
    assert launcher.returncode in (128 + signal.SIGTERM, -signal.SIGTERM)


def test_the_launcher_handles_stops_before_torchrun_starts(monkeypatch):
    """A signal while torchrun starts (it may print before this process goes on) must reach it:
    with the handlers installed after it started, SIGHUP's default killed the launcher alone
    and left torchrun running."""
    from vlrollout.train import main as train_main

    seen = {}

    class FakeTorchrun:
        def __init__(self, cmd, **kwargs):
            seen["handlers"] = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}

        def wait(self):
            return 0

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setattr(train_main.subprocess, "Popen", FakeTorchrun)
    assert train_main.supervise(["torchrun"]) == 0
    stops = [s for s in before if before[s] is not signal.SIG_IGN]  # nohup's SIGHUP stays
    assert signal.SIGTERM in stops and all(seen["handlers"][s] is not before[s] for s in stops)
    assert {s: signal.getsignal(s) for s in before} == before  # restored after
