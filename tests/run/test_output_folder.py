"""Output files: collision-free bounded names, summary from disk, temp clean-up, umask, and a rerun
with other settings refused."""

from __future__ import annotations

import asyncio
import json
import os
import stat

import pytest
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.datasets import load_items
from vlrollout.engine.config import EngineConfig
from vlrollout.errors import OutputFolderError
from vlrollout.files import atomic_write_bytes
from vlrollout.run.config import RunConfig
from vlrollout.run.output import prepare_output
from vlrollout.run.runner import Runner
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import RLVRWorkflow


def _run(tokenizer, tmp_path, ids, out=None):
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"id": i, "messages": f"{i}?", "answer": "4"}) + "\n" for i in ids)
    )
    answer = tokenizer.encode("4", add_special_tokens=False) + [tokenizer.eos_token_id]
    wf = RLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer", GenerationHyperparameters(), tokenizer
    )
    runner = Runner(wf, ScriptedEngine([answer]), tokenizer, out or tmp_path / "out", group_size=2)
    return runner, asyncio.run(runner.run(load_items(data), progress=False))


def test_ids_that_sanitise_alike_or_are_long_keep_their_own_files(tokenizer, tmp_path):
    ids = ["a/b", "a_b", "a b", "x" * 300]
    runner, summary = _run(tokenizer, tmp_path, ids)
    out = tmp_path / "out"
    assert summary["items"] == {"total": 4, "done": 4, "accepted": 4, "rejected": 0}
    assert len(list((out / "trajectories").glob("*.pt"))) == 4
    stored = sorted(json.loads(p.read_text())["id"] for p in (out / "items").glob("*.json"))
    assert stored == sorted(ids)
    assert all(len(p.name) < 120 for p in (out / "items").iterdir())


def test_summary_counts_what_is_on_disk(tokenizer, tmp_path):
    runner, _ = _run(tokenizer, tmp_path, ["p", "q", "r"])
    next((tmp_path / "out" / "items").glob("*.json")).unlink()  # one outcome lost
    from vlrollout.run.runner import summarize

    assert summarize(tmp_path / "out", load_items(tmp_path / "d.jsonl"), 0.0)["items"]["done"] == 2


def test_resume_removes_temp_files_of_a_killed_run(tokenizer, tmp_path):
    out = tmp_path / "out"
    (out / "items").mkdir(parents=True)
    (out / "trajectories").mkdir()
    leftovers = [out / "items" / ".q.json.abc.tmp", out / "trajectories" / ".q.pt.x.tmp"]
    for p in leftovers:
        p.write_bytes(b"half")
    _run(tokenizer, tmp_path, ["q"])
    assert not any(p.exists() for p in leftovers)
    assert not list(out.rglob("*.tmp"))


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_respect_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "f.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.json").stat().st_mode) == mode


def test_rerun_with_other_settings_is_refused_naming_the_differences(tmp_path):
    out = tmp_path / "out"
    prepare_output(out, RunConfig(group_size=4, workflow="vision"))
    (out / "items").mkdir()
    (out / "items" / "x.json").write_text('{"id": "x"}')
    prepare_output(out, RunConfig(group_size=4, workflow="vision", concurrency=9))  # resume: fine
    with pytest.raises(OutputFolderError) as e:
        prepare_output(out, RunConfig(group_size=2, workflow="text"))
    assert "group_size: 4 → 2" in str(e.value) and 'workflow: "vision" → "text"' in str(e.value)
    assert "--overwrite" in str(e.value)
    prepare_output(out, RunConfig(group_size=2, workflow="text"), overwrite=True)
    assert not (out / "items").exists()
    prepare_output(out, RunConfig(group_size=2, workflow="text"))  # now the folder is the new run's


def test_compiling_the_decode_step_resumes_a_run_with_or_without_it(tmp_path):
    """A speed setting: toggling it, or resuming a folder written before the setting existed
    (no ``engine.compile`` in its run.json), is a resume, not another configuration."""
    out = tmp_path / "out"
    prepare_output(out, RunConfig())
    (out / "items").mkdir()
    (out / "items" / "x.json").write_text('{"id": "x"}')
    prepare_output(out, RunConfig(engine=EngineConfig(compile=True)))
    run = json.loads((out / "run.json").read_text())
    run["config"].pop("engine.compile", None)  # as written before the setting existed
    (out / "run.json").write_text(json.dumps(run))
    prepare_output(out, RunConfig())
    assert (out / "items" / "x.json").exists()


def test_output_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputFolderError, match="is a file, not a folder"):
        prepare_output(tmp_path / "f" / "out", RunConfig())


def test_a_summary_of_fewer_items_says_what_else_the_folder_holds(tokenizer, tmp_path):
    """A rerun with a smaller --limit summarises its own items: the summary and the report say
    the folder holds more finished items, which it leaves alone."""
    from vlrollout.run.report_summary import overview_html
    from vlrollout.run.runner import summarize

    _run(tokenizer, tmp_path, ["p", "q", "r", "s"])
    one = load_items(tmp_path / "d.jsonl")[:1]
    summary = summarize(tmp_path / "out", one, 0.0)
    assert summary["items"] == {
        "total": 1, "done": 1, "accepted": 1, "rejected": 0, "other_items_in_folder": 3
    }  # fmt: skip
    assert "3 more finished items" in overview_html(summary, {})
    whole = summarize(tmp_path / "out", load_items(tmp_path / "d.jsonl"), 0.0)
    assert "other_items_in_folder" not in whole["items"]
