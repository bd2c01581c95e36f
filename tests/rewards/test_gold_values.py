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
