"""Shared fixtures: tiny images written in code and offline processors (built once per session)."""

from __future__ import annotations

import warnings

import pytest

from tests.processors.images import halves
from vlrollout.testing.offline_processors import build_offline_processor


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
