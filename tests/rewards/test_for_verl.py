"""``VerlReward``, called the way verl's ``NaiveRewardManager`` and EasyR1's function reward
managers call a reward function (their contracts as read from their sources; neither package
installs here without GPU libraries), and ``PlainReward``: the scores equal our
``RewardCaller``'s on the same completions, failures come with their reasons."""

import asyncio
import json
import re
from functools import partial

import pytest

from vlrollout.rewards.caller import RewardCaller
from vlrollout.rewards.for_verl import VerlReward
from vlrollout.rewards.plain import PlainReward
from vlrollout.rewards.registry import get_reward

GEOMETRY = [{"original_width": 200, "original_height": 100, "model_width": 112, "model_height": 56}]
BOXES = [[20, 10, 100, 50]]
COMPLETIONS = [
    '{"bbox_2d": [11.2, 5.6, 56, 28]}',  # the label box in the model frame: IoU 1
    '{"bbox_2d": [0, 0, 30, 20]}',
    "no box",
    '{"bbox_2d": [50, 20, 10, 40]}',  # inverted
]
CAPTIONS = [["a red square and a blue circle", "two shapes"], ["a green triangle", "one shape"]]


def _caller(reward, completion, labels):
    return asyncio.run(RewardCaller(reward)("", completion, [], [], labels))


def test_verl_compute_score_equals_the_reward_caller_with_reasons():
    reward = get_reward("giou", family="qwen2_5_vl")
    verl = VerlReward(reward)
    truth = json.dumps({"boxes": BOXES})
    got = [
        verl(
            data_source="refcoco",
            solution_str=c,
            ground_truth=truth,
            extra_info={"geometry": GEOMETRY},
        )
        for c in COMPLETIONS
    ]
    ours = [_caller(reward, c, {"boxes": BOXES, "geometry": GEOMETRY}) for c in COMPLETIONS]
    assert [g["score"] for g in got] == pytest.approx(ours)
    assert ours[0] == pytest.approx(1.0) and ours[1] != ours[2]
    assert [g["reason"] for g in got] == ["", "", "no_box", "inverted_box"]
    assert {frozenset(g) for g in got} == {
        frozenset({"score", "reason"})
    }  # verl aligns keys per sample


def test_verl_reward_error_is_a_reason_not_a_crash():
    verl = VerlReward("iou", family="qwen2_5_vl", failure_score=-1.0)
    got = verl("refcoco", COMPLETIONS[0], json.dumps({"boxes": BOXES}))  # no geometry anywhere
    assert got["score"] == -1.0 and got["reason"].startswith("reward_error: ")
    assert verl.reasons == {"reward_error": 1}


def test_easyr1_batch_and_sequential_forms_equal_the_reward_caller():
    items = [{"captions": c} for c in CAPTIONS]
    reward = get_reward("cider_d", items=items)
    easyr1 = VerlReward(reward)
    # EasyR1 binds reward_function_kwargs with functools.partial and passes RewardInput dicts.
    batch = partial(easyr1.easyr1)
    texts = ["a red square and a blue circle", "a green square", ""]
    inputs = [
        {
            "response": t,
            "response_length": len(t.split()),
            "ground_truth": json.dumps({"captions": CAPTIONS[0]}),
        }
        for t in texts
    ]
    got = batch(inputs)
    ours = [_caller(reward, t, {"captions": CAPTIONS[0]}) for t in texts]
    assert [g["overall"] for g in got] == pytest.approx(ours) and ours[0] > ours[1] > 0
    assert [g["failed"] for g in got] == [0.0, 0.0, 1.0]
    assert all(isinstance(v, float) for g in got for v in g.values())  # EasyR1 averages every key
    assert easyr1.easyr1(inputs[1]) == got[1]
    assert easyr1.reasons == {"empty_caption": 1}


def test_hostile_completion_is_not_read_and_says_why():
    verl = VerlReward("count")
    got = verl("clevr", "x" * 1_000_000 + " 3", "3")
    assert got == {"score": 0.0, "reason": "output_too_long"}
    assert PlainReward("count").score("3 " + "x" * 1_000_000, answer=3) == (0.0, "output_too_long")


def test_plain_reward_equals_the_reward_caller():
    reward = get_reward("iou", family="qwen2_5_vl")
    plain = PlainReward(reward)
    for c in COMPLETIONS:
        value, _ = plain.score(c, boxes=BOXES, geometry=GEOMETRY)
        assert value == pytest.approx(_caller(reward, c, {"boxes": BOXES, "geometry": GEOMETRY}))
    assert plain(COMPLETIONS[2], boxes=BOXES, geometry=GEOMETRY) == 0.0
    with pytest.raises(TypeError, match="already built"):
        PlainReward(reward, family="qwen2_vl")
    with pytest.raises(KeyError, match="boxes"):
        plain.score(COMPLETIONS[0], geometry=GEOMETRY)


def test_ground_truth_is_the_label_when_extra_info_has_the_same_key():
    # verl's own gsm8k preprocessing keeps the worked solution in extra_info["answer"]
    reward = VerlReward("count")
    worked = {"answer": "There are 3 cubes and 2 spheres", "split": "train"}
    assert reward("clevr", "<answer>3</answer>", "3", worked) == {"score": 1.0, "reason": ""}
    assert reward("clevr", "<answer>3</answer>", {"answer": "3"}, worked)["score"] == 1.0


def _token_rewards():
    from vlrollout.rewards.combine import ByTask, WeightedSum

    penalty = get_reward("length_penalty", max_length=100, cache_length=20)
    return [
        penalty,
        WeightedSum([(get_reward("count"), 1.0), (penalty, 0.5)]),
        ByTask({"count": get_reward("count"), "long": penalty}),
    ]


@pytest.mark.parametrize("reward", _token_rewards(), ids=["alone", "weighted", "by_task"])
def test_a_reward_of_token_counts_is_refused_since_verl_passes_only_text(reward):
    with pytest.raises(ValueError, match="token ids.*overlong"):
        VerlReward(reward)
    VerlReward(get_reward("count"))  # rewards of the text are accepted


@pytest.mark.parametrize("key", ["prompt", "completions", "prompt_ids", "completion_ids"])
def test_extra_info_named_as_a_reward_argument_is_context_not_a_label(key):
    """verl's extra_info carries what a dataset keeps beside a row (its prompt, an index); an
    entry named as a reward argument cannot be a label and must not zero every sample."""
    reward = VerlReward("count")
    out = reward(data_source="d", solution_str="3", ground_truth="3", extra_info={key: "q"})
    assert out == {"score": 1.0, "reason": ""}
    clash = reward(data_source="d", solution_str="3", ground_truth={"answer": "3", key: "q"})
    assert clash["score"] == 0.0 and "reward argument" in clash["reason"]


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        ("3", "reward_inputs is a str"),
        ([None], "reward_inputs[0] is a NoneType"),
        ([{"response": "3"}], "reward_inputs[0] has no 'ground_truth'"),
    ],
)
def test_easyr1_inputs_that_are_not_reward_inputs_are_named(inputs, words):
    with pytest.raises(TypeError, match=re.escape(words)):
        VerlReward("count").easyr1(inputs)


GEOMETRY_1000 = {
    "original_width": 1000,
    "original_height": 667,
    "model_width": 1008,
    "model_height": 672,
}


@pytest.mark.parametrize(
    ("family", "decoded"),
    [
        ("internvl", "cat[[100, 300, 500, 900]]"),  # <ref>/<box> are special tokens
        ("glm46v", "the cat [100, 300, 500, 900]"),  # so are <|begin_of_box|> ...
        ("qwen3_5", '{"bbox_2d": [100, 300, 500, 900]}'),
    ],
)
def test_boxes_decoded_without_special_tokens_score_for_each_model_family(family, decoded):
    """verl decodes with ``skip_special_tokens=True``; ``family`` is the model family's name."""
    score = VerlReward("iou", family=family)(
        "refcoco", decoded, {"boxes": [[100, 200, 500, 600]]}, {"geometry": [GEOMETRY_1000]}
    )
    # 0-1000 of 1000 x 667: [100, 200.1, 500, 600.3]; overlap 400 x 399.9 over a union of 160120
    assert score["score"] == pytest.approx(159960 / 160120) and score["reason"] == ""


def test_a_ground_truth_that_starts_a_json_object_but_is_not_one_says_so():
    """A truncated JSON object was taken as the answer text itself (and could score 1.0), or
    reported as its fields missing."""
    reward = VerlReward("count")
    out = reward("clevr", "There are 3.", '{"answer": 3')
    assert out["score"] == 0.0 and "ground_truth is not valid JSON" in out["reason"]
    (row,) = reward.easyr1(
        [{"response": "3", "response_length": 1, "ground_truth": '{"answer": 3'}]
    )
    assert row["overall"] == 0.0


@pytest.mark.parametrize("response", [b"3", None, 3])
def test_a_solution_that_is_not_text_is_refused_naming_its_type(response):
    """verl passes the decoded text; anything else would be scored as its repr."""
    with pytest.raises(TypeError, match=f"solution_str is a {type(response).__name__}"):
        VerlReward("count")("clevr", response, "3")
