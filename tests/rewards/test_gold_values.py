"""A gold answer a reward cannot read as one finite number is a data error naming the field,
never a silent 0 (NaN from a parquet null, infinity) or a silent pick among several numbers."""

from __future__ import annotations

import math

import pytest

from vlrollout.rewards import PlainReward


@pytest.mark.parametrize("gold", [math.nan, math.inf, -math.inf, True])
@pytest.mark.parametrize("name", ["numeric", "count"])
def test_a_gold_that_is_not_one_finite_number_is_refused(name, gold):
    with pytest.raises(ValueError, match=r"task_data\['answer'\]"):
        PlainReward(name).score("3", answer=gold)


@pytest.mark.parametrize("name", ["numeric", "count"])
@pytest.mark.parametrize("gold", ["3 or 4", "between 5 and 7"])
def test_a_gold_holding_several_numbers_is_refused(name, gold):
    with pytest.raises(ValueError, match="several numbers"):
        PlainReward(name).score("7", answer=gold)


def test_a_gold_with_one_number_and_words_is_read():
    assert PlainReward("numeric").score("7", answer="7 cm")[0] == 1.0
    assert PlainReward("count").score("three", answer="3 cubes")[0] == 1.0
    assert PlainReward("numeric").score("1,234.5", answer=1234.5)[0] == 1.0


@pytest.mark.parametrize(
    "corpus",
    [
        [["a red square on a blue background", "a red square"]],
        [["a red square"], ["a red square"]],  # copies of one image's references
    ],
)
def test_a_cider_d_corpus_of_one_images_references_is_refused(corpus):
    """CIDEr-D weighs an n-gram by how few images' references hold it: with one image's
    references every weight is 0 and every caption would score 0."""
    with pytest.raises(ValueError, match="references of at least 2 images"):
        PlainReward("cider_d", corpus=corpus)


def test_a_null_label_is_named_as_null():
    with pytest.raises(KeyError, match="'answer' is null"):
        PlainReward("count").score("3", answer=None)


@pytest.mark.parametrize(
    "gold",
    ["three or four", "3 or four", "1/2", "10^3", "1 1/2", "Jan 5, 2020", "3\u20134", [3, 4]],
)
def test_a_count_gold_that_is_not_one_count_is_refused_by_the_reward_and_the_eval(gold):
    from vlrollout.eval.tasks import get_task

    with pytest.raises(ValueError, match=r"task_data\['answer'\]"):
        PlainReward("count").score("4", answer=gold)
    item = {"id": "x", "question": "How many?", "images": ["i.png"], "answer": gold}
    assert get_task("count").check_item(item) is not None


@pytest.mark.parametrize("gold", [[3, 4], {"a": 3}, 3 + 4j, "3 or four"])
def test_a_numeric_gold_that_is_not_one_number_is_refused(gold):
    with pytest.raises(ValueError, match=r"task_data\['answer'\]"):
        PlainReward("numeric").score("4", answer=gold)


def test_counts_as_tables_and_numpy_hold_them_are_read():
    import numpy as np

    from vlrollout.eval.tasks import get_task

    for gold in (3, 3.0, "3", " 3 ", "three", "[3]", np.int64(3), np.float32(3.0), "3 cubes"):
        assert PlainReward("count").score("3", answer=gold)[0] == 1.0, gold
        item = {"id": "x", "question": "How many?", "images": ["i.png"], "answer": gold}
        assert get_task("count").check_item(item) is None, gold
