"""Format reward and length penalty."""

import pytest

from vlrollout.rewards.format import LengthPenalty, ThinkAnswerFormat


@pytest.mark.parametrize(
    ("text", "value", "reason"),
    [
        ("<think>a</think><answer>b</answer>", 1.0, None),
        ("\n<think>\na\n</think>\n\n<answer> b </answer>\n", 1.0, None),
        ("<answer>b</answer>", 0.0, "missing_think"),
        ("<think>a</think>", 0.0, "missing_answer"),
        ("<think>a</think><answer>b</answer><answer>c</answer>", 0.0, "repeated_tag"),
        ("<answer>b</answer><think>a</think>", 0.0, "wrong_order"),
        ("<think> </think><answer>b</answer>", 0.0, "empty_think"),
        ("<think>a</think><answer></answer>", 0.0, "empty_answer"),
        ("Sure! <think>a</think><answer>b</answer>", 0.0, "text_outside_tags"),
        ("<think>a</think><answer>b</answer> PS", 0.0, "text_outside_tags"),
    ],
)
def test_think_answer_format(text, value, reason):
    r = ThinkAnswerFormat().score("p", text, [], [])
    assert (r.value, r.reason) == (value, reason)


def test_think_in_prompt():
    r = ThinkAnswerFormat(think_in_prompt=True)
    assert r("p", "reasoning</think><answer>4</answer>", [], []) == 1.0
    assert r.score("p", "<think>x</think><answer>4</answer>", [], []).reason == "repeated_tag"


def test_length_penalty_hand_computed():
    # max 100, cache 20: free up to 80 tokens; 90 tokens -> (80 - 90) / 20 = -0.5
    p = LengthPenalty(max_length=100, cache_length=20)
    assert [p("p", "", [], [0] * n) for n in (0, 80, 90, 100, 101)] == [0.0, 0.0, -0.5, -1.0, -1.0]
    with pytest.raises(ValueError, match="cache_length"):
        LengthPenalty(max_length=10, cache_length=11)
