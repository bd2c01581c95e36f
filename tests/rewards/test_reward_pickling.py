"""Every reward pickles (rewards run in a process pool, vlrollout.rewards.executor)."""

import asyncio
import pickle

import pytest

from vlrollout.rewards.answer import (
    ChoiceReward,
    CountReward,
    MathReward,
    NumericReward,
    clevr_count_reward,
    geometry3k_reward,
)
from vlrollout.rewards.caption import CaptionReward, CiderD
from vlrollout.rewards.combine import WeightedSum
from vlrollout.rewards.format import LengthPenalty, ThinkAnswerFormat
from vlrollout.rewards.grounding import GroundingReward, PointInBoxReward
from vlrollout.rewards.registry import get_reward
from vlrollout.rewards.temporal import TemporalIoUReward

GEO = [{"original_width": 640, "original_height": 480, "model_width": 644, "model_height": 476}]
CORPUS = [["a dog runs on the grass"], ["a cat sits on a red mat"], ["two men play ball"]]

# (reward, completion, task_data, expected value) - expected values are derived in the
# corresponding module tests; here they only guard that the unpickled copy computes the same.
CASES = [
    (CaptionReward("cider_d", corpus=CORPUS), "a dog runs on the grass", {"captions": CORPUS[0]}, 10.0),
    (CaptionReward("bleu1"), "two men play ball", {"captions": CORPUS[2]}, 1.0),
    (CaptionReward("rouge_l"), "two men play ball", {"captions": CORPUS[2]}, 1.0),
    (GroundingReward("qwen2_5_vl", "giou"), '{"bbox_2d": [161, 119, 483, 357]}',
     {"boxes": [160, 120, 480, 360], "geometry": GEO}, 1.0),
    (GroundingReward("qwen2_vl", "box_f1"), "<|box_start|>(250,250),(750,750)<|box_end|>",
     {"boxes": [[160, 120, 480, 360]], "geometry": GEO}, 1.0),
    (PointInBoxReward("molmo"), '<point x="50" y="50" alt="c">c</point>',
     {"boxes": [160, 120, 480, 360], "geometry": GEO}, 1.0),
    (CountReward(), "<answer>three</answer>", {"answer": "3"}, 1.0),
    (ChoiceReward(), "<answer>(B)</answer>", {"answer": "B"}, 1.0),
    (NumericReward(rel_tol=0.01), "<answer>99.5</answer>", {"answer": "100"}, 1.0),
    (MathReward(), "\\boxed{\\frac{1}{2}}", {"answer": "0.5"}, 1.0),
    (clevr_count_reward, "[4]", {"answer": "4"}, 1.0),
    (geometry3k_reward, "\\boxed{4}", {"answer": "4"}, 1.0),
    (ThinkAnswerFormat(), "<think>a</think><answer>b</answer>", {}, 1.0),
    (LengthPenalty(100, 20), "", {}, 0.0),
    (WeightedSum([(CountReward(), 1.0), (ThinkAnswerFormat(), 0.5)]),
     "<think>a</think><answer>3</answer>", {"answer": "3"}, 1.5),
    (get_reward("vlrollout.rewards.answer:clevr_count_reward", answer="2"), "[2]", {}, 1.0),
    (TemporalIoUReward(), "from 1s to 3s", {"segments": [[2.0, 3.0], [5.0, 6.0]]}, 0.5),
    (get_reward("video_task"), "[1, 2]", {"task": "temporal", "segments": [1, 2]}, 1.0),
    (get_reward("temporal_acc@iou", unit="frames"), "[2, 3]",
     {"segments": [1.0, 2.0], "video_timing": [{"timestamps_s": [0, 0.5, 1, 1.5], "fps": 2}]}, 1.0),
]  # fmt: skip


@pytest.mark.parametrize(("reward", "text", "task_data", "expected"), CASES)
def test_pickle_round_trip_gives_equal_scores(reward, text, task_data, expected):
    before = reward("prompt", text, [1, 2], [3] * 5, **task_data)
    clone = pickle.loads(pickle.dumps(reward))
    after = clone("prompt", text, [1, 2], [3] * 5, **task_data)
    assert before == after == pytest.approx(expected)


def test_reward_through_the_reward_pool():
    from vlrollout.rewards.caller import RewardCaller

    cider = CiderD.from_references(CORPUS)
    reward = CaptionReward("cider_d", corpus=cider)
    local = reward("p", "a dog runs on grass", [], [], captions=CORPUS[0])
    caller = RewardCaller(reward, timeout_s=120, max_workers=1)

    async def main():
        return await caller("p", "a dog runs on grass", [], [], {"captions": CORPUS[0]})

    remote = asyncio.run(main())
    assert 0.0 < remote < 10.0  # a partial match, not a default 0
    assert remote == pytest.approx(local, abs=1e-12)
