"""A custom preprocessor: centre-crop every image, and grow the pixel budget on a schedule.

It wraps :class:`vlrollout.processors.AutoProcessorPreprocessor` (composition, not inheritance):
images are loaded and centre-cropped here, then handed to the wrapped Qwen2-VL preprocessor as PIL
images, whose ``max_pixels`` is picked from a step-indexed schedule (a resolution curriculum).

Use it from a config by import path (this file must be importable, e.g. on ``PYTHONPATH``)::

    preprocessor: custom_preprocessor.build_center_crop_preprocessor

or register it under a name, or publish it as an entry point in your package::

    [project.entry-points."vlrollout.processors"]
    center_crop = "my_pkg.custom_preprocessor:build_center_crop_preprocessor"

Geometry (``prepared.geometry``) is relative to the *cropped* image; ``crop_boxes`` on the result's
wrapper gives each crop's ``(left, top, right, bottom)`` in the original image, so rewards can shift
ground-truth boxes by ``(left, top)`` first.

Run ``python examples/custom_preprocessor.py`` for a demo with the offline tiny Qwen2-VL processor.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor, PreparedPrompt, load_image
from vlrollout.processors.auto import item_label
from vlrollout.processors.cache import item_key
from vlrollout.processors.messages import normalize_messages


def center_crop(
    image: Image.Image, fraction: float
) -> tuple[Image.Image, tuple[int, int, int, int]]:
    """Keep the central ``fraction`` of each side; returns the crop and its box in ``image``.

    >>> crop, box = center_crop(Image.new("RGB", (100, 50)), 0.5)
    >>> crop.size, box
    ((50, 25), (25, 12, 75, 37))
    """
    w, h = image.size
    cw, ch = max(1, round(w * fraction)), max(1, round(h * fraction))
    left, top = (w - cw) // 2, (h - ch) // 2
    box = (left, top, left + cw, top + ch)
    return image.crop(box), box


@dataclass
class CroppedPrompt:
    """The wrapped preprocessor's result plus where each crop came from."""

    prepared: PreparedPrompt
    crop_boxes: list[tuple[int, int, int, int]] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:  # behave like the PreparedPrompt for readers
        return getattr(self.prepared, name)


class CenterCropScheduledPreprocessor:
    """Centre-crop images, then prepare with a ``max_pixels`` chosen by training step.

    Args:
        processor: A Qwen-VL family processor (or a local path to one).
        crop_fraction: Fraction of width and height kept, in (0, 1].
        schedule: ``[(from_step, max_pixels), ...]`` sorted by step, the first at step 0.
    """

    def __init__(
        self,
        processor: Any,
        crop_fraction: float = 0.8,
        schedule: Sequence[tuple[int, int]] = ((0, 56 * 56), (100, 112 * 112)),
    ) -> None:
        if not 0 < crop_fraction <= 1:
            raise ValueError(f"crop_fraction must be in (0, 1], got {crop_fraction}")
        steps = [s for s, _ in schedule]
        if not schedule or steps[0] != 0 or steps != sorted(steps):
            raise ValueError(f"schedule must be sorted and start at step 0, got {list(schedule)}")
        self.crop_fraction = crop_fraction
        self.schedule = list(schedule)
        self._steps = steps
        self._stages = [AutoProcessorPreprocessor(processor, max_pixels=px) for _, px in schedule]
        self.step = 0

    @property
    def processor(self) -> Any:
        return self._stages[0].processor

    @property
    def tokenizer(self) -> Any:
        return self._stages[0].tokenizer

    def set_step(self, step: int) -> None:
        """Advance the schedule (call from the training loop)."""
        self.step = step

    @property
    def max_pixels(self) -> int:
        return self.schedule[bisect.bisect_right(self._steps, self.step) - 1][1]

    def cache_key(self, data: dict[str, Any]) -> str:
        """A cache key that changes with the schedule stage (use as ``key_fn`` of the cache)."""
        return f"{item_key(data)}@{self.max_pixels}"

    def prepare(self, data: dict[str, Any]) -> CroppedPrompt:
        item = item_label(data)
        messages, sources = normalize_messages(data["messages"], data.get("images"), item)
        crops, boxes = [], []
        for k, src in enumerate(sources, start=1):
            image = load_image(src, f"{item}, image {k}").image
            crop, box = center_crop(image, self.crop_fraction)
            crops.append(crop)
            boxes.append(box)
        stage = self._stages[bisect.bisect_right(self._steps, self.step) - 1]
        prepared = stage.prepare({**data, "messages": messages, "images": crops})
        return CroppedPrompt(prepared, boxes)


def build_center_crop_preprocessor(
    processor: Any, **kwargs: Any
) -> CenterCropScheduledPreprocessor:
    """Factory for :func:`vlrollout.processors.get_preprocessor` (by import path or name)."""
    return CenterCropScheduledPreprocessor(processor, **kwargs)


if __name__ == "__main__":
    from vlrollout.processors import get_preprocessor, register_preprocessor
    from vlrollout.testing.offline_processors import build_offline_processor

    register_preprocessor("center_crop", build_center_crop_preprocessor)
    pre = get_preprocessor("center_crop", processor=build_offline_processor("qwen2_vl"))
    data = {
        "id": 0,
        "messages": [{"role": "user", "content": "<image>What colour?"}],
        "images": [Image.new("RGB", (200, 100), "red")],
    }
    for step in (0, 100):
        pre.set_step(step)
        out = pre.prepare(data)
        print(
            step, out.crop_boxes, out.geometry[0], out.multi_modal_input["image_grid_thw"].tolist()
        )
