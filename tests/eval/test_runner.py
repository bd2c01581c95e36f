"""The evaluator's runner: resumable predictions, rejected items counted with their reasons, scores
per completion (mean and pass@k over k samples), metrics overall and per split, and the output
folder refusing predictions made with other settings.

The predictor and the task are small fakes here (what is tested is the runner); the real tasks
and predictors run end to end in test_eval_cli.py.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from PIL import Image

from vlrollout.datasets import LOAD_ERROR
from vlrollout.errors import OutputFolderError
from vlrollout.eval.prediction import Prediction
from vlrollout.eval.runner import (
    COMPLETION_COUNT,
    ITEM_KEY,
    NOT_SCORABLE,
    PREDICTIONS,
    SCORE_ERROR,
    evaluate_items,
    prediction_path,
    prepare_output,
)
from vlrollout.eval.tasks import ItemScore


class ExactTask:
    """Exact match of the completion with ``answer``; the metric is the mean."""

    name = "exact"
    prompt = "{question}"
    primary = "exact_match"
    correct_key = "exact_match"

    def check_item(self, item: dict[str, Any]) -> str | None:
        return None if "answer" in item else "no 'answer' field"

    def score(self, item, completion, geometry, family) -> ItemScore:
        if completion == "boom":
            raise RuntimeError("cannot read this")
        hit = float(completion.strip() == str(item["answer"]))
        return ItemScore(
            id=item["id"],
            split=item.get("split", "all"),
            values={"exact_match": hit},
            details={
                "prediction": completion.strip(),
                "reason": None if completion.strip().isdigit() else "no_number",
            },
        )

    def aggregate(
        self, scores: Sequence[ItemScore], items: Mapping[str, dict[str, Any]]
    ) -> dict[str, float]:
        return {"exact_match": statistics.fmean(s.values["exact_match"] for s in scores)}


class ScriptedPredictor:
    """Answers each item with the completions in ``script`` (a rejection for ``reject``), and
    records the items it was asked for."""

    def __init__(self, script: dict[str, list[str]], reject: Sequence[str] = ()) -> None:
        self.script, self.reject, self.calls = script, set(reject), []

    async def predict(self, item: dict[str, Any], k: int) -> Prediction:
        self.calls.append(item["id"])
        if item["id"] in self.reject:
            return Prediction.rejected(item["id"], "engine_error", "the engine fell over")
        return Prediction(id=item["id"], completions=self.script[item["id"]][:k])


def _items(n: int, splits: Sequence[str] = ("all",)) -> list[dict[str, Any]]:
    return [
        {"id": f"q{i}", "question": f"{i}+0?", "answer": str(i), "split": splits[i % len(splits)]}
        for i in range(n)
    ]


def _evaluate(predictor, items, output, **kw):
    return evaluate_items(
        ExactTask(), predictor, items, output, progress=False, family="qwen2_vl", **kw
    )


def test_a_rerun_skips_finished_items_and_gives_the_same_results(tmp_path):
    items = _items(5)
    script = {"q0": ["0"], "q1": ["7"], "q2": ["2"], "q3": ["3"], "q4": ["x"]}
    first = ScriptedPredictor(script)
    one = _evaluate(first, items, tmp_path, concurrency=2)
    assert sorted(first.calls) == ["q0", "q1", "q2", "q3", "q4"]
    assert len(list((tmp_path / PREDICTIONS).glob("*.json"))) == 5
    (tmp_path / PREDICTIONS / ".q9.json.x1.tmp").write_text("{half")  # a killed run's temp file
    assert one.value("exact_match") == pytest.approx(3 / 5)

    sorted((tmp_path / PREDICTIONS).glob("*.json"))[0].unlink()
    again = ScriptedPredictor(script)
    two = _evaluate(again, items, tmp_path)
    assert len(again.calls) == 1  # only the item whose prediction was lost runs again
    assert not list((tmp_path / PREDICTIONS).glob(".*"))
    assert two.metrics == one.metrics
    assert [s.values for s in two.scores] == [s.values for s in one.scores]


def test_rejected_items_are_counted_with_their_reasons_not_scored_as_zero(tmp_path):
    items = _items(4) + [
        {"id": "line-9", LOAD_ERROR: {"reason": "bad_json", "detail": "d.jsonl row 9: not JSON"}},
        {"id": "noanswer", "question": "?"},
    ]
    script = {"q0": ["0"], "q1": ["1"], "q2": ["boom"], "q3": ["x"]}
    predictor = ScriptedPredictor(script, reject=["q1"])
    result = _evaluate(predictor, items, tmp_path)
    assert "line-9" not in predictor.calls and "noanswer" not in predictor.calls
    reasons = {r["id"]: r["reason"] for r in result.rejections}
    assert reasons == {
        "line-9": "bad_json",
        "noanswer": NOT_SCORABLE,
        "q1": "engine_error",
        "q2": SCORE_ERROR,
    }
    assert result.rejected == {"bad_json": 1, NOT_SCORABLE: 1, "engine_error": 1, SCORE_ERROR: 1}
    assert (
        "no 'answer' field" in next(r for r in result.rejections if r["id"] == "noanswer")["detail"]
    )
    assert [s.id for s in result.scores] == ["q0", "q3"]
    assert result.value("exact_match") == pytest.approx(
        1 / 2
    )  # q0 right, q3 wrong; none counted as 0


def test_a_rejected_prediction_is_tried_again_on_a_rerun(tmp_path):
    items = _items(2)
    _evaluate(ScriptedPredictor({"q0": ["0"], "q1": ["1"]}, reject=["q1"]), items, tmp_path)
    again = ScriptedPredictor({"q0": ["0"], "q1": ["1"]})
    result = _evaluate(again, items, tmp_path)
    assert again.calls == ["q1"]
    assert result.rejections == [] and result.value("exact_match") == 1.0


def test_k_samples_give_the_mean_and_pass_at_k(tmp_path):
    items = _items(3)
    script = {"q0": ["0", "0", "9"], "q1": ["9", "1", "9"], "q2": ["9", "x", "x"]}
    result = _evaluate(ScriptedPredictor(script), items, None, k=3)
    by_id = {s.id: s.values for s in result.scores}
    assert by_id["q0"]["exact_match"] == pytest.approx(2 / 3)
    assert by_id["q1"]["pass@3"] == 1.0 and by_id["q2"]["pass@3"] == 0.0
    # mean over samples: sample j's exact match over items, averaged over j = 3/9
    assert result.value("exact_match") == pytest.approx(3 / 9)
    assert result.value("pass@3") == pytest.approx(2 / 3)
    assert result.unreadable == {"no_number": 2}  # each unreadable completion, not each item


def test_a_prediction_with_too_few_completions_is_rejected_not_averaged(tmp_path):
    script = {"q0": ["0", "0"], "q1": ["1"], "q2": []}
    result = _evaluate(ScriptedPredictor(script), _items(3), None, k=2)
    assert result.rejected == {COMPLETION_COUNT: 2}
    assert [s.id for s in result.scores] == ["q0"] and result.value("exact_match") == 1.0


def test_metrics_per_split_with_intervals(tmp_path):
    items = _items(6, splits=("val", "testA"))
    script = {f"q{i}": [str(i) if i in (0, 1, 2) else "x"] for i in range(6)}
    result = _evaluate(ScriptedPredictor(script), items, None, bootstrap=200)
    # val: q0 q2 q4 -> 2/3; testA: q1 q3 q5 -> 1/3
    assert result.per_split["val"]["items"] == 3
    assert result.per_split["val"]["metrics"]["exact_match"]["value"] == pytest.approx(2 / 3)
    assert result.per_split["testA"]["metrics"]["exact_match"]["value"] == pytest.approx(1 / 3)
    lo, hi = result.metrics["exact_match"]["ci95"]
    assert 0.0 <= lo <= 0.5 <= hi <= 1.0 and lo < hi


def test_output_with_other_settings_is_refused_unless_overwritten(tmp_path):
    settings = {"task": "exact", "k": 1, "model": "/m"}
    prepare_output(tmp_path, settings)
    _evaluate(ScriptedPredictor({"q0": ["0"]}), _items(1), tmp_path)
    prepare_output(tmp_path, settings)  # the same settings: a resume
    with pytest.raises(OutputFolderError, match=r"k: 1 → 2.*--overwrite"):
        prepare_output(tmp_path, {**settings, "k": 2})
    prepare_output(tmp_path, {**settings, "k": 2}, overwrite=True)
    assert not any((tmp_path / PREDICTIONS).glob("*.json"))
    assert json.loads((tmp_path / "eval.json").read_text())["settings"]["k"] == 2


def test_settings_that_made_no_prediction_do_not_hold_the_folder(tmp_path):
    """A run that stopped before its first prediction (a frame budget the processor refused
    after the checks) guards nothing: the corrected command may use the same folder."""
    settings = {"task": "exact", "k": 1, "model": "/m"}
    prepare_output(tmp_path, settings)
    prepare_output(tmp_path, {**settings, "k": 2})
    assert json.loads((tmp_path / "eval.json").read_text())["settings"]["k"] == 2


def test_predictions_without_settings_are_refused(tmp_path):
    _evaluate(ScriptedPredictor({"q0": ["0"]}), _items(1), tmp_path)
    with pytest.raises(OutputFolderError, match="without eval.json"):
        prepare_output(tmp_path, {"task": "exact"})


def test_a_rerun_redoes_only_the_items_whose_prompt_or_image_changed(tmp_path):
    """A prediction answers the prompt and images it was made for: after the data changed, an
    item with another message or image (or a prediction file without its item's key) runs again
    and is counted as redone; the unchanged ones, and a subset of them (--limit), resume."""
    images = [tmp_path / "a.png", tmp_path / "b.png"]
    for path in images:
        Image.new("RGB", (8, 8), "white").save(path)
    items = _items(4)
    for i, item in enumerate(items):
        item["messages"] = [{"role": "user", "content": item["question"]}]
        item["images"] = [str(images[i % 2])]
    out = tmp_path / "out"
    _evaluate(ScriptedPredictor({f"q{i}": ["old"] for i in range(4)}), items, out)
    items[0]["messages"][0]["content"] = "a new question"  # the data file was edited
    Image.new("RGB", (9, 8), "black").save(images[1])  # q1 and q3 show another image now
    legacy = prediction_path(out, "q2")
    record = json.loads(legacy.read_text())
    del record[ITEM_KEY]
    legacy.write_text(json.dumps(record))  # no key: not known to answer this item
    script = {f"q{i}": [str(i)] for i in range(4)}
    again = ScriptedPredictor(script)
    result = _evaluate(again, items, out)
    assert sorted(again.calls) == sorted(result.redone) == ["q0", "q1", "q2", "q3"]
    assert result.value("exact_match") == 1.0  # the new answers, not the stale ones

    items[2]["messages"][0]["content"] = "changed again"
    subset = ScriptedPredictor(script)
    result = _evaluate(subset, [items[0], items[2], items[3]], out)
    assert subset.calls == ["q2"] and result.redone == ["q2"]
    resumed = ScriptedPredictor(script)
    assert _evaluate(resumed, items, out).redone == [] and resumed.calls == []


def test_a_refused_item_is_named_once_in_its_rejection():
    from vlrollout.eval.runner import refusal
    from vlrollout.eval.tasks import get_task
    from vlrollout.ledger import NothingAccepted

    item = {"id": "it-7", "images": ["a.png"], "expression": "the box"}
    refused = refusal(get_task("refcoco"), item)
    assert refused["reason"] == "not_scorable"
    record = {
        "item": f"item {refused['id']}",
        "reason": refused["reason"],
        "detail": refused["detail"],
    }
    assert str(NothingAccepted("the evaluation", 1, [record])).count("it-7") == 1


@pytest.mark.parametrize(
    ("media", "reason", "words"),
    [
        ({"images": "img/r0.png"}, "bad_images", "images must be a list, got a str"),
        ({"image": "img/r0.png"}, "media_field_unsupported", "field 'image'"),
    ],
)
def test_a_malformed_media_field_is_named_as_validate_data_names_it(media, reason, words):
    """The task's own check ("missing field 'images'") had hidden what is wrong with the field."""
    from vlrollout.eval.runner import refusal
    from vlrollout.eval.tasks import get_task

    item = {"id": "h", "boxes": [[1, 1, 20, 20]], "expression": "x", **media}
    refused = refusal(get_task("refcoco"), item)
    assert refused["reason"] == reason and words in refused["detail"]


@pytest.mark.parametrize("split", [["a"], {"name": "a"}, True, 1.5])
def test_a_split_that_is_not_a_name_is_refused(split):
    """A list split had made its own row "split ['a']" in the per-split table."""
    from vlrollout.eval.runner import refusal
    from vlrollout.eval.tasks import get_task

    item = {"id": "s", "answer": 3, "question": "How many?", "split": split}
    refused = refusal(get_task("count"), item)
    assert refused["reason"] == "bad_row" and "field 'split'" in refused["detail"]
    assert refusal(get_task("count"), {**item, "split": "val"}) is None
    assert refusal(get_task("count"), {**item, "split": 2017}) is None
