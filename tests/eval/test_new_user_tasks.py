"""Tasks on the items a new user's downloads hold: references that tokenize to nothing, boxes
at the edge of a threshold."""

from __future__ import annotations

import pytest

from vlrollout.eval.tasks import get_task


def test_a_caption_item_whose_only_reference_is_punctuation_is_refused_by_name():
    """COCO's PTB tokenizer drops punctuation tokens, so a reference of "..." is an empty
    reference: no prediction can match it, and scoring the item would put a 0 in the split's
    numbers that says nothing about the model. It is refused, naming the field."""
    task = get_task("caption")
    item = {"id": "2", "images": ["x.jpg"], "captions": ["...", " , ! "]}
    why = task.check_item(item)
    assert why is not None and "captions" in why
    assert task.check_item({**item, "captions": ["...", "A red square."]}) is None


def test_a_box_with_exactly_half_the_overlap_counts_for_acc_at_one_half():
    """Qwen2-VL writes integers in 0-1000; on a 100 x 80 image the true box [10, 20, 40, 60]
    and a prediction covering its left half, [10, 20, 25, 60], have IoU 1/2 exactly (hand-derived:
    15 x 40 over 30 x 40). Normalising to 0-1 leaves the float a hair below 0.5; the report then
    shows IoU 0.5000 beside ACC@0.5 = 0. A tie is ACC@0.5 (IoU >= 0.5), not ACC@0.7."""
    task = get_task("refcoco")
    item = {"id": "1-1", "images": ["x.jpg"], "expression": "left", "boxes": [[10, 20, 40, 60]]}
    geometry = [
        {"original_width": 100, "original_height": 80, "model_width": 112, "model_height": 84}
    ]
    half = task.score(item, "<|box_start|>(100,250),(250,750)<|box_end|>", geometry, "qwen2_vl")
    assert abs(half.values["IoU"] - 0.5) < 1e-12
    assert half.values["ACC@0.5"] == 1.0 and half.values["ACC@0.7"] == 0.0
    whole = task.score(item, "<|box_start|>(100,250),(400,750)<|box_end|>", geometry, "qwen2_vl")
    assert whole.values["IoU"] == 1.0 and whole.values["ACC@0.9"] == 1.0


def test_answers_as_tables_store_them_are_scored_not_refused():
    """Columns as parquet/pandas hand them over: a VQA answer column of integers (`2`), a count
    column that became float because of a null elsewhere (`2.0`), a multiple-choice answer whose
    text differs from its choice only in case (`"Blue"` for `"blue"`). Each is the answer it
    reads as; a non-integral count (`2.5`) is still refused."""
    vqa, count, mc = get_task("vqa"), get_task("count"), get_task("mc")
    base = {"id": "x", "question": "How many?", "images": ["i.jpg"]}
    # Three accepted answers, all "2": exact match against any of them.
    for answer, right in ((2, 1.0), ([2, 2, "2"], 1.0)):
        item = {**base, "answer": answer}
        assert vqa.check_item(item) is None, answer
        assert vqa.score(item, "2", [], "qwen2_vl").values["exact_match"] == right
        assert vqa.score(item, "3", [], "qwen2_vl").values["exact_match"] == 0.0
    item = {**base, "answer": 2.0}
    assert count.check_item(item) is None
    assert count.score(item, "There are 2.", [], "qwen2_vl").values["exact_match"] == 1.0
    assert count.check_item({**base, "answer": 2.5}) is not None
    item = {**base, "choices": ["red", "blue"], "answer": "Blue"}
    assert mc.check_item(item) is None
    assert mc.score(item, "B", [], "qwen2_vl").values["exact_match"] == 1.0
    assert mc.score(item, "A", [], "qwen2_vl").values["exact_match"] == 0.0


def test_a_true_box_of_strings_or_booleans_is_refused_naming_the_field():
    """A JSONL written by hand or a CSV export: `"boxes": [["1", "2", "30", "40"]]` or a `true`
    among the numbers. `vlrollout validate-data` refuses both (4 numbers); the eval task read them
    as 1.0 and scored against a box the file does not hold. Refused, naming the field `boxes`."""
    task = get_task("refcoco")
    item = {"id": "x", "images": ["a.jpg"], "expression": "the dog"}
    for boxes in ([["1", "2", "30", "40"]], [[True, 2, 30, 40]], ["1", "2", "30", "40"]):
        why = task.check_item({**item, "boxes": boxes})
        assert why is not None and "'boxes'" in why, boxes
    assert task.check_item({**item, "boxes": [[1, 2.5, 30, 40]]}) is None
    assert task.check_item({**item, "boxes": [1, 2.5, 30, 40]}) is None


def test_vqav2_answers_as_published_are_read():
    """lmms-lab/VQAv2 keeps its ten answers as {answer, answer_confidence, answer_id} structs;
    lmms-eval reads each one's answer."""
    vqa = get_task("vqa")
    answers = [{"answer": "2", "answer_confidence": "yes", "answer_id": k} for k in range(1, 4)]
    answers += [{"answer": "3", "answer_confidence": "maybe", "answer_id": k} for k in range(4, 11)]
    item = {"id": "x", "question": "How many?", "images": ["i.jpg"], "answer": answers}
    assert vqa.check_item(item) is None
    assert vqa.score(item, "two", [], "qwen2_vl").values["exact_match"] == pytest.approx(0.9)
