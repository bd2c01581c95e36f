"""results.json (every field the contract names), the printed table, and compare(): the metrics
that dropped by more than the threshold, overall and per split."""

from __future__ import annotations

import hashlib
import json

import pytest

from vlrollout.errors import UsageError
from vlrollout.eval.results import (
    check_baseline,
    compare,
    format_table,
    read_results,
    write_results,
)
from vlrollout.eval.runner import evaluate_items
from vlrollout.files import data_sha256

from .test_runner import ExactTask, ScriptedPredictor


def _result(tmp_path):
    items = [
        {"id": "a", "answer": "1", "split": "val"},
        {"id": "b", "answer": "2", "split": "val"},
        {"id": "c", "answer": "3", "split": "test"},
        {"id": "d", "question": "no answer"},
    ]
    predictor = ScriptedPredictor({"a": ["1"], "b": ["x"], "c": ["3"]})
    return evaluate_items(
        ExactTask(), predictor, items, tmp_path / "out", progress=False, family="qwen2_vl"
    )


def test_results_json_holds_every_field(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a"}\n')
    result = _result(tmp_path)
    write_results(
        tmp_path / "out", result, model="m", data=data, settings={"k": 1, "task": "exact"}
    )
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["task"] == "exact" and saved["primary"] == "exact_match" and saved["k"] == 1
    assert saved["metrics"]["exact_match"]["value"] == pytest.approx(2 / 3)
    assert len(saved["metrics"]["exact_match"]["ci95"]) == 2
    assert saved["per_split"]["val"]["items"] == 2
    assert saved["per_split"]["val"]["metrics"]["exact_match"]["value"] == pytest.approx(1 / 2)
    assert saved["per_split"]["test"]["metrics"]["exact_match"]["value"] == 1.0
    assert saved["items"] == 3
    assert saved["rejected"] == {"not_scorable": 1}
    assert saved["rejections"][0]["id"] == "d"
    assert saved["unreadable"] == {"no_number": 1}  # b's completion: scored 0, and said why
    assert saved["model"] == "m"
    assert saved["data"] == {
        "path": str(data.resolve()),
        "sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
    }
    assert saved["settings"] == {"k": 1, "task": "exact"}
    assert saved["vlrollout_version"]
    lines = [json.loads(x) for x in (tmp_path / "out" / "scores.jsonl").read_text().splitlines()]
    assert [(r["id"], r["split"], r["values"]) for r in lines] == [
        ("a", "val", {"exact_match": 1.0}),
        ("b", "val", {"exact_match": 0.0}),
        ("c", "test", {"exact_match": 1.0}),
    ]


def test_a_folder_digest_changes_when_a_file_is_renamed_or_changed(tmp_path):
    (tmp_path / "d" / "img").mkdir(parents=True)
    (tmp_path / "d" / "a.json").write_text("{}")
    (tmp_path / "d" / "img" / "1.png").write_bytes(b"x")
    first = data_sha256(tmp_path / "d")
    (tmp_path / "d" / "img" / "1.png").rename(tmp_path / "d" / "img" / "2.png")
    second = data_sha256(tmp_path / "d")
    (tmp_path / "d" / "img" / "2.png").write_bytes(b"y")
    assert len({first, second, data_sha256(tmp_path / "d")}) == 3


def test_the_table_names_each_metric_split_and_rejection(tmp_path):
    result = _result(tmp_path)
    content = write_results(tmp_path / "out", result, model="m", data=tmp_path, settings={})
    table = format_table(content)
    assert "3 items scored, 1 rejected" in table
    assert "exact_match" in table and "0.6667" in table and "95% CI" in table
    assert "split val (2 items)" in table and "split test (1 items)" in table
    assert "not_scorable 1" in table
    assert "completions scored 0 as unreadable: no_number 1" in table


def _results(overall: float, val: float) -> dict:
    return {
        "task": "refcoco",
        "metrics": {"ACC@0.5": {"value": overall}, "IoU": {"value": 0.5}},
        "per_split": {"val": {"items": 2, "metrics": {"ACC@0.5": {"value": val}}}},
    }


def test_compare_names_the_metrics_that_dropped_beyond_the_threshold():
    now = _results(0.60, 0.50)
    assert compare(now, _results(0.605, 0.505)) == []  # within the default 0.01
    drops = compare(now, _results(0.70, 0.52), threshold=0.01)
    assert drops == [
        "ACC@0.5 (all items): baseline 0.7000, now 0.6000 (-0.1000)",
        "ACC@0.5 (split val): baseline 0.5200, now 0.5000 (-0.0200)",
    ]
    assert compare(now, _results(0.70, 0.52), threshold=0.2) == []
    assert compare(_results(0.9, 0.9), _results(0.6, 0.5)) == []  # a rise is no regression


def test_compare_counts_a_missing_metric_and_refuses_another_task():
    now = _results(0.6, 0.5)
    del now["metrics"]["IoU"]
    assert compare(now, _results(0.6, 0.5)) == ["IoU (all items): baseline 0.5000, now missing"]
    with pytest.raises(UsageError, match="task 'caption'"):
        compare(now, {**_results(0.6, 0.5), "task": "caption"})


def test_read_results_names_a_bad_file(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        read_results(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("[1]")
    with pytest.raises(UsageError, match="no 'metrics'"):
        read_results(tmp_path / "x.json")


def test_check_baseline_refuses_what_compare_cannot_compare():
    good = _results(0.6, 0.5)
    check_baseline(good, "refcoco", "base.json")
    with pytest.raises(UsageError, match=r"--compare base.json: the baseline is task 'caption'"):
        check_baseline({**good, "task": "caption"}, "refcoco", "base.json")
    bad_split = {**good, "per_split": {"val": {"items": 2}}}
    bad_metric = {**good, "metrics": {"ACC@0.5": 0.6}}
    for bad in (bad_split, bad_metric, {**good, "per_split": [1]}):
        with pytest.raises(UsageError, match="'metrics' or 'per_split' is not as"):
            check_baseline(bad, "refcoco", "base.json")


def test_a_drop_of_exactly_the_threshold_is_not_a_regression():
    from vlrollout.eval.results import compare

    def results(value):
        return {"task": "count", "metrics": {"exact_match": {"value": value}}, "per_split": {}}

    assert compare(results(0.51), results(0.52), 0.01) == []  # 0.52 - 0.51 > 0.01 in floats
    assert compare(results(0.5099), results(0.52), 0.01) != []


def test_a_baseline_that_scored_nothing_is_refused_and_item_counts_are_noted():
    from vlrollout.eval.results import differing_inputs

    with pytest.raises(UsageError, match=r"--compare base.json: the baseline scored no item"):
        check_baseline({**_results(0.6, 0.5), "metrics": {}}, "refcoco", "base.json")
    notes = differing_inputs(
        {**_results(0.6, 0.5), "items": 100}, {**_results(0.6, 0.5), "items": 300}
    )
    assert "items: 300 (baseline) vs 100 (now)" in notes
