"""The worked example in examples/custom_preprocessor.py runs and does what it says."""

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from vlrollout.processors import PreparedPromptCache, get_preprocessor, register_preprocessor
from vlrollout.processors.registry import unregister_preprocessor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location(
        "custom_preprocessor", EXAMPLES / "custom_preprocessor.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_preprocessor"] = module  # dataclasses resolve annotations via sys.modules
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("custom_preprocessor", None)


def red_in_centre(size=(200, 100)):
    """Blue border, red centre: a 0.5 centre crop is all red."""
    image = Image.new("RGB", size, (0, 0, 255))
    w, h = size
    image.paste(Image.new("RGB", (w // 2, h // 2), (255, 0, 0)), (w // 4, h // 4))
    return image


def data():
    return {
        "id": 0,
        "messages": [{"role": "user", "content": "<image>Colour?"}],
        "images": [red_in_centre()],
    }


def test_crop_and_schedule(example, offline):
    pre = example.build_center_crop_preprocessor(
        offline("qwen2_vl"), crop_fraction=0.5, schedule=[(0, 56 * 56), (10, 112 * 112)]
    )
    early = pre.prepare(data())
    geo = early.geometry[0]  # from the item's original 200x100 pixels, crop included
    assert (geo.original_width, geo.original_height) == (200, 100)
    assert geo.to_original(0, 0) == (50, 25) and geo.to_original(
        geo.model_width, geo.model_height
    ) == pytest.approx((150, 75))
    # the crop is pure red: every patch equals the first (the blue border was cut away)
    pv = early.multi_modal_input["pixel_values"]
    assert torch.allclose(pv, pv[0].expand_as(pv))
    pre.set_step(10)
    late = pre.prepare(data())
    assert (
        late.multi_modal_input["image_grid_thw"].prod()
        > early.multi_modal_input["image_grid_thw"].prod()
    )


def test_cache_key_follows_the_schedule(example, offline):
    pre = example.build_center_crop_preprocessor(
        offline("qwen2_vl"), schedule=[(0, 3136), (5, 12544)]
    )
    cache = PreparedPromptCache(pre, key_fn=pre.cache_key)
    first = asyncio.run(cache.aprepare(data()))
    assert asyncio.run(cache.aprepare(data())) is first
    pre.set_step(5)
    assert asyncio.run(cache.aprepare(data())) is not first


def test_bad_arguments(example, offline):
    with pytest.raises(ValueError, match="crop_fraction"):
        example.CenterCropScheduledPreprocessor(offline("qwen2_vl"), crop_fraction=0)
    with pytest.raises(ValueError, match="schedule"):
        example.CenterCropScheduledPreprocessor(offline("qwen2_vl"), schedule=[(3, 100)])


def test_resolved_by_import_path_and_name(example, offline, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    pre = get_preprocessor(
        "custom_preprocessor.build_center_crop_preprocessor", processor=offline("qwen2_vl")
    )
    assert type(pre).__name__ == "CenterCropScheduledPreprocessor"
    register_preprocessor("center_crop_test", example.build_center_crop_preprocessor)
    try:
        assert (
            get_preprocessor("center_crop_test", processor=offline("qwen2_vl")).crop_fraction == 0.8
        )
    finally:
        unregister_preprocessor("center_crop_test")


def test_script_runs():
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "custom_preprocessor.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "[[1, 2, 4]]" in out.stdout and "[[1, 4, 10]]" in out.stdout
