"""Convert a decoded PIL image of any mode to 8-bit RGB with one documented rule.

The rule (what :func:`to_rgb` does per mode):

- ``RGB``: unchanged (with a PNG ``tRNS`` transparent colour: composited, as below).
- ``1``, ``L``, ``CMYK``, ``YCbCr``, ``LAB``, ``HSV``: PIL's ``convert("RGB")`` (grey replicated to
  three channels; CMYK by PIL's naive formula, ICC profiles are ignored).
- Anything with alpha (``RGBA``, ``LA``, ``PA``, ``RGBa``, ``La``) and any mode with a
  ``transparency`` entry (``P``, and ``L``/``RGB`` PNGs with ``tRNS``): **alpha-composited on opaque white** (255, 255, 255). Engines that just drop alpha
  (``convert("RGB")``) show whatever colour sits under transparent pixels (often black), which is
  why such images are re-encoded before they reach the engine (see :mod:`.image_loading`).
- ``P`` without transparency: palette lookup (``convert("RGB")``).
- ``I;16`` / ``I;16B`` / ``I;16L`` / ``I;16N`` (16-bit grey): scaled by the full 16-bit range,
  ``v * 255 / 65535`` rounded (PIL's own conversion clips at 255 instead, which whites out most of a
  16-bit image).
- ``I`` (32-bit int grey, how TIFF/PNG 16-bit data often decodes): clipped to [0, 65535] and scaled
  like ``I;16``.
- ``F`` (32-bit float grey): if every value lies in [0, 1] it is taken as normalised and multiplied
  by 255, otherwise clipped to [0, 255]; then rounded.

>>> from PIL import Image
>>> to_rgb(Image.new("LA", (1, 1), (0, 0))).getpixel((0, 0))
(255, 255, 255)
"""

from __future__ import annotations

import numpy as np
from PIL import Image

WHITE = (255, 255, 255)
_ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}
_SIXTEEN_BIT = {"I;16", "I;16B", "I;16L", "I;16N"}


def has_alpha(image: Image.Image) -> bool:
    """Whether ``image`` carries transparency: an alpha band, a ``transparency`` entry (tRNS),
    or a palette of RGBA colours (what PIL's ``RGBA -> P`` conversion makes)."""
    return image.mode in _ALPHA_MODES or image.has_transparency_data


def _grey_to_rgb(values: np.ndarray) -> Image.Image:
    grey = np.clip(np.rint(values), 0, 255).astype(np.uint8)
    return Image.fromarray(np.stack([grey] * 3, axis=-1), mode="RGB")


def to_rgb(image: Image.Image, background: tuple[int, int, int] = WHITE) -> Image.Image:
    """Return ``image`` as 8-bit RGB following the module's rule (alpha composited on ``background``).

    Args:
        image: A decoded PIL image of any mode.
        background: RGB colour under transparent pixels; white by default.

    Returns:
        An ``RGB`` image of the same size. ``image`` itself is returned when it is already RGB
        without a transparent colour.

    >>> from PIL import Image
    >>> to_rgb(Image.new("I;16", (1, 1), 65535)).getpixel((0, 0))
    (255, 255, 255)
    """
    mode = image.mode
    if mode == "RGB" and "transparency" not in image.info:
        return image
    if mode in _SIXTEEN_BIT:
        return _grey_to_rgb(np.asarray(image, dtype=np.float64) * (255.0 / 65535.0))
    if mode == "I":
        values = np.clip(np.asarray(image, dtype=np.float64), 0, 65535)
        return _grey_to_rgb(values * (255.0 / 65535.0))
    if mode == "F":
        values = np.nan_to_num(np.asarray(image, dtype=np.float64), nan=0.0)
        if values.size and values.min() >= 0.0 and values.max() <= 1.0:
            values = values * 255.0
        return _grey_to_rgb(values)
    if has_alpha(image):
        if mode == "La":  # premultiplied; PIL converts it to LA only
            image = image.convert("LA")
        rgba = image.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, (*background, 255))
        return Image.alpha_composite(canvas, rgba).convert("RGB")
    return image.convert("RGB")
