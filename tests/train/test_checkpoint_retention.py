"""Only the newest ``keep`` checkpoints stay (``vlrollout.keep_checkpoints``; 0: every one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train.test_checkpoint_crash import _Actor
from vlrollout.train import checkpoint


def _steps(out: Path) -> list[str]:
    return sorted((p.name for p in (out / "checkpoints").glob("step_*")), key=lambda n: int(n[5:]))


@pytest.mark.parametrize(("keep", "left"), [(1, [5]), (3, [3, 4, 5]), (0, [1, 2, 3, 4, 5])])
def test_the_newest_checkpoints_are_kept(tmp_path, keep, left):
    for step in range(1, 6):
        checkpoint.save(_Actor(step), tmp_path, step, keep=keep)
    assert _steps(tmp_path) == [f"step_{s}" for s in left]
    assert checkpoint.latest(tmp_path).step == 5
