"""``--seed``: deterministic scheduling on by default, and two seeded runs side by side write the
same files (the engine's deterministic mode)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlrollout.cli import run_config_from_flags
from vlrollout.run.config import RunConfig
from vlrollout.run.main import _engine_kwargs

REPO = Path(__file__).resolve().parents[2]


def _cfg(*flags: str) -> RunConfig:
    return run_config_from_flags(flags)


def test_a_seed_turns_deterministic_scheduling_on_unless_told_otherwise():
    assert _cfg("--seed", "5").deterministic is True
    assert _cfg().deterministic is False
    assert _cfg("--seed", "5", "--no-deterministic").deterministic is False
    assert _cfg("--deterministic").deterministic is True


def test_the_local_engine_gets_the_setting():
    assert _engine_kwargs(_cfg("--seed", "5")) == {"deterministic": True, "compile_decode": False}
    for flags in (["--compile"], ["engine.compile=true"]):
        assert _engine_kwargs(_cfg(*flags))["compile_decode"] is True
    remote = _cfg("--compile", "--engine", "sglang", "--address", "127.0.0.1:1")
    assert _engine_kwargs(remote) == {}  # a server chooses its own kernels


@pytest.mark.slow
def test_two_seeded_runs_side_by_side_write_the_same_files(tmp_path):
    outs = [tmp_path / "a", tmp_path / "b"]
    cmd = [sys.executable, "-m", "vlrollout.cli", "run", "--config", "examples/demo.yaml"]
    procs = [
        subprocess.Popen(
            [*cmd, "--output", str(out), "--seed", "5", "--no-progress"],
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for out in outs
    ]
    for p in procs:
        output = p.communicate(timeout=600)[0].decode()
        assert p.returncode == 0, output[-3000:]
    files = sorted(
        p.relative_to(outs[0])
        for p in outs[0].rglob("*")
        if p.parent.name in ("items", "trajectories")
    )
    assert len(files) == 24
    differ = [str(f) for f in files if (outs[0] / f).read_bytes() != (outs[1] / f).read_bytes()]
    assert differ == []


def test_a_seed_on_servers_is_said_not_to_reach_them():
    """AReaL's SGLang/vLLM clients send no seed: a seeded run on servers is told so."""
    from vlrollout.run.main import unseeded_server_note

    served = _cfg("--seed", "5", "--engine", "vllm", "--address", "127.0.0.1:1")
    note = unseeded_server_note(served)
    assert note is not None and "--seed 5 seeds the local engine only" in note
    assert "vllm client sends no seed" in note
    assert unseeded_server_note(_cfg("--seed", "5")) is None
    assert unseeded_server_note(_cfg("--engine", "sglang", "--address", "127.0.0.1:1")) is None
