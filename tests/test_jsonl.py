"""Every JSON Lines file is written and read by one module (:mod:`vlrollout.jsonl`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vlrollout.jsonl import append_jsonl, iter_jsonl, read_jsonl, write_jsonl
from vlrollout.tiny.synthetic import generate_items, write_dataset


def test_datasets_and_metrics_write_numbers_alike(tmp_path):
    """A generated dataset and the training metrics go through one writer: NumPy and PyTorch
    scalars are written as the numbers they hold, an integer as an integer, in both."""
    item = {**generate_items("count", 1, seed=0)[0], "answer": np.int64(3)}
    data = write_dataset([item], tmp_path / "ds")
    (back,) = read_jsonl(data)
    assert back["answer"] == 3 and type(back["answer"]) is int
    metrics = tmp_path / "metrics.jsonl"
    append_jsonl(metrics, {"step": np.int64(2), "reward_mean": torch.tensor(0.5)})
    append_jsonl(metrics, {"step": 3, "reward_mean": np.float32(0.25)})
    assert read_jsonl(metrics) == [
        {"step": 2, "reward_mean": 0.5},
        {"step": 3, "reward_mean": 0.25},
    ]
    assert type(read_jsonl(metrics)[0]["step"]) is int


def test_bad_lines_are_named_by_the_reader_and_kept_by_the_iterator(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n\n{oops\n[2]\n', encoding="utf-8")
    rows = list(iter_jsonl(path))
    assert [n for n, _ in rows] == [1, 3, 4]
    assert rows[0][1] == {"a": 1} and rows[2][1] == [2]
    assert isinstance(rows[1][1], json.JSONDecodeError)
    with pytest.raises(ValueError, match="d.jsonl, line 3: not valid JSON"):
        read_jsonl(path)
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_written_files_read_back_and_rewrite_whole(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [{"step": 1}, {"step": 2}])
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
    write_jsonl(path, [r for r in read_jsonl(path) if r["step"] <= 1])
    assert read_jsonl(path) == [{"step": 1}]
