"""Coordinate frames for boxes and points, and conversion between them.

A box ``[x1, y1, x2, y2]`` (or point ``[x, y]``) means nothing without its frame:

- ``original``: pixels of the decoded image (after EXIF orientation) — where dataset labels live;
- ``model``: pixels of the image the model saw after the processor resized it (Qwen2.5-VL's
  ``smart_resize`` output; its boxes are absolute pixels in this frame);
- ``norm1000``: both axes scaled to 0..1000 (Qwen2-VL, Qwen3-VL, InternVL, GLM);
- ``norm1``: both axes scaled to 0..1.

Conversion goes through the unit square: ``x_dst = x_src / W_src * W_dst`` (same for y). The frame
sizes of ``original`` and ``model`` come from the per-image geometry our preprocessors record
(``ImageGeometry.to_dict()`` in ``processors/base.py``: ``original_width``, ``original_height``,
``model_width``, ``model_height``). IoU and GIoU are invariant under this per-axis scaling, so scores
may be computed in any frame once both boxes are in the same one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

Box = tuple[float, float, float, float]
Point = tuple[float, float]


class Frame(StrEnum):
    """Where coordinates live; see the module docstring."""

    ORIGINAL = "original"
    MODEL = "model"
    NORM1000 = "norm1000"
    NORM1 = "norm1"


_GEOMETRY_KEYS = ("original_width", "original_height", "model_width", "model_height")


def geometry_dict(geometry: Any) -> dict[str, float] | None:
    """Normalise a geometry given as a dict, an ``ImageGeometry``-like object or ``None``.

    Raises ``ValueError`` naming the missing key, or for non-positive sizes.
    """
    if geometry is None:
        return None
    if isinstance(geometry, Mapping):
        missing = [k for k in _GEOMETRY_KEYS if k not in geometry]
        if missing:
            raise ValueError(
                f"geometry is missing {missing}; expected a dict with keys {list(_GEOMETRY_KEYS)} "
                f"(ImageGeometry.to_dict()), got keys {sorted(geometry)}"
            )
        out = {k: float(geometry[k]) for k in _GEOMETRY_KEYS}
    else:
        try:
            out = {k: float(getattr(geometry, k)) for k in _GEOMETRY_KEYS}
        except AttributeError as e:
            raise ValueError(
                f"geometry must be a dict or ImageGeometry with {list(_GEOMETRY_KEYS)}, "
                f"got {type(geometry).__name__}"
            ) from e
    bad = {k: v for k, v in out.items() if not v > 0}
    if bad:
        raise ValueError(f"geometry sizes must be positive, got {bad}")
    return out


def frame_size(frame: Frame | str, geometry: Any = None) -> tuple[float, float]:
    """Width and height of ``frame``'s coordinate range.

    >>> frame_size("model", {"original_width": 640, "original_height": 480,
    ...                      "model_width": 644, "model_height": 476})
    (644.0, 476.0)
    """
    frame = Frame(frame)
    if frame is Frame.NORM1000:
        return 1000.0, 1000.0
    if frame is Frame.NORM1:
        return 1.0, 1.0
    geo = geometry_dict(geometry)
    if geo is None:
        raise ValueError(
            f"converting to or from the {frame.value!r} frame needs the image geometry "
            f"(task_data['geometry'], recorded by the preprocessor); none was given"
        )
    prefix = "original" if frame is Frame.ORIGINAL else "model"
    return geo[f"{prefix}_width"], geo[f"{prefix}_height"]


def _scales(src: Frame | str, dst: Frame | str, geometry: Any) -> tuple[float, float]:
    src, dst = Frame(src), Frame(dst)
    if src is dst:
        return 1.0, 1.0
    sw, sh = frame_size(src, geometry)
    dw, dh = frame_size(dst, geometry)
    return dw / sw, dh / sh


def convert_boxes(
    boxes: Sequence[Sequence[float]], src: Frame | str, dst: Frame | str, geometry: Any = None
) -> list[Box]:
    """Convert ``[x1, y1, x2, y2]`` boxes from frame ``src`` to frame ``dst``.

    Args:
        boxes: Boxes as sequences of four numbers.
        src: Frame the boxes are in.
        dst: Frame to convert to.
        geometry: Needed when either frame is ``original`` or ``model``.

    >>> geo = {"original_width": 640, "original_height": 480, "model_width": 644,
    ...        "model_height": 476}
    >>> convert_boxes([(250, 250, 750, 750)], "norm1000", "original", geo)
    [(160.0, 120.0, 480.0, 360.0)]
    """
    sx, sy = _scales(src, dst, geometry)
    return [(b[0] * sx, b[1] * sy, b[2] * sx, b[3] * sy) for b in boxes]


def convert_points(
    points: Sequence[Sequence[float]], src: Frame | str, dst: Frame | str, geometry: Any = None
) -> list[Point]:
    """Convert ``[x, y]`` points from frame ``src`` to frame ``dst`` (see :func:`convert_boxes`)."""
    sx, sy = _scales(src, dst, geometry)
    return [(p[0] * sx, p[1] * sy) for p in points]
