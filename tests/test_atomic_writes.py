"""Files a reader or a resumed run may open are replaced whole or not at all.

A write that fails part-way (a full disk, a killed process) must leave the previous file as it was:
each writer goes through :func:`vlrollout.files.atomic_write_bytes` (a temp file beside the target,
then ``os.replace``). The failure is simulated at the lowest level both an in-place write and the
atomic writer share, ``io.open``: the file it returns writes half of what it is given, then raises
``ENOSPC``.
"""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path
from typing import Any

import pytest

from vlrollout.jsonl import write_jsonl
from vlrollout.tiny import train as tiny_train
from vlrollout.train.report import write_report

TINY = Path(__file__).resolve().parents[1] / "assets" / "tiny-qwen2vl"


class _HalfWriter:
    """A file object that writes the first half of what it is given, then fails like a full disk."""

    def __init__(self, f: Any) -> None:
        self._f = f

    def write(self, data: Any) -> int:
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        raise OSError(errno.ENOSPC, "No space left on device (simulated)")

    def __enter__(self) -> _HalfWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@pytest.fixture
def disk_full(monkeypatch):
    """While active, every file opened for writing fails half-way through its first write."""
    real_open = io.open

    def failing_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return _HalfWriter(f) if any(c in mode for c in "wax+") else f

    def activate() -> None:
        monkeypatch.setattr(io, "open", failing_open)

    yield activate
    monkeypatch.setattr(io, "open", real_open)


def _only_file(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_write_jsonl_that_fails_leaves_the_previous_file(tmp_path, disk_full):
    path = tmp_path / "metrics.jsonl"
    write_jsonl(path, [{"step": 0}, {"step": 1}])
    before = path.read_bytes()
    disk_full()
    with pytest.raises(OSError, match="No space"):
        write_jsonl(path, [{"step": i, "reward": 0.5} for i in range(50)])
    assert path.read_bytes() == before
    assert _only_file(tmp_path) == ["metrics.jsonl"]  # no temp file left behind


def test_train_report_that_fails_leaves_the_previous_report(tmp_path, disk_full):
    write_jsonl(tmp_path / "metrics.jsonl", [{"step": 0, "reward_mean": 0.1}])
    page = write_report(tmp_path)
    before = page.read_bytes()
    write_jsonl(tmp_path / "metrics.jsonl", [{"step": i, "reward_mean": 0.1 * i} for i in range(9)])
    disk_full()
    with pytest.raises(OSError, match="No space"):
        write_report(tmp_path)
    assert page.read_bytes() == before


class _Saved:
    """Stands in for a model or processor: ``save_pretrained`` writes nothing."""

    def save_pretrained(self, out: Path) -> None:
        pass


def test_training_record_that_fails_leaves_the_previous_record(tmp_path, disk_full):
    record = json.loads((TINY / "TRAINING.json").read_text())
    tiny_train.save(_Saved(), _Saved(), tmp_path, {**record, "steps": 1})
    before = {name: (tmp_path / name).read_bytes() for name in ("TRAINING.json", "README.md")}
    disk_full()
    with pytest.raises(OSError, match="No space"):
        tiny_train.save(_Saved(), _Saved(), tmp_path, {**record, "steps": 2})
    after = {name: (tmp_path / name).read_bytes() for name in ("TRAINING.json", "README.md")}
    assert after == before
    assert _only_file(tmp_path) == ["README.md", "TRAINING.json"]
