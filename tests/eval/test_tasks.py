"""The shipped eval tasks: what each refuses, how one completion scores, what aggregate returns."""

from __future__ import annotations

import pytest

from vlrollout.eval.tasks import TASKS, EvalTask, ItemScore, get_task
from vlrollout.readers.prompts import TASK_PROMPTS

GEO = [{"original_width": 100, "original_height": 100, "model_width": 100, "model_height": 100}]


def test_task_table():
    assert sorted(TASKS) == ["caption", "count", "mc", "refcoco", "vqa"]
    expected = {
        "refcoco": ("ACC@0.5", "ACC@0.5"),
        "caption": ("CIDEr-D", None),
        "count": ("exact_match", "exact_match"),
        "mc": ("exact_match", "exact_match"),
        "vqa": ("exact_match", "exact_match"),
    }
    assert {n: (t.primary, t.correct_key) for n, t in TASKS.items()} == expected
    assert all(get_task(n).name == n for n in TASKS)
    assert all(isinstance(t, EvalTask) and t.prompt == TASK_PROMPTS[n] for n, t in TASKS.items())
    with pytest.raises(ValueError, match="unknown eval task 'ocr'; known tasks: refcoco, caption"):
        get_task("ocr")


REFCOCO_OK = {"id": "r", "boxes": [[10, 10, 50, 50]], "expression": "dog", "images": ["a.png"]}
REFUSALS = [
    ("refcoco", {**REFCOCO_OK, "boxes": None}, "missing field 'boxes'"),
    ("refcoco", {**REFCOCO_OK, "boxes": [[1, 1, 5, 5], [2, 2, 6, 6]]}, "holds 2 boxes"),
    ("refcoco", {**REFCOCO_OK, "boxes": [5, 5, 1, 9]}, "inverted_box"),
    ("refcoco", {**REFCOCO_OK, "boxes": [5, 5, 5, 9]}, "degenerate_box"),
    ("refcoco", {**REFCOCO_OK, "expression": ""}, "missing field 'expression'"),
    ("refcoco", {**REFCOCO_OK, "images": []}, "missing field 'images'"),
    ("caption", {"id": "c", "captions": [], "images": ["a"]}, "field 'captions' is an empty list"),
    ("caption", {"id": "c", "images": ["a"]}, "missing field 'captions'"),
    ("caption", {"id": "c", "captions": ["a dog", 3], "images": ["a"]}, "caption 2 of 2 is not a"),
    ("count", {"id": "n", "answer": "many", "question": "How many?"}, "field 'answer' = 'many'"),
    ("count", {"id": "n", "answer": 3}, "missing field 'question'"),
    ("count", {"id": "n", "answer": -1, "question": "How many?"}, "= -1 is not one count"),
    ("count", {"id": "n", "answer": "-2", "question": "How many?"}, "= '-2' is not one count"),
    (
        "mc",
        {"id": "m", "answer": "a", "choices": ["the", "a", "an"], "question": "?"},
        "both the letter of choice A and the text of choice B",
    ),
    (
        "mc",
        {"id": "m", "answer": "A", "choices": ["B", "A", "C"], "question": "?"},
        "both the letter of choice A and the text of choice B",
    ),
    ("mc", {"id": "m", "answer": "C", "choices": ["x", "y"], "question": "?"}, "letter A-B"),
    ("mc", {"id": "m", "answer": "A", "choices": ["x"], "question": "?"}, "'choices'"),
    ("mc", {"id": "m", "answer": 2, "choices": ["x", "y"], "question": "?"}, "0-based index"),
    (
        "mc",
        {"id": "m", "answer": "red", "choices": ["red", "blue", "red"], "question": "?"},
        "choices 1 and 3 are both 'red'",
    ),
    ("vqa", {"id": "v", "answer": None, "question": "?"}, "missing field 'answer'"),
    ("vqa", {"id": "v", "answer": [], "question": "?"}, "field 'answer' = []"),
    ("vqa", {"id": "v", "answer": "", "question": "?"}, "field 'answer' is blank"),
    ("count", {"id": "n", "question": "How many?"}, "missing field 'answer' (the true count)"),
    ("count", {"id": "n", "answer": " ", "question": "?"}, "field 'answer' is blank"),
    ("mc", {"id": "m", "choices": ["x", "y"], "question": "?"}, "missing field 'answer'"),
]


@pytest.mark.parametrize(("task", "item", "reason"), REFUSALS)
def test_check_item_names_the_field(task, item, reason):
    why = get_task(task).check_item(item)
    assert why is not None and reason in why


@pytest.mark.parametrize(
    ("task", "item"),
    [
        ("refcoco", REFCOCO_OK),
        ("refcoco", {**REFCOCO_OK, "expression": None, "messages": [{"role": "user"}]}),
        ("caption", {"id": "c", "captions": ["a dog"], "images": ["a"]}),
        ("count", {"id": "n", "answer": "3", "question": "How many?"}),
        ("mc", {"id": "m", "answer": 1, "choices": ["x", "y"], "question": "?"}),
        ("mc", {"id": "m", "answer": "y", "choices": ["x", "y"], "question": "?"}),
        ("mc", {"id": "m", "answer": "B", "choices": ["A", "B", "C"], "question": "?"}),
        ("vqa", {"id": "v", "answer": ["yes"] * 10, "messages": [{"role": "user"}]}),
    ],
)
def test_check_item_accepts_complete_items(task, item):
    assert get_task(task).check_item(item) is None


def _score(task: str, item: dict, completion: str) -> ItemScore:
    return get_task(task).score(item, completion, GEO, "qwen2_vl")


@pytest.mark.parametrize(
    ("completion", "value", "pred", "reason"),
    [
        ("<answer>three</answer>", 1.0, "3", None),
        ("I count [3] cubes", 1.0, "3", None),
        ("4", 0.0, "4", None),
        ("no idea", 0.0, None, "no_number"),
    ],
)
def test_count_scores(completion, value, pred, reason):
    score = _score("count", {"id": "n", "answer": "3", "split": "val"}, completion)
    assert (score.values, score.details["prediction"], score.details["reason"]) == (
        {"exact_match": value},
        pred,
        reason,
    )
    assert score.split == "val"


MC = {"id": "m", "answer": 1, "choices": ["red car", "blue car"], "question": "?"}


@pytest.mark.parametrize(
    ("completion", "value", "pred", "reason"),
    [
        ("The answer is (B).", 1.0, "B", None),
        ("A", 0.0, "A", None),
        ("It is the blue car.", 1.0, "B", None),  # no letter: the choice's text
        ("(A) or (B)", 0.0, None, "ambiguous_choice"),
        ("a bike", 0.0, None, "no_choice"),
    ],
)
def test_choice_scores(completion, value, pred, reason):
    score = _score("mc", MC, completion)
    assert (score.values["exact_match"], score.details["prediction"]) == (value, pred)
    assert score.details["reason"] == reason


def test_vqa_scores_with_human_answers_or_one_answer():
    item = {"id": "v", "answer": ["2"] * 3 + ["3"] * 7, "question": "?"}
    assert _score("vqa", item, "<answer>Two.</answer>").values["exact_match"] == pytest.approx(0.9)
    one = _score("vqa", {"id": "v", "answer": "the dog"}, "Dog")
    assert one.values == {"exact_match": 1.0} and one.split == "all"
    assert _score("vqa", {"id": "v", "answer": "dog"}, " ").details["reason"] == "empty_answer"


def test_caption_reads_the_answer_block():
    item = {"id": "c", "captions": ["a dog runs"], "images": ["a"]}
    score = _score("caption", item, "<think>hmm</think><answer> A dog runs. </answer>")
    assert score.details["prediction"] == "A dog runs."
    assert score.values["ROUGE-L"] == 1.0


def test_aggregate_is_over_the_scores_it_is_given():
    """The evaluator passes one split's scores for that split's metrics."""
    task = get_task("count")
    items = [{"id": f"n{i}", "answer": 2, "split": s} for i, s in enumerate(["a", "a", "b"])]
    scores = [task.score(it, c, GEO, "x") for it, c in zip(items, ["2", "5", "2"], strict=True)]
    assert [s.split for s in scores] == ["a", "a", "b"]
    assert task.aggregate(scores, {}) == {"exact_match": pytest.approx(2 / 3)}
    assert task.aggregate(scores[:2], {}) == {"exact_match": 0.5}
    assert task.aggregate([], {}) == {}


def test_refcoco_needs_the_image_geometry():
    with pytest.raises(ValueError, match="item r: no image geometry"):
        get_task("refcoco").score(REFCOCO_OK, "[0.1, 0.1, 0.5, 0.5]", [], "llava")


def test_a_digit_string_answer_is_a_choice_index_unless_it_is_also_another_choices_text():
    """AI2D stores its 0-based answer index as a string ("2" is C); a digit string that is also
    the text of another choice could be either, and is refused rather than guessed."""
    mc = get_task("mc")
    item = {"id": "a", "question": "?", "images": ["i.png"]}
    words = {**item, "choices": ["cat", "dog", "bird", "fish"], "answer": "2"}
    assert mc.check_item(words) is None
    assert mc.score(words, "C", [], "qwen2_vl").values["exact_match"] == 1.0
    zero = {**words, "answer": "0"}
    assert mc.check_item(zero) is None
    assert mc.score(zero, "A", [], "qwen2_vl").values["exact_match"] == 1.0
    numbers = {**item, "choices": ["4", "5", "3", "2"], "answer": "2"}
    problem = mc.check_item(numbers)
    assert problem is not None and "both" in problem and "letter" in problem
    same = {**item, "choices": ["0", "1", "2"], "answer": "1"}  # index 1 is the text "1"
    assert mc.check_item(same) is None
    assert mc.score(same, "B", [], "qwen2_vl").values["exact_match"] == 1.0
    beyond = {**numbers, "answer": "5"}  # no index 5: the text of B
    assert mc.check_item(beyond) is None
    assert mc.score(beyond, "B", [], "qwen2_vl").values["exact_match"] == 1.0


def test_a_superscript_digit_answer_is_not_an_index():
    mc = get_task("mc")
    item = {"id": "a", "question": "?", "images": ["i.png"], "choices": ["red", "blue"]}
    assert mc.check_item({**item, "answer": "\u00b2"}) is not None  # refused, not a crash
