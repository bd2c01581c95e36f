"""Tasks on the items a new user's downloads hold: references that tokenize to nothing, boxes
at the edge of a threshold."""

from __future__ import annotations

import json

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


def _mc_item(choices, answer="C") -> dict:
    return {
        "id": "m",
        "question": "Which one?",
        "images": ["i.jpg"],
        "choices": choices,
        "answer": answer,
    }


def test_choices_past_the_last_option_are_not_options(tmp_path):
    """A table's fixed option columns exported as one list: nulls (or blanks) after the last
    option are no options, as lmms-eval skips MMBench's NaN options; the prompt lists three and
    an answer "D" is no choice. A null or blank before an option with text is refused, naming
    both letters."""
    from vlrollout.readers.prompts import TASK_PROMPTS, with_prompt
    from vlrollout.readers.rows import jsonl_items as read_items

    lines = [
        _mc_item(["cedar", "elm", "oak", None, None]),
        {**_mc_item(["cedar", "elm", "oak", ""]), "id": "n"},
        {**_mc_item(["cedar", None, "oak"]), "id": "gap"},
        {**_mc_item(["cedar", "  ", "oak"]), "id": "blank"},
    ]
    data = tmp_path / "mc.jsonl"
    data.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    items = {item["id"]: item for item in read_items(data)}
    mc = get_task("mc")
    for key in ("m", "n"):
        assert items[key]["choices"] == ["cedar", "elm", "oak"]
        assert mc.check_item(items[key]) is None
        assert "D." not in str(with_prompt(items[key], TASK_PROMPTS["mc"])["messages"])
        assert mc.score(items[key], "D", [], "qwen2_vl").values["exact_match"] == 0.0
        assert mc.score(items[key], "C", [], "qwen2_vl").values["exact_match"] == 1.0
    for key, letter in (("gap", "B"), ("blank", "B")):
        detail = items[key]["_load_error"]["detail"]
        assert f"option {letter}" in detail and "option C" in detail, detail


def test_a_null_option_given_to_the_task_directly_is_refused_by_letter():
    mc = get_task("mc")
    why = mc.check_item(_mc_item(["cedar", "elm", "oak", None]))
    assert why is not None and "option D" in why


def test_choices_keyed_by_letter_are_read_in_letter_order(tmp_path):
    from vlrollout.readers.rows import jsonl_items as read_items

    lines = [
        _mc_item({"B": "elm", "A": "cedar", "C": "oak"}),
        {**_mc_item({"A": "cedar", "C": "oak"}), "id": "skip"},
    ]
    data = tmp_path / "mc.jsonl"
    data.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    items = {item["id"]: item for item in read_items(data)}
    assert items["m"]["choices"] == ["cedar", "elm", "oak"]
    assert get_task("mc").score(items["m"], "C", [], "qwen2_vl").values["exact_match"] == 1.0
    detail = items["skip"]["_load_error"]["detail"]
    assert "field choices" in detail and "A, C" in detail
    why = get_task("mc").check_item(_mc_item({"A": "cedar", "B": "oak"}))
    assert why is not None and "dict" in why and "missing" not in why


def test_vqa_answers_with_a_blank_human_answer_are_scored_by_the_vqa_rule():
    """VQA's ten answers, one of them blank: a human answer that matches no prediction, kept in
    the ten as the official evaluation keeps it. (Hand-derived: 4 of 10 say "kite"; leaving out
    a "kite" answer leaves 3 matches (1), any other leaves 4 (1): accuracy 1.)"""
    vqa = get_task("vqa")
    answers = ["kite"] * 4 + ["bird"] * 5 + [""]
    item = {"id": "v", "question": "What flies?", "images": ["i.jpg"], "answer": answers}
    assert vqa.check_item(item) is None
    assert vqa.score(item, "kite", [], "qwen2_vl").values["exact_match"] == 1.0
    # "bird": 5 matches; leaving out a bird leaves 4 (1), anything else 5 (1)
    assert vqa.score(item, "plane", [], "qwen2_vl").values["exact_match"] == 0.0
    assert vqa.score(item, "", [], "qwen2_vl").values["exact_match"] == 0.0


def test_a_null_vqa_answer_is_refused_naming_its_place():
    vqa = get_task("vqa")
    answers = ["kite"] * 6 + [None] + ["bird"] * 3
    why = vqa.check_item({"id": "v", "question": "?", "images": ["i.jpg"], "answer": answers})
    assert why is not None and "answer 7 of 10" in why and "None" in why


def test_numeric_vqa_answers_are_their_text():
    """A float answer column (ChartQA-style values): 2.5 is "2.5", 3.0 is "3"."""
    vqa = get_task("vqa")
    base = {"id": "v", "question": "Value?", "images": ["i.jpg"]}
    for answer, right in ((2.5, "2.5"), (3.0, "3"), ([17.25, 4.0], "4")):
        item = {**base, "answer": answer}
        assert vqa.check_item(item) is None, answer
        assert vqa.score(item, right, [], "qwen2_vl").values["exact_match"] == 1.0, answer


def test_a_refcoco_true_box_off_the_image_or_in_fractions_is_not_scored():
    """A true box wholly outside the 120 x 90 image can overlap no prediction, and one whose
    coordinates are all fractions of 1 is under a pixel: each is a label error, never a 0."""
    task = get_task("refcoco")
    geometry = [
        {"original_width": 120, "original_height": 90, "model_width": 112, "model_height": 84}
    ]
    base = {"id": "r", "images": ["x.jpg"], "expression": "the cup"}
    answer = "<|box_start|>(100,100),(500,500)<|box_end|>"
    for boxes, words in (([[130, 10, 160, 40]], "outside"), ([[0.2, 0.1, 0.6, 0.5]], "fractions")):
        with pytest.raises(ValueError, match=words) as info:
            task.score({**base, "boxes": boxes}, answer, geometry, "qwen2_vl")
        assert "'boxes'" in str(info.value)
    scored = task.score({**base, "boxes": [[110, 80, 150, 120]]}, answer, geometry, "qwen2_vl")
    assert scored.values["IoU"] == 0.0  # partly on the image: scored, as lmms-eval does
