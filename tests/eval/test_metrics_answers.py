"""VQA answer normalisation and accuracy: hand-derived cases from the official evaluation's rules,
and lmms-eval's ``EvalAIAnswerProcessor`` (its copy of those rules) when lmms-eval is installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from vlrollout.rewards.vqa_answers import (
    CONTRACTIONS,
    match_choice_text,
    normalize_answer,
    process_digit_article,
    process_punctuation,
    vqa_accuracy,
)

PUNCTUATION_CASES = [
    ("black-and-white", "black and white"),  # no space next to the mark: it becomes a space
    ("yes, sir.", "yes sir"),  # "," before a space: deleted; a final period: deleted
    ("well - done", "well  done"),  # " -": deleted
    ("1,000", "1000"),  # a comma between digits: every mark deleted
    ("e.g. 1,5 (x)", "eg 15 x"),
    ("3.5 m", "3.5 m"),  # a period before a digit stays
    ("red/blue?", "red blue "),
]
DIGIT_ARTICLE_CASES = [
    ("The Two dogs", "2 dogs"),
    ("an apple and a pear", "apple and pear"),
    ("none", "0"),
    ("dont", "don't"),
    ("couldnt've", "couldn't've"),
    ("Im", "im"),  # the table's "Im" is capitalised: lower-cased words never match it
    ("somebody'd", "somebodyd"),  # the official table's one reversed entry
    ("lets go", "lets go"),  # no "lets" key: ambiguous with the verb
]


@pytest.mark.parametrize(("text", "expected"), PUNCTUATION_CASES)
def test_punctuation(text, expected):
    assert process_punctuation(text) == expected


@pytest.mark.parametrize(("text", "expected"), DIGIT_ARTICLE_CASES)
def test_digits_articles_contractions(text, expected):
    assert process_digit_article(text) == expected


def test_vqa_accuracy_leaves_each_human_answer_out():
    # Ten answers, k of them equal to the prediction: leaving out a matching one leaves k - 1
    # matches, another leaves k; each scores min(1, matches / 3).
    one = ["2"] + ["3"] * 9  # 1 x 0 + 9 x 1/3
    assert vqa_accuracy("2", one) == pytest.approx(0.3)
    three = ["2"] * 3 + ["3"] * 7  # 3 x 2/3 + 7 x 1
    assert vqa_accuracy("Two.", three) == pytest.approx(0.9)
    assert vqa_accuracy("2", ["2"] * 4 + ["3"] * 6) == pytest.approx(1.0)
    assert vqa_accuracy("4", three) == 0.0
    assert vqa_accuracy("The dog\n", "dog") == 1.0  # one gold answer: exact match
    assert vqa_accuracy("dogs", "dog") == 0.0
    assert normalize_answer("\tA Red-Car!") == "red car"


def test_choice_text():
    choices = ["red car", "blue car", "car"]
    assert match_choice_text("Blue car.", choices) == 1  # equal after normalisation
    assert match_choice_text("I think it is the red car", choices) is None  # "car" also inside
    assert match_choice_text("I think it is the red car", choices[:2]) == 0
    assert match_choice_text("a bike", choices) is None


def _lmms_processor():
    spec = importlib.util.find_spec("lmms_eval")  # finds the package without running __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("lmms-eval is not installed (pip install --no-deps lmms-eval==0.7.3)")
    path = (
        Path(next(iter(spec.submodule_search_locations))) / "tasks/_task_utils/vqa_eval_metric.py"
    )
    module_spec = importlib.util.spec_from_file_location("lmms_vqa_eval_metric", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.EvalAIAnswerProcessor()


def test_normalisation_equals_lmms_eval_vqa_processor():
    lmms = _lmms_processor()
    assert lmms.CONTRACTIONS == CONTRACTIONS
    texts = [t for t, _ in PUNCTUATION_CASES + DIGIT_ARTICLE_CASES]
    texts += ["Two dogs, 1,000 cats.", "isnt it? (yes)", "the end...", "a.m. 3.5", "x" + "." * 40]
    for text in texts:
        assert process_punctuation(text) == lmms.process_punctuation(text), text
        assert process_digit_article(text) == lmms.process_digit_article(text), text


def test_a_short_list_of_answers_is_matched_by_any_of_them():
    """VQA's leave-one-out rule needs its ten annotators; a list of a few accepted answers
    (DocVQA, ChartQA) is exact match against any of them, as lmms-eval scores those sets."""
    assert vqa_accuracy("yes", ["yes"]) == 1.0
    assert vqa_accuracy("1/8/93", ["1/8/93", "01/08/1993"]) == 1.0
    assert vqa_accuracy("01/08/1993", ["1/8/93", "01/08/1993"]) == 1.0
    assert vqa_accuracy("no", ["yes", "yeah"]) == 0.0
    assert vqa_accuracy("2", ["2"] * 3 + ["3"] * 6) == 1.0  # nine: not VQA's ten
