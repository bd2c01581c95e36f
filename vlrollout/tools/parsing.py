"""Read Qwen-style tool calls from a completion: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The format is Qwen2.5's (the ``# Tools`` block of the chat template in
Qwen/Qwen2.5-7B-Instruct ``tokenizer_config.json``: "return a json object with function name and
arguments within <tool_call></tool_call> XML tags"), also what vLLM's Hermes tool parser reads
(``vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py``: ``<tool_call>(.*?)</tool_call>``
or an unterminated ``<tool_call>(.*)``).

Rules (a turn "calls a tool" iff it contains the opening tag ``<tool_call>``):

1. Every ``<tool_call>`` opens one call, in order. Its body ends at ``</tool_call>``, or, when that
   tag is missing (a turn cut off by the length limit), at the next ``<tool_call>`` or the end of
   the text. Text outside the tags (reasoning before, remarks after) is ignored.
2. The body is stripped of whitespace and of a Markdown code fence (```` ```json ... ``` ````).
3. The first JSON object in the body is decoded; text after it inside the tags is ignored.
4. The object needs a non-empty string ``"name"``; ``"arguments"`` (or ``"parameters"``) is an
   object, a JSON string holding an object (OpenAI's form), or absent (no arguments).

Anything else is a :class:`ToolCall` with ``error`` set, never an exception: the workflow shows the
error to the model. A JSON object without the tags is not a call (the turn is a final answer).

>>> [c.name for c in parse_tool_calls('Let me look. <tool_call>\\n{"name": "zoom_in", '
...                                    '"arguments": {"bbox_2d": [0, 0, 500, 500]}}\\n</tool_call>')]
['zoom_in']
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .base import Tool

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_FENCE = re.compile(r"^```[\w-]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One tool call read from a completion.

    Attributes:
        name: The tool name, or ``None`` when it could not be read.
        arguments: The arguments object (empty when there were none or on error).
        error: Why the call could not be read (``None`` when it could).
        raw: The text between the tags, as written.
    """

    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    raw: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


def has_tool_call(text: str) -> bool:
    """Whether ``text`` calls a tool (contains ``<tool_call>``)."""
    return OPEN_TAG in text


def _bodies(text: str) -> list[tuple[str, bool]]:
    """``(body, terminated)`` for every ``<tool_call>`` in ``text``, in order."""
    out = []
    starts = [m.end() for m in re.finditer(re.escape(OPEN_TAG), text)]
    for k, start in enumerate(starts):
        limit = starts[k + 1] - len(OPEN_TAG) if k + 1 < len(starts) else len(text)
        end = text.find(CLOSE_TAG, start, limit)
        out.append((text[start:end], True) if end >= 0 else (text[start:limit], False))
    return out


def _decode_object(body: str) -> dict[str, Any]:
    text = body.strip()
    fence = _FENCE.match(text)
    if fence:
        text = fence.group(1).strip()
    start = text.find("{")
    if start < 0:
        raise ValueError(f"no JSON object in the tool call {body.strip()[:80]!r}")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON in the tool call: {e.msg} at character {e.pos}") from None
    return obj


def parse_call(body: str, terminated: bool = True) -> ToolCall:
    """Parse the text between one pair of tags into a :class:`ToolCall` (see the module rules)."""
    try:
        obj = _decode_object(body)
    except ValueError as e:
        hint = "" if terminated else f" (the call is not closed with {CLOSE_TAG})"
        return ToolCall(None, error=f"{e}{hint}", raw=body)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCall(None, error=f'the tool call needs a "name" string, got {name!r}', raw=body)
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return ToolCall(name, error=f'"arguments" is a string but not JSON: {e.msg}', raw=body)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCall(name, error=f'"arguments" must be a JSON object, got {args!r}', raw=body)
    return ToolCall(name.strip(), args, raw=body)


def parse_tool_calls(text: str) -> list[ToolCall]:
    """All tool calls in ``text``, in order; empty when the turn calls no tool (a final answer).

    >>> calls = parse_tool_calls('<tool_call>```json\\n{"name": "rotate", "arguments": '
    ...                          '"{\\\\"angle\\\\": 90}"}\\n```</tool_call> then <tool_call>{oops')
    >>> [(c.name, c.arguments, c.ok) for c in calls]
    [('rotate', {'angle': 90}, True), (None, {}, False)]
    """
    return [parse_call(body, terminated) for body, terminated in _bodies(text)]


def tools_system_prompt(tools: Iterable[Tool]) -> str:
    """The ``# Tools`` block Qwen2.5's chat template adds to the system prompt for ``tools=[...]``.

    For processors whose chat template ignores ``tools`` (Qwen2-VL's, Qwen2.5-VL's processor
    template), put this text in the data item's system message so the model knows the tools.
    """
    specs = "\n".join(json.dumps(t.spec(), ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{specs}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        f"{OPEN_TAG}{CLOSE_TAG} XML tags:\n{OPEN_TAG}\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n'
        f"{CLOSE_TAG}"
    )
