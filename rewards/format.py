"""Format rewards: ``<think>...</think><answer>...</answer>`` structure and a length penalty."""

from __future__ import annotations

import re
from typing import Any

from .result import Reward, RewardResult

_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


class ThinkAnswerFormat(Reward):
    """1.0 when the completion is exactly ``<think>T</think><answer>A</answer>`` (whitespace
    allowed between and around), with non-empty T and A and each tag once; else 0.0 with a reason.

    Args:
        think_in_prompt: The chat template already opened ``<think>`` in the prompt (Qwen3-style
            thinking templates), so the completion must *not* start with ``<think>``.

    Reasons, checked in this order: ``repeated_tag``, ``missing_think``, ``missing_answer``,
    ``wrong_order``, ``empty_think``, ``empty_answer``, ``text_outside_tags``.

    >>> ThinkAnswerFormat()("p", "<think>2+2</think> <answer>4</answer>", [], [])
    1.0
    """

    def __init__(self, *, think_in_prompt: bool = False) -> None:
        self.think_in_prompt = think_in_prompt
        self.name = "format"

    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        text = str(completions)
        expected = {tag: 1 for tag in _TAGS}
        if self.think_in_prompt:
            expected["<think>"] = 0
        counts = {tag: text.count(tag) for tag in _TAGS}
        if any(counts[t] > expected[t] for t in _TAGS):
            return RewardResult(0.0, "repeated_tag", {"counts": counts})
        if counts["</think>"] == 0 or counts["<think>"] < expected["<think>"]:
            return RewardResult(0.0, "missing_think")
        if counts["<answer>"] == 0 or counts["</answer>"] == 0:
            return RewardResult(0.0, "missing_answer")
        open_think = "" if self.think_in_prompt else r"<think>"
        m = re.fullmatch(
            rf"(\s*){open_think}(.*)</think>(\s*)<answer>(.*)</answer>(\s*)", text, re.DOTALL
        )
        if m is None:
            order = [text.find(t) for t in _TAGS if expected[t]]
            if order != sorted(order):
                return RewardResult(0.0, "wrong_order")
            return RewardResult(0.0, "text_outside_tags")
        if not m.group(2).strip():
            return RewardResult(0.0, "empty_think")
        if not m.group(4).strip():
            return RewardResult(0.0, "empty_answer")
        return RewardResult(1.0)


class LengthPenalty(Reward):
    """Soft over-length penalty on the number of completion tokens (DAPO, arXiv:2503.14476, Eq. 13).

    ``0`` up to ``max_length - cache_length`` tokens, then linear down to ``-1`` at ``max_length``,
    and ``-1`` beyond. Uses ``len(completion_ids)``.

    >>> LengthPenalty(max_length=100, cache_length=20)("p", "", [], list(range(90)))
    -0.5
    """

    reads_token_ids = True
    """It scores ``completion_ids``, which trainers that pass only text cannot give it."""
    max_output_chars = None
    """It never reads the text, so no length of text stops it from scoring."""

    def __init__(self, max_length: int, cache_length: int) -> None:
        if not 0 < cache_length <= max_length:
            raise ValueError(
                f"need 0 < cache_length <= max_length, got cache_length={cache_length}, "
                f"max_length={max_length}"
            )
        self.max_length = max_length
        self.cache_length = cache_length
        self.name = "length_penalty"

    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        n = len(completion_ids)
        free = self.max_length - self.cache_length
        if n <= free:
            return RewardResult(0.0)
        if n <= self.max_length:
            return RewardResult((free - n) / self.cache_length)
        return RewardResult(-1.0, None, {"overlong": True})
