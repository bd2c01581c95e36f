"""The report's picture of what the model saw, and the report page itself."""

from __future__ import annotations

import numpy as np
from PIL import Image

from vlrollout.report_images import images_seen_by_model


def test_unpatchify_inverts_the_qwen2vl_processor(qwen2vl_processor):
    rng = np.random.default_rng(0)
    array = rng.integers(0, 256, size=(56, 84, 3), dtype=np.uint8)  # multiple of 28: no resize
    out = qwen2vl_processor.image_processor(images=[Image.fromarray(array)], return_tensors="pt")
    (seen,) = images_seen_by_model(out, qwen2vl_processor)
    assert seen.size == (84, 56)
    assert np.abs(np.asarray(seen).astype(int) - array.astype(int)).max() <= 1


def test_two_images_come_back_in_order(qwen2vl_processor):
    red, blue = Image.new("RGB", (56, 56), (255, 0, 0)), Image.new("RGB", (28, 56), (0, 0, 255))
    out = qwen2vl_processor.image_processor(images=[red, blue], return_tensors="pt")
    first, second = images_seen_by_model(out, qwen2vl_processor)
    assert first.getpixel((5, 5))[0] > 250 and second.getpixel((5, 5))[2] > 250
    _, h, w = out["image_grid_thw"][1].tolist()
    assert second.size == (w * 14, h * 14)  # the size the model saw, after the processor's resize
