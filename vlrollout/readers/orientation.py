"""COCO-family boxes in the frame of the image the model sees.

COCO, RefCOCO and their Hugging Face copies give boxes in the image's stored pixels, the frame
their annotation tools (and lmms-eval, which opens images without ``exif_transpose``) used.
vlrollout shows the model the upright image, EXIF orientation applied, as every image it loads
(``docs/item_format.md``), so the readers turn those boxes with the same orientation: a box then
lies on the object in the picture the model sees and the rewards compare like with like. Only the
file's header is read (its size and EXIF tag), not its pixels.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from PIL import Image, UnidentifiedImageError

ORIENTATION_TAG = 0x0112


def _point(x: float, y: float, orientation: int, width: float, height: float):
    """Where the stored pixel position ``(x, y)`` of a ``width`` x ``height`` image lands in the
    upright image (PIL's ``exif_transpose`` of each orientation)."""
    return {
        1: (x, y),
        2: (width - x, y),
        3: (width - x, height - y),
        4: (x, height - y),
        5: (y, x),
        6: (height - y, x),
        7: (height - y, width - x),
        8: (y, width - x),
    }[orientation]


def upright_box(box: Sequence[float], orientation: int, width: float, height: float) -> list[float]:
    """``[x1, y1, x2, y2]`` in the stored pixels of a ``width`` x ``height`` image, in the
    pixels of the image its EXIF ``orientation`` turns upright.

    >>> upright_box([100, 200, 500, 600], 6, 1000, 667)
    [67, 100, 467, 500]
    """
    (ax, ay), (bx, by) = (
        _point(box[0], box[1], orientation, width, height),
        _point(box[2], box[3], orientation, width, height),
    )
    return [min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)]


def stored_orientation(source: Any) -> tuple[int, int, int] | None:
    """``(orientation, stored width, stored height)`` of an image path or bytes, from its header;
    ``None`` when it cannot be opened (the image loader reports why when the item runs)."""
    if isinstance(source, (bytes, bytearray)):
        source = io.BytesIO(source)
    elif not isinstance(source, str):
        return None
    try:
        with Image.open(source) as image:
            orientation = int(image.getexif().get(ORIENTATION_TAG, 1))
            return orientation, image.width, image.height
    except (OSError, UnidentifiedImageError, ValueError, TypeError):
        return None


def upright_boxes(boxes: list[list[float]], source: Any) -> list[list[float]]:
    """``boxes`` (stored pixels of the image ``source``) in the upright image's pixels."""
    found = stored_orientation(source) if boxes else None
    if found is None or found[0] not in range(2, 9):
        return boxes
    orientation, width, height = found
    return [upright_box(b, orientation, width, height) for b in boxes]
