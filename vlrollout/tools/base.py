"""The tool contract: what a tool is given, what it returns, and how its arguments are checked.

A tool is a plain callable ``fn(ctx: ToolContext, **arguments) -> ToolResult | str`` plus the JSON
schema of its arguments (the ``parameters`` object of an OpenAI/Qwen function spec). The model
calls it by name; :meth:`Tool.__call__` validates the arguments against the schema before calling
``fn``. A tool signals a call the *model* got wrong (bad box, missing image) by raising
:class:`ToolError`; its message is what the model reads in the next turn.

>>> def shout(ctx, text):
...     return text.upper()
>>> tool = Tool("shout", shout, {"type": "object", "properties": {"text": {"type": "string"}},
...                              "required": ["text"]})
>>> tool(ToolContext(), {"text": "hi"}).text
'HI'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from vlrollout.processors.base import ImageGeometry


class ToolError(Exception):
    """A tool call the model got wrong; the message is shown to the model as the tool's output."""


@dataclass
class ToolResult:
    """What a tool returns to the model.

    Attributes:
        text: Text shown to the model (may be empty when ``images`` is not).
        images: New images shown to the model, in order; they get image indices after all earlier
            images of the episode.
    """

    text: str = ""
    images: list[Image.Image] = field(default_factory=list)


class ToolContext:
    """The episode's images as tools see them, with their geometry and the box convention.

    Args:
        images: Every image so far (prompt images first, then tool images, in order): PIL images,
            or base64 strings decoded on first use (the prompt's ``image_data``, which decode to
            exactly the pixels the processor saw).
        geometry: One :class:`~vlrollout.processors.base.ImageGeometry` per image.
        box_frame: The frame boxes written by the model are in (``"norm1000"`` for Qwen2-VL and
            Qwen3-VL, ``"model"`` for Qwen2.5-VL); see :mod:`vlrollout.rewards.frames`.
    """

    def __init__(
        self,
        images: Sequence[Image.Image | str] = (),
        geometry: Sequence[ImageGeometry] = (),
        box_frame: str = "norm1000",
    ) -> None:
        if len(images) != len(geometry):
            raise ValueError(f"{len(images)} images but {len(geometry)} geometries")
        self._images: list[Image.Image | str] = list(images)
        self.geometry: list[ImageGeometry] = list(geometry)
        self.box_frame = box_frame

    @property
    def num_images(self) -> int:
        return len(self._images)

    def add_image(self, image: Image.Image, geometry: ImageGeometry) -> None:
        """Append a tool image (it becomes index ``num_images - 1``)."""
        self._images.append(image)
        self.geometry.append(geometry)

    def _check_index(self, index: Any) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise ToolError(f"image_index must be an integer, got {index!r}")
        if not 0 <= index < self.num_images:
            raise ToolError(
                f"image_index {index} does not exist: the conversation has {self.num_images} "
                f"image(s), indices 0..{self.num_images - 1} (an image a call of this turn "
                "returns can be used from the next turn on)"
            )
        return index

    def image(self, index: int) -> Image.Image:
        """The RGB image ``index`` (0 = first prompt image); :class:`ToolError` if out of range."""
        index = self._check_index(index)
        image = self._images[index]
        if isinstance(image, str):
            from vlrollout.processors.image_loading import load_image

            image = load_image(image, f"image {index}").image
            self._images[index] = image
        return image

    def image_geometry(self, index: int) -> ImageGeometry:
        return self.geometry[self._check_index(index)]


# -- argument validation ----------------------------------------------------------------------


def _non_finite(value: Any, where: str) -> str | None:
    """Where a NaN or infinity hides in ``value`` (Python's ``json`` parses ``NaN``; JSON Schema
    has no way to refuse it)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, Mapping):
        items: Any = ((f"{where}.{k}", v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((w for w in (_non_finite(v, w) for w, v in items) if w), None)


def validate_arguments(
    arguments: Mapping[str, Any], schema: Mapping[str, Any], where: str = "arguments"
) -> None:
    """Check ``arguments`` against a JSON schema (``jsonschema``, draft 2020-12) and raise
    :class:`ToolError` naming the argument and the rule it breaks; NaN and infinities are refused
    too.

    >>> validate_arguments({"angle": 45}, {"type": "object",
    ...     "properties": {"angle": {"type": "integer", "enum": [90, 180, 270]}}})
    Traceback (most recent call last):
    ...
    vlrollout.tools.base.ToolError: arguments.angle: 45 is not one of [90, 180, 270]
    """
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(schema).iter_errors(arguments))
    if error is not None:
        path = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path)
        raise ToolError(f"{where}{path}: {error.message}")
    bad = _non_finite(arguments, where)
    if bad:
        raise ToolError(f"{bad} must be a finite number")


@dataclass(frozen=True)
class Tool:
    """A named tool: ``fn(ctx, **arguments)`` plus the JSON schema of its arguments.

    Attributes:
        name: The name the model calls it by.
        fn: ``(ctx: ToolContext, **arguments) -> ToolResult | str``. Raise :class:`ToolError` for
            a call the model got wrong.
        schema: JSON schema of the ``arguments`` object (``{"type": "object", "properties": ...}``).
        description: One or two sentences for the model (see :meth:`spec`).
    """

    name: str
    fn: Callable[..., ToolResult | str]
    schema: Mapping[str, Any]
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"tool name must be a non-empty string, got {self.name!r}")
        if not callable(self.fn):
            raise TypeError(
                f"tool {self.name!r}: fn must be callable, got {type(self.fn).__name__}"
            )
        if not isinstance(self.schema, Mapping) or self.schema.get("type", "object") != "object":
            raise ValueError(
                f"tool {self.name!r}: schema must be a JSON schema of type 'object' describing "
                f"the arguments, got {self.schema!r}"
            )
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(self.schema)
        except SchemaError as e:
            raise ValueError(f"tool {self.name!r}: invalid JSON schema: {e.message}") from None

    def spec(self) -> dict[str, Any]:
        """The OpenAI/Qwen function spec (what chat templates take as ``tools=[...]``)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.schema),
            },
        }

    def __call__(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        """Validate ``arguments``, call ``fn`` and normalise a ``str`` return to a :class:`ToolResult`."""
        validate_arguments(arguments, self.schema)
        result = self.fn(ctx, **arguments)
        if isinstance(result, str):
            return ToolResult(text=result)
        if not isinstance(result, ToolResult):
            raise TypeError(
                f"tool {self.name!r} returned {type(result).__name__}; return a ToolResult or str"
            )
        return result
