"""Coordinate frames for boxes and points: re-exported from :mod:`vlrollout.geometry`.

Image geometry lives in one module (:mod:`vlrollout.geometry`): the frames (``original``,
``model``, ``norm1000``, ``norm1``), the per-image transform the preprocessor recorded (scale and
offset, so crops and padding convert exactly) and the conversions rewards apply. IoU and GIoU are
invariant under per-axis scaling, not under a crop or pad offset: convert both boxes into one frame
first.
"""

from __future__ import annotations

from vlrollout.geometry import (
    Box,
    Frame,
    ImageGeometry,
    Point,
    check_conversion,
    convert_boxes,
    convert_points,
    frame_size,
    geometry_dict,
)

__all__ = [
    "Box",
    "Frame",
    "ImageGeometry",
    "Point",
    "check_conversion",
    "convert_boxes",
    "convert_points",
    "frame_size",
    "geometry_dict",
]
