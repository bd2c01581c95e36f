"""Rewards score a thinking model's answer, never its reasoning.

A completion's ``<think>`` block holds drafts (a first box, a rejected choice, a caption being
worded); only the text after it is the answer. Qwen3-style chat templates open the block in the
prompt, so a completion may hold only its closing tag; a completion cut off while thinking has
no answer at all.
"""

from __future__ import annotations

import pytest

from vlrollout.rewards import PlainReward
from vlrollout.rewards.text_extract import answer_region

GEOMETRY = [
    {"original_width": 168, "original_height": 126, "model_width": 168, "model_height": 126}
]


@pytest.mark.parametrize(
    ("text", "tagged", "region"),
    [
        ("<think>maybe 3</think> 4", False, "4"),
        ("maybe 3</think>4", False, "4"),  # the template opened the block
        ("<think>maybe 3, or", False, ""),  # cut off while thinking
        ("<think>a</think>b<think>c</think>d", False, "bd"),
        ("<think><answer>3</answer></think><answer>4</answer>", True, "4"),
        ("<think>draft <answer>3</answer></think> 4", True, "4"),
        ("no reasoning 5", True, "no reasoning 5"),
        ("<thinking>maybe 3</thinking> 4", False, "4"),
        ("<reasoning>maybe 3</reasoning> 4", False, "4"),
        ("<THINK>maybe 3</THINK> 4", False, "4"),
        ("\u25c1think\u25b7maybe 3\u25c1/think\u25b7 4", False, "4"),  # Kimi-VL
        ("<think>a <think>x</think> draft 3</think> 4", False, "4"),  # nested
    ],
)
def test_the_region_a_reward_reads_leaves_the_reasoning_out(text, tagged, region):
    assert answer_region(text, tagged).strip() == region


def test_a_box_drafted_while_thinking_is_not_the_answer():
    completion = "<think>Maybe (0,0),(100,100)</think> (310,95),(470,310)"
    score, reason = PlainReward("giou", family="qwen2_vl").score(
        completion, boxes=[52, 12, 79, 39], geometry=GEOMETRY
    )
    assert score > 0.9 and reason is None


def test_a_choice_rejected_while_thinking_is_not_the_answer():
    score, _ = PlainReward("choice").score(
        "<think>(A)?</think>B", answer="B", choices=["cat", "dog", "bird", "fish"]
    )
    assert score == 1.0


def test_a_caption_scores_its_answer_without_the_tags():
    corpus = [["a dog runs fast"], ["a cat sleeps here"]]
    bare, _ = PlainReward("cider_d", corpus=corpus).score("a dog runs fast", captions=corpus[0])
    tagged, _ = PlainReward("cider_d", corpus=corpus).score(
        "<think>hmm</think><answer>a dog runs fast</answer>", captions=corpus[0]
    )
    assert tagged == pytest.approx(bare)


def test_a_completion_cut_off_while_thinking_has_no_answer():
    score, reason = PlainReward("count").score("<think>I see 3 circles, or", answer="3")
    assert score == 0.0 and reason is not None


def test_a_boxed_draft_while_thinking_is_not_the_answer():
    completion = r"<think>is it \boxed{4}? no</think> The answer is 3."
    score, _ = PlainReward("math").score(completion, answer="4")
    assert score == 0.0
    score, _ = PlainReward("math").score(completion, answer="3")
    assert score == 1.0


@pytest.mark.parametrize(
    ("text", "region"),
    [
        ('Let me zoom.\n<tool_call>\n{"arguments": {"bbox_2d": [1, 2, 3, 4]}}\n</tool_call>', "Let me zoom.\n"),
        ('<tool_call>{"bbox_2d": [1, 2, 3, 4]}</tool_call> {"bbox_2d": [5, 6, 7, 8]}', ' {"bbox_2d": [5, 6, 7, 8]}'),
        ('cut off <tool_call>{"bbox_2d": [1, 2, 3, 4]', "cut off "),
    ],
)  # fmt: skip
def test_a_tool_call_is_not_the_answer(text, region):
    """A turn that ends a tool-use episode on ``max_turns`` still holds its (unexecuted) call:
    the arguments of ``zoom_in`` are a box, and must not score as the answer."""
    assert answer_region(text, use_answer_tag=True) == region


def test_a_zoom_call_box_scores_no_box():
    turn = 'Let me zoom in.\n<tool_call>\n{"name": "zoom_in", "arguments": {"bbox_2d": [101, 202, 504, 605]}}\n</tool_call>'  # noqa: E501
    geometry = [
        {"original_width": 1000, "original_height": 667, "model_width": 1008, "model_height": 672}
    ]  # noqa: E501
    got = PlainReward("iou", family="qwen2_5_vl").score(
        turn, boxes=[[100, 200, 500, 600]], geometry=geometry
    )  # noqa: E501
    assert got == (0.0, "no_box")
