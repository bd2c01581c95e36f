"""Pull the part of a completion a reward should read: the decoded completion, ``<answer>`` blocks
and ``\\boxed{}``.

Both run in one left-to-right pass (``str.find`` and a brace counter), so their time is linear in
the text on any input: RL policies emit long garbage, and a lazy ``<tag>(.*?)</tag>`` regex
rescans to the end of the text from every unclosed ``<tag>`` (quadratic in the text's length).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def tag_blocks(text: str, open_tag: str, close_tag: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the content of each ``open_tag ... close_tag`` block, left to right.

    The same blocks as ``re.finditer(open + "(.*?)" + close, text, re.DOTALL)`` (each block opens
    at the first ``open_tag`` after the previous block and closes at the first ``close_tag`` after
    that), found in linear time: the scan stops as soon as no closing tag is left.

    >>> tag_blocks("<a>1</a> <a>2<a>3</a> <a>4", "<a>", "</a>")
    [(3, 4), (12, 17)]
    """
    blocks: list[tuple[int, int]] = []
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return blocks
        start += len(open_tag)
        end = text.find(close_tag, start)
        if end < 0:
            return blocks
        blocks.append((start, end))
        pos = end + len(close_tag)


def extract_tag(text: str, tag: str = "answer") -> str | None:
    """Return the content of the last complete ``<tag>...</tag>`` block, stripped, or ``None``.

    >>> extract_tag("<think>x</think><answer> 3 </answer>")
    '3'
    >>> extract_tag("no tags") is None
    True
    """
    text = str(text)
    blocks = tag_blocks(text, f"<{tag}>", f"</{tag}>")
    if not blocks:
        return None
    start, end = blocks[-1]
    return text[start:end].strip()


def answer_region(text: str, use_answer_tag: bool) -> str:
    """What a reward reads in a completion: its text outside the reasoning
    (:func:`without_reasoning`) and outside tool calls (:func:`without_tool_calls`), then, with
    ``use_answer_tag``, the content of the last ``<answer>`` block there when one exists.

    >>> answer_region("<think>maybe 3</think><answer>4</answer>", True)
    '4'
    """
    text = without_tool_calls(without_reasoning(str(text)))
    if use_answer_tag:
        inner = extract_tag(text, "answer")
        if inner is not None:
            return inner
    return text


TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def without_tool_calls(text: str) -> str:
    """``text`` without its ``<tool_call>`` blocks, an unclosed one to the end (Qwen/Hermes tool
    calls, as ``vlrollout.tools`` reads them). A call's arguments are not an answer: a tool-use
    episode that ends on its turn limit still holds its last, unexecuted call, whose ``zoom_in``
    box would otherwise score as the answer.

    >>> without_tool_calls('look <tool_call>{"bbox_2d": [1, 2, 3, 4]}</tool_call> done')
    'look  done'
    """
    if TOOL_CALL_OPEN not in text:
        return text
    kept, pos = [], 0
    while (start := text.find(TOOL_CALL_OPEN, pos)) != -1:
        kept.append(text[pos:start])
        end = text.find(TOOL_CALL_CLOSE, start)
        if end == -1:
            return "".join(kept)
        pos = end + len(TOOL_CALL_CLOSE)
    kept.append(text[pos:])
    return "".join(kept)


_REASONING_TAG = re.compile(r"<(/?)(?:think|thinking|reasoning)>|\u25c1(/?)think\u25b7", re.I)
"""Tags of a reasoning block: ``<think>`` (Qwen3, GLM), ``<thinking>``, ``<reasoning>``, any
case, and Kimi-VL's ``◁think▷``; each with its closing ``/``."""


def without_reasoning(text: str) -> str:
    """``text`` without a thinking model's reasoning, where drafts (a first box, a rejected
    choice) are written: each reasoning block (:data:`_REASONING_TAG`; nested blocks end at
    their outer close), the text before a close that no block opened (chat templates that open
    the block in the prompt), and an unclosed block to the end (a completion cut off while
    thinking has no answer).

    >>> without_reasoning("draft</think> 4"), without_reasoning("<think>draft")
    (' 4', '')
    """
    kept: list[str] = []
    depth, pos = 0, 0
    for tag in _REASONING_TAG.finditer(text):
        closing = bool(tag.group(1) or tag.group(2))
        if not closing:
            if depth == 0:
                kept.append(text[pos : tag.start()])
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                pos = tag.end()
        else:  # a close no block opened: what came before it was reasoning
            kept, pos = [], tag.end()
    if depth == 0:
        kept.append(text[pos:])
    return "".join(kept)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), with nested braces balanced.

    Returns ``None`` when there is no complete ``\\boxed{`` group (e.g. unbalanced braces). One
    pass pairs every ``{`` with its ``}`` (a stack), so repeated unclosed ``\\boxed{`` costs linear
    time, not a rescan per occurrence.

    >>> last_boxed(r"so \\boxed{\\frac{1}{2}} and \\boxed{3\\sqrt{2}}")
    '3\\\\sqrt{2}'
    """
    text = str(text)
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    # close_of[i]: index of the "}" closing the group whose content starts at i (after "{").
    close_of: dict[int, int] = {}
    stack: list[int] = []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            stack.append(m.end())
        elif stack:
            close_of[stack.pop()] = m.start()
    for start in reversed(starts):
        end = close_of.get(start)
        if end is not None:
            return text[start:end].strip()
    return None


def completion_text(tokenizer: Any, token_ids: Sequence[int], stop_ids: Collection[int]) -> str:
    """The text rewards read from generated ``token_ids``: trailing stop tokens dropped, other
    special tokens kept (some families write boxes with them, Qwen2-VL's ``<|box_start|>``; the
    stop token is scaffolding, not answer)."""
    end = len(token_ids)
    while end > 0 and token_ids[end - 1] in stop_ids:
        end -= 1
    return tokenizer.decode(list(token_ids[:end]), skip_special_tokens=False)
