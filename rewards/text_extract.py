"""Pull the part of a completion a reward should read: ``<answer>`` blocks and ``\\boxed{}``."""

from __future__ import annotations

import re

_TAG_CACHE: dict[str, re.Pattern[str]] = {}


def extract_tag(text: str, tag: str = "answer") -> str | None:
    """Return the content of the last complete ``<tag>...</tag>`` block, stripped, or ``None``.

    >>> extract_tag("<think>x</think><answer> 3 </answer>")
    '3'
    >>> extract_tag("no tags") is None
    True
    """
    pattern = _TAG_CACHE.get(tag)
    if pattern is None:
        pattern = re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)
        _TAG_CACHE[tag] = pattern
    found = pattern.findall(str(text))
    return found[-1].strip() if found else None


def answer_region(text: str, use_answer_tag: bool) -> str:
    """The ``<answer>`` content when ``use_answer_tag`` and a block exists, else the whole text."""
    text = str(text)
    if use_answer_tag:
        inner = extract_tag(text, "answer")
        if inner is not None:
            return inner
    return text


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), with nested braces balanced.

    Returns ``None`` when there is no complete ``\\boxed{`` group (e.g. unbalanced braces).

    >>> last_boxed(r"so \\boxed{\\frac{1}{2}} and \\boxed{3\\sqrt{2}}")
    '3\\\\sqrt{2}'
    """
    text = str(text)
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip()
    return None
