"""Processor regression snapshots of every offline family on the sample images in assets/.

Golden files live in tests/snapshots/ and are regenerated only by `make snapshots` (review the
diff before committing).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.run.datasets import load_items
from vlrollout.snapshots import assert_matches_snapshot, compare, load_snapshot, take_snapshot
from vlrollout.testing.offline_processors import OFFLINE_BUILDERS, build_offline_processor

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "assets" / "samples" / "data.jsonl"
SNAPSHOTS = REPO / "tests" / "snapshots"
FAMILIES = [f for f in OFFLINE_BUILDERS if f != "smolvlm" or importlib.util.find_spec("num2words")]


def _items():
    return [i for i in load_items(DATA) if i.get("images")]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_its_snapshot(family):
    pre = AutoProcessorPreprocessor(build_offline_processor(family))
    assert_matches_snapshot(pre, _items(), SNAPSHOTS / f"{family}.json")


def test_changed_max_pixels_fails_and_names_the_field():
    from vlrollout.testing.offline_processors import build_qwen2_vl

    pre = AutoProcessorPreprocessor(build_qwen2_vl(max_pixels=56 * 56))
    expected = load_snapshot(SNAPSHOTS / "qwen2_vl.json")
    diffs = compare(expected, take_snapshot(pre, _items()))
    fields = {d.field for d in diffs}
    assert {"image_grid_thw", "image_token_count", "pixel_values.shape"} <= fields
    with pytest.raises(AssertionError, match=r"item \S+: image_grid_thw: expected"):
        assert_matches_snapshot(pre, _items(), SNAPSHOTS / "qwen2_vl.json")


def test_pixel_change_without_size_change_is_caught():
    """A brightness change keeps every size and count but moves the fingerprints."""
    pre = AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"))
    items = _items()[:1]
    from PIL import Image, ImageEnhance

    from vlrollout.processors.image_loading import load_image

    image = load_image(items[0]["images"][0]).image
    items[0]["images"] = [ImageEnhance.Brightness(image).enhance(1.05)]
    expected = load_snapshot(SNAPSHOTS / "qwen2_vl.json")
    expected["items"] = {k: v for k, v in expected["items"].items() if k == items[0]["id"]}
    fields = {d.field for d in compare(expected, take_snapshot(pre, items))}
    assert "pixel_values.hash" in fields and "pixel_values.channel_mean" in fields
    assert "image_grid_thw" not in fields
    assert isinstance(image, Image.Image)


def test_check_command_passes_on_a_clean_checkout_and_fails_on_max_pixels():
    base = [
        sys.executable,
        "-m",
        "vlrollout.cli",
        "check",
        "--processor",
        "offline:qwen2_vl",
        "--data",
        str(DATA),
        "--snapshot",
        str(SNAPSHOTS / "qwen2_vl.json"),
    ]
    ok = subprocess.run(base, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run(
        base + ["--min-pixels", "784", "--max-pixels", "3136"], capture_output=True, text=True
    )
    assert bad.returncode == 1
    assert "image_grid_thw: expected" in bad.stdout
