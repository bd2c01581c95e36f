"""Fixture datasets made in code, in the layouts users download (images made with PIL)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image


def png(size: tuple[int, int], colour: tuple[int, int, int] = (200, 40, 40)) -> bytes:
    """The PNG bytes of a plain image of ``size`` (width, height)."""
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def save_image(path: Path, size: tuple[int, int]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png(size))
    return path
