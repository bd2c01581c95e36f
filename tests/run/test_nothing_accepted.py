"""A run in which every episode is rejected is a failure (exit 3, the counts and top reasons on
stderr), not a success with an empty summary; a run with some accepted episodes still exits 0.

The engine is scripted (no model is loaded); the tokenizer comes from the shipped tiny model.
"""

from __future__ import annotations

import json
from pathlib import Path

from vlrollout import cli
from vlrollout.testing.scripted_engine import ScriptedEngine

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "assets" / "tiny-qwen2vl")


class _Engine(ScriptedEngine):
    """A scripted engine ``vlrollout run`` can shut down; ``fails(call)`` says which calls raise."""

    def __init__(self, fails) -> None:
        super().__init__(self._answer)
        self.fails = fails
        self.answered = 0

    def _answer(self, req) -> list[int]:
        self.answered += 1
        if self.fails(self.answered - 1):
            raise ConnectionError("server at 127.0.0.1:30000 went away")
        return [100, 101]

    def destroy(self) -> None:
        pass


def _run(tmp_path, monkeypatch, capsys, fails, rows) -> tuple[int, str, dict]:
    monkeypatch.setattr(
        "vlrollout.engine.factory.make_engine", lambda *a, **k: _Engine(fails), raising=True
    )
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    flags = ["--data", str(data), "--output", str(out), "--model", MODEL, "--workflow", "text"]
    flags += ["--reward", "tests.workflows.reward_fns.contains_answer", "--group-size", "2"]
    code = cli.main(["run", *flags, "--no-progress", "--concurrency", "1"])
    err = capsys.readouterr().err
    return code, err, json.loads((out / "summary.json").read_text())


def _rows(n: int, bad: int = 0) -> list[dict]:
    rows = [{"id": f"q{i}", "messages": f"what is {i}?", "answer": "4"} for i in range(n)]
    rows += [{"id": f"bad{i}", "messages": 5, "answer": "4"} for i in range(bad)]
    return rows


def test_a_run_with_no_accepted_episode_exits_3_naming_the_top_reasons(
    tmp_path, monkeypatch, capsys
):
    code, err, summary = _run(tmp_path, monkeypatch, capsys, lambda call: True, _rows(3, bad=1))
    assert summary["episodes"]["accepted"] == 0  # the summary and report are still written
    assert (tmp_path / "out" / "report.html").is_file()
    assert code == 3, err
    assert cli.NOTHING_ACCEPTED == 3
    message = err[err.index("vlrollout run: error:") :]
    assert "no episode of the run was accepted (8 episodes, 8 rejected)" in message
    lines = message.splitlines()
    top = next(i for i, line in enumerate(lines) if "engine_error" in line)
    assert lines[top].strip().startswith("engine_error: 6 (e.g. item q")
    assert "ConnectionError: server at 127.0.0.1:30000 went away" in lines[top]
    assert any(line.strip().startswith("bad_message: 2 (e.g. item bad0") for line in lines)
    assert "summary.json" in lines[-1]
    assert "Traceback" not in err


def test_a_run_with_some_accepted_episodes_exits_0(tmp_path, monkeypatch, capsys):
    code, err, summary = _run(tmp_path, monkeypatch, capsys, lambda call: call % 2 == 1, _rows(2))
    assert summary["episodes"]["accepted"] == 2 and summary["episodes"]["rejected"] == 2
    assert code == 0, err
    assert "no episode" not in err


def test_fail_fast_keeps_its_own_status(tmp_path, monkeypatch, capsys):
    """--fail-fast stops at the first rejection: that is "stopped early" (1), as documented."""
    monkeypatch.setattr(
        "vlrollout.engine.factory.make_engine", lambda *a, **k: _Engine(lambda call: True)
    )
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows(2)))
    flags = ["--data", str(data), "--output", str(tmp_path / "o"), "--model", MODEL]
    flags += ["--workflow", "text", "--reward", "tests.workflows.reward_fns.contains_answer"]
    assert cli.main(["run", *flags, "--no-progress", "--concurrency", "1", "--fail-fast"]) == 1
