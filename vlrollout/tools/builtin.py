"""Built-in tools: ``zoom_in``/``crop``, ``rotate`` and the text-only ``image_info``.

Boxes are written in the model family's own convention (:attr:`ToolContext.box_frame`, see
:mod:`vlrollout.geometry`): 0–1000 normalised ``[x1, y1, x2, y2]`` for
Qwen2-VL (``<|box_start|>(x1,y1),(x2,y2)<|box_end|>`` in its model card) and Qwen3-VL, pixels of the
resized image for Qwen2.5-VL (``bbox_2d`` in its cookbooks). The box is converted to pixels of the
image being cropped with that image's recorded geometry, clamped to the image and rounded outward;
the crop is taken from the full-resolution image (that is what makes zooming useful), and the
processor resizes it within the workflow's pixel budget like any other image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from PIL import Image

from vlrollout.geometry import Frame, convert_boxes, frame_size

from .base import Tool, ToolContext, ToolError, ToolResult

PixelBox = tuple[int, int, int, int]

IMAGE_INDEX = {
    "type": "integer",
    "minimum": 0,
    "description": "Which image: 0 is the first image of the question, tool images follow in order.",
}
BOX_SCHEMA = {
    "type": "object",
    "properties": {
        "bbox_2d": {
            "type": "array",
            "items": {"type": "number"},
            "minItems": 4,
            "maxItems": 4,
            "description": "[x1, y1, x2, y2] in your usual box coordinates for this image.",
        },
        "image_index": IMAGE_INDEX,
        "label": {"type": "string", "description": "Optional: what you are looking for."},
    },
    "required": ["bbox_2d"],
    "additionalProperties": False,
}
ROTATE_SCHEMA = {
    "type": "object",
    "properties": {
        "angle": {
            "type": "integer",
            "enum": [90, 180, 270],
            "description": "Degrees counter-clockwise.",
        },
        "image_index": IMAGE_INDEX,
    },
    "required": ["angle"],
    "additionalProperties": False,
}
INFO_SCHEMA = {
    "type": "object",
    "properties": {"image_index": IMAGE_INDEX},
    "additionalProperties": False,
}

# Round before floor/ceil so 250/1000*640 = 160.00000000000003 stays 160.
_EPS_DIGITS = 6


def box_to_pixels(
    box: Sequence[float], geometry: Any, frame: Frame | str, image_size: tuple[int, int]
) -> PixelBox:
    """Convert a box in ``frame`` to an integer pixel box of the image being cropped, clamped
    to it.

    Args:
        box: ``[x1, y1, x2, y2]`` as the model wrote it.
        geometry: The image's :class:`~vlrollout.processors.base.ImageGeometry` (or its dict).
        frame: The frame of ``box`` (``"norm1000"``, ``"model"``, ``"norm1"``, ``"original"``).
        image_size: ``(width, height)`` of the image being cropped: the original, or the canvas
            a cropping or padding plug-in handed its processor (the engine image), which the
            processor resized to the model frame.

    Returns:
        ``(left, top, right, bottom)`` for ``PIL.Image.crop``: rounded outward (floor/ceil) so
        the crop contains the box, then clamped to the image.

    Raises:
        ToolError: not four finite numbers, ``x1 >= x2`` or ``y1 >= y2`` (empty or reversed), or no
            overlap with the image.

    >>> geo = {"original_width": 640, "original_height": 480, "model_width": 644,
    ...        "model_height": 476}
    >>> box_to_pixels([250, 250, 750, 750], geo, "norm1000", (640, 480))
    (160, 120, 480, 360)
    """
    if len(box) != 4 or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in box
    ):
        raise ToolError(f"bbox_2d must be four numbers [x1, y1, x2, y2], got {list(box)!r}")
    if not all(math.isfinite(v) for v in box):
        raise ToolError(f"bbox_2d must hold finite numbers, got {list(box)!r}")
    x1, y1, x2, y2 = box
    if x1 >= x2 or y1 >= y2:
        raise ToolError(f"bbox_2d {list(box)} is empty or reversed: it needs x1 < x2 and y1 < y2")
    width, height = image_size
    if (width, height) == frame_size(Frame.ORIGINAL, geometry):
        ((bx1, by1, bx2, by2),) = convert_boxes([box], frame, Frame.ORIGINAL, geometry)
    else:  # a plug-in's canvas (cropped, padded): the image its processor resized to the model frame
        ((mx1, my1, mx2, my2),) = convert_boxes([box], frame, Frame.MODEL, geometry)
        model_width, model_height = frame_size(Frame.MODEL, geometry)
        sx, sy = width / model_width, height / model_height
        bx1, by1, bx2, by2 = mx1 * sx, my1 * sy, mx2 * sx, my2 * sy
    left = max(0, math.floor(round(bx1, _EPS_DIGITS)))
    top = max(0, math.floor(round(by1, _EPS_DIGITS)))
    right = min(width, math.ceil(round(bx2, _EPS_DIGITS)))
    bottom = min(height, math.ceil(round(by2, _EPS_DIGITS)))
    if left >= right or top >= bottom:
        raise ToolError(
            f"bbox_2d {list(box)} lies outside the image ({_frame_extent(frame, geometry)})"
        )
    return left, top, right, bottom


def _frame_extent(frame: Frame | str, geometry: Any) -> str:
    w, h = frame_size(frame, geometry)
    return f"coordinates run from 0 to {w:g} in x and 0 to {h:g} in y"


def crop(
    ctx: ToolContext, bbox_2d: list[float], image_index: int = 0, label: str | None = None
) -> ToolResult:
    """Crop ``bbox_2d`` (model coordinates) out of image ``image_index`` and show it."""
    image = ctx.image(image_index)
    box = box_to_pixels(bbox_2d, ctx.image_geometry(image_index), ctx.box_frame, image.size)
    cropped = image.crop(box)
    what = f" ({label})" if label else ""
    return ToolResult(
        text=(
            f"Region {list(bbox_2d)} of image {image_index}{what}, "
            f"{cropped.width}x{cropped.height} pixels."
        ),
        images=[cropped],
    )


_TRANSPOSE = {
    90: Image.Transpose.ROTATE_90,
    180: Image.Transpose.ROTATE_180,
    270: Image.Transpose.ROTATE_270,
}


def rotate(ctx: ToolContext, angle: int, image_index: int = 0) -> ToolResult:
    """Rotate image ``image_index`` by ``angle`` degrees counter-clockwise (exact, no resampling)."""
    if angle not in _TRANSPOSE:
        raise ToolError(f"angle must be 90, 180 or 270, got {angle!r}")
    rotated = ctx.image(image_index).transpose(_TRANSPOSE[angle])
    return ToolResult(
        text=f"Image {image_index} rotated {angle} degrees counter-clockwise.",
        images=[rotated],
    )


def image_info(ctx: ToolContext, image_index: int = 0) -> str:
    """Text-only: the image's size, the size the model sees, and the box convention."""
    image = ctx.image(image_index)
    geo = ctx.image_geometry(image_index)
    return (
        f"Image {image_index}: {image.width}x{image.height} pixels, shown to you at "
        f"{geo.model_width}x{geo.model_height}; boxes for tools: {_frame_extent(ctx.box_frame, geo)}."
    )


BUILTIN_TOOLS: dict[str, Tool] = {
    "zoom_in": Tool(
        "zoom_in",
        crop,
        BOX_SCHEMA,
        "Zoom in on a region of an image: returns the region as a new image at full resolution.",
    ),
    "crop": Tool(
        "crop", crop, BOX_SCHEMA, "Crop a region of an image and return it as a new image."
    ),
    "rotate": Tool("rotate", rotate, ROTATE_SCHEMA, "Rotate an image; returns the rotated image."),
    "image_info": Tool(
        "image_info",
        image_info,
        INFO_SCHEMA,
        "Report an image's size and the box coordinate range.",
    ),
}
