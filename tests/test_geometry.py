"""Image geometry: the transform original → model frame, exact for resize, crop and pad."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from vlrollout.geometry import Frame, ImageGeometry, convert_boxes, convert_points
from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.rewards.box_scores import iou
from vlrollout.testing.offline_processors import build_offline_processor


def test_composition_of_resize_crop_and_pad():
    g = (
        ImageGeometry.resized(200, 100, 400, 200)
        .then(ImageGeometry.cropped(400, 200, (100, 0, 300, 200)))
        .then(ImageGeometry.padded(200, 200, 240, 260, 20, 30))
    )
    assert (g.model_width, g.model_height, g.scale_x, g.offset_x, g.offset_y) == (
        240,
        260,
        2.0,
        -80.0,
        30.0,
    )
    assert g.to_model(50, 0) == (20.0, 30.0)
    assert convert_boxes(
        convert_boxes([(60, 10, 90, 40)], "original", "model", g), "model", "original", g
    ) == [(60.0, 10.0, 90.0, 40.0)]
    with pytest.raises(ValueError, match="cannot compose"):
        ImageGeometry.identity(10, 10).then(ImageGeometry.identity(11, 10))


def test_normalised_frames_are_relative_to_the_model_frame():
    g = ImageGeometry.letterboxed(200, 100, 100)  # 100x50 content, 25 rows of padding above
    assert (g.offset_x, g.offset_y) == (0.0, 25.0)
    # the whole content, written by a model in 0..1000 of the padded square
    (box,) = convert_boxes([(0, 250, 1000, 750)], Frame.NORM1000, Frame.ORIGINAL, g)
    assert box == pytest.approx((0, 0, 200, 100))
    assert convert_points([(500, 500)], "norm1", "norm1000") == [(500000.0, 500000.0)]


def test_plain_resize_dict_keeps_the_four_sizes_and_old_dicts_still_work():
    g = ImageGeometry(640, 480, 644, 476)
    assert set(g.to_dict()) == {"original_width", "original_height", "model_width", "model_height"}
    crop = ImageGeometry.cropped(640, 480, (10, 20, 110, 120))
    assert crop.to_dict()["offset_x"] == -10
    assert ImageGeometry.from_any(crop.to_dict()) == crop
    with pytest.raises(ValueError, match="missing"):
        ImageGeometry.from_any({"original_width": 3})


# -- the families' real processors ---------------------------------------------------------------

PHOTO = (
    Path(__import__("matplotlib").get_data_path()) / "sample_data" / "grace_hopper.jpg"
    if __import__("importlib").util.find_spec("matplotlib")
    else None
)
GREEN = (0, 255, 0)


def _photo_with_box(size, box):
    if PHOTO is not None and PHOTO.exists():
        photo = Image.open(PHOTO).convert("RGB").resize(size)
    else:  # a seeded smooth image stands in
        rng = np.random.default_rng(0)
        photo = Image.fromarray(rng.integers(60, 200, (size[1], size[0], 3), dtype=np.uint8))
    ImageDraw.Draw(photo).rectangle([box[0], box[1], box[2] - 1, box[3] - 1], fill=GREEN)
    return photo


def _green_box(frame: np.ndarray) -> tuple[float, float, float, float]:
    """Bounding box (x1, y1, x2, y2) of the pure-green pixels of an HxWx3 uint8 array."""
    r, g, b = (frame[..., i].astype(int) for i in range(3))
    ys, xs = np.nonzero((g > 180) & (r < 90) & (b < 90))
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)


def _denormalise(pv: torch.Tensor, ip) -> np.ndarray:
    mean = torch.tensor(ip.image_mean).view(3, 1, 1)
    std = torch.tensor(ip.image_std).view(3, 1, 1)
    return ((pv * std + mean) * 255).clamp(0, 255).round().byte().permute(1, 2, 0).numpy()


def _processor(family, **image_processor_attrs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc = copy.deepcopy(build_offline_processor(family))
    for k, v in image_processor_attrs.items():
        setattr(proc.image_processor, k, v)
    return proc


def _check(prepared, frame, box):
    geo = prepared.geometry[0]
    seen = _green_box(frame)
    (predicted,) = convert_boxes([box], "original", "model", geo)
    assert iou(predicted, seen) > 0.93, (predicted, seen, geo)
    (back,) = convert_boxes([seen], "model", "original", geo)
    assert iou(back, box) > 0.93, (back, box, geo)


@pytest.mark.parametrize("size", [(300, 400), (400, 300)], ids=["portrait", "landscape"])
def test_llava_centre_crop_is_recorded(size):
    proc = _processor("llava", size={"shortest_edge": 112}, crop_size={"height": 112, "width": 112})
    box = (100, 110, 220, 200) if size[0] < size[1] else (120, 100, 260, 190)
    photo = _photo_with_box(size, box)
    pre = AutoProcessorPreprocessor(proc)
    prepared = pre.prepare(
        {"messages": [{"role": "user", "content": "<image>Q"}], "images": [photo]}
    )
    frame = _denormalise(prepared.multi_modal_input["pixel_values"][0], proc.image_processor)
    assert frame.shape[:2] == (112, 112)
    assert not prepared.geometry[0].is_plain_resize  # a crop, not a squash
    _check(prepared, frame, box)


@pytest.mark.parametrize("size", [(300, 200), (200, 300)], ids=["landscape", "portrait"])
def test_llava_onevision_padding_is_recorded(size):
    proc = _processor(
        "llava_onevision",
        size={"height": 56, "width": 56},
        image_grid_pinpoints=[[56, 56], [56, 112], [112, 56], [112, 112]],
    )
    box = (60, 50, 170, 120) if size[0] > size[1] else (50, 60, 120, 170)
    photo = _photo_with_box(size, box)
    pre = AutoProcessorPreprocessor(proc)
    prepared = pre.prepare(
        {"messages": [{"role": "user", "content": "<image>Q"}], "images": [photo]}
    )
    geo = prepared.geometry[0]
    patches = prepared.multi_modal_input["pixel_values"][0][1:]  # [0] is the base image
    p = patches.shape[-1]
    rows, cols = geo.model_height // p, geo.model_width // p
    assert rows * cols == patches.shape[0]
    tiles = [_denormalise(t, proc.image_processor) for t in patches]
    canvas = np.concatenate(
        [np.concatenate(tiles[r * cols : (r + 1) * cols], axis=1) for r in range(rows)], axis=0
    )
    assert not geo.is_plain_resize and (geo.offset_x > 0 or geo.offset_y > 0)  # padded
    _check(prepared, canvas, box)
