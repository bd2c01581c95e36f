"""Shared fixtures: tiny images written in code and offline processors (built once per session)."""

from __future__ import annotations

import io
import warnings

import pytest
from PIL import Image

from vlrollout.processors.offline import build_offline_processor


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


@pytest.fixture
def rgb_png(tmp_path):
    path = tmp_path / "rgb.png"
    halves((70, 40)).save(path)
    return path


@pytest.fixture
def tall_png(tmp_path):
    path = tmp_path / "tall.png"
    halves((30, 90), (0, 200, 0), (200, 200, 0)).save(path)
    return path


@pytest.fixture(scope="session")
def offline():
    """``offline(family)`` -> a cached offline processor (fast warnings silenced)."""

    def get(family: str):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return build_offline_processor(family)

    return get
