"""A crash at any point of a checkpoint save leaves ``latest`` a whole checkpoint.

The save is driven with a stand-in actor (it writes a weights file naming its version) and the
process "crashes" (a ``BaseException`` nothing catches) at the k-th file-system change: each
``os.rename``, ``os.replace`` and ``shutil.rmtree`` counts, and a crash in ``rmtree`` first deletes
one file, as a kill half-way through a deletion would. For every k, :func:`checkpoint.latest` must
return a folder whose weights and ``state.json`` belong together, and a later save must work.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from vlrollout.train import checkpoint

WEIGHTS = "model.safetensors"


class _Crash(BaseException):
    """The process dies here."""


class _Actor:
    """Stands in for AReaL's actor: ``save`` writes a weights file and an optimizer shard."""

    tokenizer = processor = None

    def __init__(self, version: int) -> None:
        self.version = version
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    def get_version(self) -> int:
        return self.version

    def save(self, meta: Any) -> None:
        folder = Path(meta.path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / WEIGHTS).write_text(f"weights v{self.version}")
        (folder / "optim_world_size_1_rank_0.pt").write_text(f"optimizer v{self.version}")


class _CrashAt:
    """Counts file-system changes; the ``at``-th one crashes (``None``: never)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: int | None) -> None:
        self.at, self.count = at, 0
        rename, replace, rmtree = os.rename, os.replace, shutil.rmtree

        def step() -> bool:
            self.count += 1
            return self.count == self.at

        def crashing_rename(src, dst, *a, **k):
            if step():
                raise _Crash
            return rename(src, dst, *a, **k)

        def crashing_replace(src, dst, *a, **k):
            if step():
                raise _Crash
            return replace(src, dst, *a, **k)

        def crashing_rmtree(path, *a, **k):
            if step():
                files = sorted(p for p in Path(path).rglob("*") if p.is_file())
                if files:
                    files[0].unlink()  # killed half-way through the deletion
                raise _Crash
            return rmtree(path, *a, **k)

        monkeypatch.setattr(os, "rename", crashing_rename)
        monkeypatch.setattr(os, "replace", crashing_replace)
        monkeypatch.setattr(shutil, "rmtree", crashing_rmtree)


def _assert_whole(ckpt: checkpoint.Checkpoint | None, steps: set[int]) -> None:
    assert ckpt is not None, "no checkpoint left"
    assert ckpt.step in steps
    assert (ckpt.path / WEIGHTS).read_text() == f"weights v{ckpt.state['version']}"
    assert (ckpt.path / "optim_world_size_1_rank_0.pt").is_file()
    assert json.loads((ckpt.path / "state.json").read_text()) == ckpt.state


def _changes_in_one_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int) -> int:
    out = tmp_path / "count"
    checkpoint.save(_Actor(1), out, 1)
    counter = _CrashAt(monkeypatch, None)
    checkpoint.save(_Actor(2), out, step)
    monkeypatch.undo()
    return counter.count


@pytest.mark.parametrize("resaved", [False, True], ids=["next_step", "same_step_again"])
def test_latest_is_whole_after_a_crash_at_any_point_of_a_save(tmp_path, monkeypatch, resaved):
    """``same_step_again``: a resumed run saves the step ``latest`` already points to."""
    step = 1 if resaved else 2
    changes = _changes_in_one_save(tmp_path, monkeypatch, step)
    assert changes >= 2
    for at in range(1, changes + 1):
        out = tmp_path / f"crash_{at}"
        checkpoint.save(_Actor(1), out, 1)
        _CrashAt(monkeypatch, at)
        with pytest.raises(_Crash):
            checkpoint.save(_Actor(2), out, step)
        monkeypatch.undo()
        resumed = checkpoint.latest(out)
        _assert_whole(resumed, {1, step})
        # The run resumes and saves its next step: that works, and leaves no stray folder.
        following = resumed.step + 1
        _assert_whole(checkpoint.save(_Actor(3), out, following), {following})
        _assert_whole(checkpoint.latest(out), {following})
        names = sorted(p.name for p in (out / "checkpoints").iterdir())
        assert names == ["latest", f"step_{resumed.step}", f"step_{following}"], at  # keep=2
