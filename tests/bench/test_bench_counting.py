"""``bench/bench_counting.py``'s slicing, on fabricated answers to synthetic counting items.

The benchmark decodes a model (seconds per model); what is checked here is what its rows mean:
each slice holds the items it names, an answer is right exactly when the count reward says so,
and the wrong answers are counted per (true count, answer).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from bench_counting import background_of, breakdown, wrong_answers  # noqa: E402

from vlrollout.tiny.synthetic import BACKGROUNDS, make_item  # noqa: E402


@pytest.fixture(scope="module")
def items():
    return [make_item("count", 31, i) for i in range(80)]


def _by_name(slices):
    return {s.name: s for s in slices}


def test_every_background_is_named_and_found(items):
    names = {background_of(it) for it in items}
    assert names == {"white", "light grey", "dark grey"}
    assert len(BACKGROUNDS) == 3


def test_the_solutions_are_right_in_every_slice(items):
    slices = breakdown(items, [f"{it['answer']}" for it in items])
    assert all(s.accuracy == 1.0 for s in slices)
    by = _by_name(slices)
    assert by["all"].n == len(items)
    assert sum(by[f"{k} shapes"].n for k in range(1, 5)) == len(items)
    assert sum(s.n for s in slices if s.name.startswith("background ")) == len(items)
    assert sum(s.n for s in slices if s.name.startswith("size ")) == len(items)


def test_a_constant_answer_is_right_only_on_its_own_count(items):
    slices = _by_name(breakdown(items, ["two"] * len(items)))  # number words are read, too
    assert slices["2 shapes"].accuracy == 1.0
    assert all(slices[f"{k} shapes"].accuracy == 0.0 for k in (1, 3, 4))
    twos = sum(it["answer"] == 2 for it in items)
    assert slices["all"].accuracy == pytest.approx(twos / len(items))


def test_wrong_answers_only_on_one_background(items):
    """Wrong on dark grey, right elsewhere: the dark slice is 0, the others 1."""
    answers = [
        str(it["answer"] + 1) if background_of(it) == "dark grey" else str(it["answer"])
        for it in items
    ]
    by = _by_name(breakdown(items, answers))
    assert by["background dark grey"].accuracy == 0.0
    assert by["background white"].accuracy == by["background light grey"].accuracy == 1.0
    wrong = wrong_answers(items, answers, top=10)
    dark = [it for it in items if background_of(it) == "dark grey"]
    assert sum(times for _, _, times in wrong) == len(dark)
    assert all(answer == str(count + 1) for count, answer, _ in wrong)


def test_a_model_with_no_wrong_answer_prints_an_empty_table(items):
    """All right: no wrong answers, and the table of them prints its header alone."""
    import record

    assert wrong_answers(items, [str(it["answer"]) for it in items]) == []
    table = record.Table(["model", "true count", "answer", "times"], [], title="wrong")
    assert table.text().splitlines() == ["wrong", "model  true count  answer  times"]
