"""Tools for agentic vision workflows: the contract, built-ins, registry, call parsing and running.

>>> from vlrollout.tools import get_tool, parse_tool_calls
>>> call, = parse_tool_calls('<tool_call>{"name": "rotate", "arguments": {"angle": 90}}</tool_call>')
>>> get_tool(call.name).name, call.arguments
('rotate', {'angle': 90})

Write a tool as ``fn(ctx, **arguments) -> ToolResult | str`` and register it with its JSON schema
(:func:`register_tool`), or pass a :class:`Tool` (or its import path) to the workflow's ``tools``.
:mod:`.observation` (imported on use: it needs the processors) turns outcomes into tokens.
"""

from __future__ import annotations

from .base import Tool, ToolContext, ToolError, ToolResult, validate_arguments
from .builtin import BUILTIN_TOOLS, box_to_pixels, crop, image_info, rotate
from .parsing import ToolCall, has_tool_call, parse_tool_calls, tools_system_prompt
from .registry import available_tools, get_tool, register_tool, resolve_tools, unregister_tool
from .runner import ToolOutcome, run_tool_call, run_tool_calls

__all__ = [
    "BUILTIN_TOOLS",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "ToolResult",
    "available_tools",
    "box_to_pixels",
    "crop",
    "get_tool",
    "has_tool_call",
    "image_info",
    "parse_tool_calls",
    "register_tool",
    "resolve_tools",
    "rotate",
    "run_tool_call",
    "run_tool_calls",
    "tools_system_prompt",
    "unregister_tool",
    "validate_arguments",
]
