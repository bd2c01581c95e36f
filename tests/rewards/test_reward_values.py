"""A reward's value goes into AReaL's float32 ``rewards`` tensor only when it is a finite
number there: infinity (or a float that overflows float32) would train on inf advantages, and a
string is a reward's bug, not a score."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from vlrollout.ledger import EpisodeRejected
from vlrollout.rewards.caller import RewardCaller
from vlrollout.rewards.for_verl import VerlReward
from vlrollout.rewards.plain import PlainReward


def infinite(prompt, completions, prompt_ids, completion_ids, **data):
    return float("inf")


def minus_infinite(prompt, completions, prompt_ids, completion_ids, **data):
    return float("-inf")


def beyond_float32(prompt, completions, prompt_ids, completion_ids, **data):
    return 1e300


def a_string(prompt, completions, prompt_ids, completion_ids, **data):
    return "0.75"


def not_a_number(prompt, completions, prompt_ids, completion_ids, **data):
    return float("nan")


def nothing(prompt, completions, prompt_ids, completion_ids, **data):
    return None


def largest_float32(prompt, completions, prompt_ids, completion_ids, **data):
    return 3.0e38


@pytest.mark.parametrize(
    ("reward", "words"),
    [
        (infinite, "inf"),
        (minus_infinite, "-inf"),
        (beyond_float32, "float32"),
        (a_string, "'0.75', not a number"),
    ],
)
def test_a_reward_value_that_is_not_a_finite_float32_number_rejects_the_episode(reward, words):
    with pytest.raises(EpisodeRejected) as e:
        asyncio.run(RewardCaller(reward, max_workers=1)("p", "c", [], [], {}))
    assert e.value.reason == "reward_error" and words in e.value.detail


BAD_VALUES = [
    (infinite, "inf"),
    (not_a_number, "NaN"),
    (beyond_float32, "float32"),
    (a_string, "'0.75', not a number"),
    (nothing, "None, not a number"),
]


@pytest.mark.parametrize(("reward", "words"), BAD_VALUES)
def test_the_adapters_refuse_what_the_workflow_refuses(reward, words):
    """verl, EasyR1 and plain Python get the workflow's rule: such a value is a failure with
    its reason (verl/EasyR1: ``failure_score``, ``failed`` 1), never a score that would train."""
    verl = VerlReward(reward, failure_score=-1.0)
    scored = verl("src", "c", "1")
    assert scored["score"] == -1.0 and scored["reason"].startswith("reward_error: ")
    assert words in scored["reason"]
    easy = verl.easyr1({"response": "c", "response_length": 1, "ground_truth": "1"})
    assert easy == {"overall": -1.0, "failed": 1.0}
    with pytest.raises(EpisodeRejected, match="reward_error") as e:
        PlainReward(reward).score("c", answer="1")
    assert words in e.value.detail


def test_a_large_finite_reward_is_kept():
    assert asyncio.run(RewardCaller(largest_float32, max_workers=1)("p", "c", [], [], {})) == 3e38


async def a_coroutine_reward(prompt, completions, prompt_ids, completion_ids, **data):
    return 1.0


def test_a_coroutine_reward_is_refused_when_the_caller_is_built():
    with pytest.raises(TypeError, match="coroutine function"):
        RewardCaller(a_coroutine_reward)


def a_huge_int(prompt, completions, prompt_ids, completion_ids, **data):
    return 10**400


def test_an_int_too_large_for_a_float_rejects_the_episode():
    with pytest.raises(EpisodeRejected) as e:
        asyncio.run(RewardCaller(a_huge_int, max_workers=1)("p", "c", [], [], {}))
    assert e.value.reason == "reward_error" and "not a number" in e.value.detail


def test_plain_reward_refuses_a_reward_of_token_counts():
    """``score(completion)`` has no token ids, so a length penalty would score every completion
    as short (0.0): refused, as the verl adapter refuses it."""
    from vlrollout.rewards import PlainReward

    with pytest.raises(ValueError, match="length_penalty scores the completion's token ids"):
        PlainReward("length_penalty", max_length=10, cache_length=4)


@pytest.mark.parametrize(
    "value", [bytearray(b"1"), np.array(["0.9"]), np.array([b"0.8"]), np.str_("0.7")]
)
def test_digits_in_any_text_container_are_a_rewards_bug_not_a_score(value):
    from vlrollout.rewards.caller import reward_value

    with pytest.raises(EpisodeRejected, match="not a number"):
        reward_value(value)


@pytest.mark.parametrize("completion", [None, b"3", ["3"], {"role": "assistant", "content": "3"}])
def test_a_completion_that_is_not_text_is_refused_not_scored_as_its_repr(completion):
    """A reward reads text: ``None`` had scored as the word "None" (choice A of None/Some),
    ``b"3"`` and ``["3"]`` as 3."""
    from vlrollout.rewards import TRLReward, get_reward

    with pytest.raises(TypeError, match="not text"):
        get_reward("count").score("p", completion, [], [], answer=3)
    with pytest.raises(TypeError, match="not text"):
        PlainReward("choice").score(completion, answer="B", choices=["None", "Some"])
    with pytest.raises(TypeError, match="not text"):
        TRLReward("count")(
            prompts=["p"], completions=[completion], completion_ids=[[1]], answer=[3]
        )


def test_a_label_named_as_a_reward_argument_is_told_to_be_renamed():
    with pytest.raises(ValueError, match="field 'prompt' .* rename it"):
        PlainReward("count").score("3", answer=3, prompt="How many?")
