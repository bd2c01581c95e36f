"""Find tools by name or import path, as preprocessors and rewards are found.

``get_tool(name)`` resolves, in order: tools registered in this process with
:func:`register_tool`; the built-ins (``zoom_in``, ``crop``, ``rotate``, ``image_info``); a dotted
import path ``"package.module.attr"`` (AReaL's ``import_from_string``) naming a :class:`Tool`.

>>> _ = register_tool("echo_doc", lambda ctx, text: text,
...                   {"type": "object", "properties": {"text": {"type": "string"}}})
>>> get_tool("echo_doc").name
'echo_doc'
>>> unregister_tool("echo_doc")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vlrollout.registry import Registry

from .base import Tool, ToolResult
from .builtin import BUILTIN_TOOLS


def _must_be_tool(path: str, obj: Any) -> Tool:
    if not isinstance(obj, Tool):
        raise TypeError(
            f"{path!r} is a {type(obj).__name__}, not a Tool; wrap it as Tool(name, fn, schema)"
        )
    return obj


TOOLS: Registry[Tool] = Registry("tool", BUILTIN_TOOLS, check=_must_be_tool)

ToolSpec = Tool | str


def register_tool(
    name: str | Tool,
    fn: Callable[..., ToolResult | str] | None = None,
    schema: Mapping[str, Any] | None = None,
    *,
    description: str = "",
    overwrite: bool = False,
) -> Tool:
    """Register a tool under its name: ``register_tool(name, fn, schema)`` or ``register_tool(Tool(...))``.

    Args:
        name: The tool's name, or a complete :class:`Tool` (then ``fn``/``schema`` must be omitted).
        fn: ``(ctx, **arguments) -> ToolResult | str``.
        schema: JSON schema of the arguments object.
        description: What the tool does, for the model.
        overwrite: Replace an existing registration of the same name.

    Returns:
        The registered :class:`Tool`.

    Raises:
        ValueError: a dotted name (reserved for import paths), a built-in name, or a name already
            registered with ``overwrite=False``.
    """
    if isinstance(name, Tool):
        if fn is not None or schema is not None:
            raise ValueError("pass either a Tool or name, fn and schema, not both")
        tool = name
    else:
        if schema is None:
            raise ValueError(f"tool {name!r} needs a JSON schema for its arguments")
        tool = Tool(name, fn, schema, description)  # type: ignore[arg-type]
    TOOLS.register(tool.name, tool, overwrite=overwrite)
    return tool


def unregister_tool(name: str) -> None:
    """Remove a registered tool (no error if absent)."""
    TOOLS.unregister(name)


def available_tools() -> list[str]:
    """Built-in and registered tool names."""
    return TOOLS.names()


def get_tool(name_or_path: str) -> Tool:
    """The :class:`Tool` for a registered or built-in name, or an import path to a ``Tool``.

    Raises:
        vlrollout.registry.UnknownNameError: an unknown plain name (the message lists the known
            ones).
        ImportError / AttributeError: an import path that does not resolve (naming the path).
        TypeError: the import path names something other than a :class:`Tool`.
    """
    return TOOLS.resolve(name_or_path)


def resolve_tools(tools: Sequence[ToolSpec] | Mapping[str, Any]) -> dict[str, Tool]:
    """A name → :class:`Tool` table from tools, names and import paths.

    A mapping is taken as ``{name: Tool | spec}`` where the key must equal the tool's name.

    Raises:
        ValueError: no tools, or two tools with the same name.
    """
    if isinstance(tools, str | Tool):
        tools = [tools]
    items = list(tools.values()) if isinstance(tools, Mapping) else list(tools)
    if not items:
        raise ValueError("a tool workflow needs at least one tool")
    table: dict[str, Tool] = {}
    for spec in items:
        tool = spec if isinstance(spec, Tool) else get_tool(spec)
        if tool.name in table:
            raise ValueError(f"two tools are named {tool.name!r}; tool names must be unique")
        table[tool.name] = tool
    if isinstance(tools, Mapping) and set(tools) != set(table):
        raise ValueError(f"mapping keys {sorted(tools)} differ from tool names {sorted(table)}")
    return table
