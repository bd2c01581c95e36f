"""Run parsed tool calls; every failure becomes an error message for the model, never an exception.

Error policy (what the model sees as the tool's output, and counted as a tool error):

- the call could not be parsed (:class:`~vlrollout.tools.parsing.ToolCall` with ``error``);
- the tool name is unknown (the message lists the available tools);
- the arguments do not match the schema, or the tool raised :class:`ToolError` (bad box, missing
  image): the tool's own message;
- the tool raised anything else: ``"<name> failed: <ExceptionType>: <message>"``, also logged
  as a warning because it is a bug in the tool rather than a mistake of the model;
- the tool returned something that is not text or PIL images;
- more calls in one turn than ``max_calls`` (the extra calls are not run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from PIL import Image

from vlrollout.logs import get_logger

from .base import Tool, ToolContext, ToolError, ToolResult
from .parsing import ToolCall

logger = get_logger(__name__)


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one call as the model will see it.

    Attributes:
        name: The called tool's name (``None`` when it could not be read).
        result: Text and images for the model; for a failure, ``"Error: ..."`` and no images.
        error: Why the call failed, or ``None``.
    """

    name: str | None
    result: ToolResult
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def failure(cls, name: str | None, message: str) -> ToolOutcome:
        return cls(name, ToolResult(text=f"Error: {message}"), message)


def run_tool_call(call: ToolCall, tools: Mapping[str, Tool], ctx: ToolContext) -> ToolOutcome:
    """Run one call (see the module docstring for what becomes an error)."""
    if not call.ok:
        return ToolOutcome.failure(call.name, call.error or "unreadable tool call")
    tool = tools.get(call.name or "")
    if tool is None:
        return ToolOutcome.failure(
            call.name, f"unknown tool {call.name!r}; available tools: {sorted(tools)}"
        )
    try:
        result = tool(ctx, call.arguments)
    except ToolError as e:
        return ToolOutcome.failure(call.name, str(e))
    except Exception as e:  # noqa: BLE001 - a tool bug must not end the episode
        logger.warning("tool %r raised on arguments %r", call.name, call.arguments, exc_info=True)
        return ToolOutcome.failure(call.name, f"{call.name} failed: {type(e).__name__}: {e}")
    why = invalid_result(result)
    images = [] if why else list(result.images)  # read once: a generator would reach the
    bad = [type(im).__name__ for im in images if not isinstance(im, Image.Image)]  # turn used up
    if bad:
        why = f"images must be PIL images, got {bad}"
    if why is not None:
        return ToolOutcome.failure(call.name, f"{call.name} returned invalid output ({why})")
    return ToolOutcome(call.name, ToolResult(result.text, images))


def invalid_result(result: ToolResult) -> str | None:
    """Why ``result`` is not a tool's output: string text and its images in a list (or another
    iterable: a tuple, a generator); ``None`` when it is."""
    if not isinstance(result.text, str):
        return f"its text must be a string, got {type(result.text).__name__}"
    images = result.images
    if isinstance(images, Image.Image):
        return "images must be a list of PIL images, got one Image: wrap it in a list"
    if isinstance(images, (str, bytes, dict)) or not isinstance(images, Iterable):
        return f"images must be a list of PIL images, got {type(images).__name__}"
    return None


def run_tool_calls(
    calls: Sequence[ToolCall], tools: Mapping[str, Tool], ctx: ToolContext, max_calls: int
) -> list[ToolOutcome]:
    """Run ``calls`` in order; calls beyond ``max_calls`` fail without running.

    Images a call returns get their indices when the observation is built, so a later call in the
    same turn cannot refer to them yet (it gets an ``image_index`` error).
    """
    out = [run_tool_call(c, tools, ctx) for c in calls[:max_calls]]
    out += [
        ToolOutcome.failure(c.name, f"not run: at most {max_calls} tool call(s) per turn")
        for c in calls[max_calls:]
    ]
    return out
