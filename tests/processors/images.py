"""Tiny images written in code, for the processors tests."""

from __future__ import annotations

import io

from PIL import Image


def png_bytes(image: Image.Image, fmt: str = "PNG", **save_kwargs) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **save_kwargs)
    return buf.getvalue()


def halves(size=(40, 20), left=(255, 0, 0), right=(0, 0, 255)) -> Image.Image:
    """An RGB image whose left half is ``left`` and right half ``right``."""
    w, h = size
    image = Image.new("RGB", size, right)
    image.paste(Image.new("RGB", (w // 2, h), left), (0, 0))
    return image
