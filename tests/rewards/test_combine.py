"""WeightedSum: totals, per-component values and reasons."""

import pytest

from vlrollout.rewards.answer import CountReward, clevr_count_reward
from vlrollout.rewards.combine import WeightedSum
from vlrollout.rewards.format import ThinkAnswerFormat


def test_weighted_sum_total_and_components():
    r = WeightedSum([(CountReward(), 1.0), (ThinkAnswerFormat(), 0.5), (clevr_count_reward, 0.25)])
    good = "<think>x</think><answer>3</answer>"
    assert r.components("p", good, [], [], answer="3") == {
        "count": 1.0, "format": 1.0, "clevr_count_reward": 1.0,
    }  # fmt: skip
    assert r("p", good, [], [], answer="3") == pytest.approx(1.0 + 0.5 + 0.25)
    # wrong count, bad format: 0*1 + 0*0.5 + 0*0.25, and both rule-decided reasons are kept
    res = r.score("p", "<answer>four</answer>", [], [], answer="3")
    assert res.value == 0.0
    assert res.details["format/reason"] == "missing_think"
    assert res.reason == "format: missing_think"


def test_duplicate_names_and_bad_terms():
    r = WeightedSum([(CountReward(), 1.0), (CountReward(tolerance=1), 1.0)])
    assert r.names == ["count", "count_2"]
    with pytest.raises(TypeError, match="pair"):
        WeightedSum([CountReward()])
    with pytest.raises(ValueError, match="at least one"):
        WeightedSum([])


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), "2", None, True])
def test_a_weight_that_is_not_a_finite_number_is_refused_naming_the_term(weight):
    with pytest.raises(ValueError, match=r"terms\[1\]'s weight"):
        WeightedSum([(CountReward(), 1.0), (CountReward(), weight)])
