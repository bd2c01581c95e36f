"""Custom preprocessors: centre-crop with a pixel-budget schedule, and letterbox to a square.

Both wrap :class:`vlrollout.processors.AutoProcessorPreprocessor` (composition, not inheritance):
images are loaded and transformed here, then handed to the wrapped preprocessor as PIL images. Each
returns the wrapped :class:`~vlrollout.processors.PreparedPrompt` with its geometry composed with
the step taken here (``ImageGeometry.cropped(...).then(g)``, ``ImageGeometry.letterboxed(...)``),
so a box in the model's frame converts exactly to the item's original pixels (rewards, tools).

The factory contract (:mod:`vlrollout.processors.contract`): the factory is called with
``processor``, ``chat_template_kwargs``, ``min_pixels``, ``max_pixels`` and the plug-in's own options
(from the run config's ``preprocessor`` mapping), and returns an object with
``prepare(data) -> PreparedPrompt``, ``.processor`` and ``.tokenizer``. Use it by import path (this
file must be importable, e.g. on ``PYTHONPATH``)::

    preprocessor:
      name: custom_preprocessor.build_center_crop_preprocessor
      crop_fraction: 0.5

or register it under a name, or publish it as an entry point in your package::

    [project.entry-points."vlrollout.processors"]
    center_crop = "my_pkg.custom_preprocessor:build_center_crop_preprocessor"

Run ``python examples/custom_preprocessor.py`` for a demo with the offline tiny Qwen2-VL processor.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from typing import Any

from PIL import Image

from vlrollout.geometry import ImageGeometry
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


def _load(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Image.Image], str]:
    item = item_label(data)
    messages, sources = normalize_messages(data["messages"], data.get("images"), item)
    images = [load_image(src, f"{item}, image {k}").image for k, src in enumerate(sources, 1)]
    return messages, images, item


def _with_steps(prepared: PreparedPrompt, steps: list[ImageGeometry]) -> PreparedPrompt:
    """The wrapped result, its geometry starting from the item's original pixels."""
    geometry = [step.then(g) for step, g in zip(steps, prepared.geometry, strict=True)]
    return dataclasses.replace(prepared, geometry=geometry)


class CenterCropScheduledPreprocessor:
    """Centre-crop images, then prepare with a ``max_pixels`` chosen by training step.

    Args:
        processor: A Qwen-VL family processor (or a local path to one).
        crop_fraction: Fraction of width and height kept, in (0, 1].
        schedule: ``[(from_step, max_pixels), ...]`` sorted by step, the first at step 0.
        chat_template_kwargs: Passed to the wrapped preprocessor.
    """

    def __init__(
        self,
        processor: Any,
        crop_fraction: float = 0.8,
        schedule: Sequence[tuple[int, int]] = ((0, 56 * 56), (100, 112 * 112)),
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not 0 < crop_fraction <= 1:
            raise ValueError(f"crop_fraction must be in (0, 1], got {crop_fraction}")
        steps = [s for s, _ in schedule]
        if not schedule or steps[0] != 0 or steps != sorted(steps):
            raise ValueError(f"schedule must be sorted and start at step 0, got {list(schedule)}")
        self.crop_fraction = crop_fraction
        self.schedule = list(schedule)
        self._steps = steps
        self._stages = [
            AutoProcessorPreprocessor(
                processor, max_pixels=px, chat_template_kwargs=chat_template_kwargs
            )
            for _, px in schedule
        ]
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
        """A cache key that changes with the schedule stage (workflows use it as the cache key)."""
        return f"{item_key(data)}@{self.max_pixels}"

    def prepare(self, data: dict[str, Any]) -> PreparedPrompt:
        messages, images, _ = _load(data)
        crops, steps = [], []
        for image in images:
            crop, box = center_crop(image, self.crop_fraction)
            crops.append(crop)
            steps.append(ImageGeometry.cropped(*image.size, box))
        stage = self._stages[bisect.bisect_right(self._steps, self.step) - 1]
        return _with_steps(stage.prepare({**data, "messages": messages, "images": crops}), steps)


class LetterboxPreprocessor:
    """Resize each image to fit a ``side``×``side`` square, keeping its aspect, on grey padding.

    Args:
        processor: Any transformers processor the default preprocessor supports.
        side: The square's side in pixels.
        fill: Padding colour.
        kwargs: Passed to the wrapped :class:`AutoProcessorPreprocessor` (pixel budget, chat
            template variables).
    """

    def __init__(
        self,
        processor: Any,
        side: int = 224,
        fill: tuple[int, int, int] = (128, 128, 128),
        **kwargs,
    ) -> None:
        if side < 1:
            raise ValueError(f"side must be positive, got {side}")
        self.side, self.fill = side, tuple(fill)
        self._inner = AutoProcessorPreprocessor(processor, **kwargs)
        self.processor, self.tokenizer = self._inner.processor, self._inner.tokenizer

    def letterbox(self, image: Image.Image) -> tuple[Image.Image, ImageGeometry]:
        """The padded square and the geometry of the step (original → square)."""
        geo = ImageGeometry.letterboxed(*image.size, self.side)
        scaled = image.resize((round(image.width * geo.scale_x), round(image.height * geo.scale_y)))
        canvas = Image.new("RGB", (self.side, self.side), self.fill)
        canvas.paste(scaled, (int(geo.offset_x), int(geo.offset_y)))
        return canvas, geo

    def prepare(self, data: dict[str, Any]) -> PreparedPrompt:
        messages, images, _ = _load(data)
        boxed = [self.letterbox(im) for im in images]
        prepared = self._inner.prepare(
            {**data, "messages": messages, "images": [canvas for canvas, _ in boxed]}
        )
        return _with_steps(prepared, [geo for _, geo in boxed])


def build_center_crop_preprocessor(
    processor: Any,
    *,
    chat_template_kwargs: dict[str, Any] | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    **options: Any,
) -> CenterCropScheduledPreprocessor:
    """Factory (the contract's keywords; the schedule sets the pixel budget, so a fixed
    ``min_pixels``/``max_pixels`` is refused rather than ignored)."""
    if min_pixels is not None or max_pixels is not None:
        raise ValueError("the centre-crop preprocessor sets max_pixels from its schedule")
    return CenterCropScheduledPreprocessor(
        processor, chat_template_kwargs=chat_template_kwargs, **options
    )


def build_letterbox_preprocessor(
    processor: Any,
    *,
    chat_template_kwargs: dict[str, Any] | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    **options: Any,
) -> LetterboxPreprocessor:
    """Factory for :class:`LetterboxPreprocessor` (the contract's keywords plus ``side``/``fill``)."""
    return LetterboxPreprocessor(
        processor,
        chat_template_kwargs=chat_template_kwargs,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        **options,
    )


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
        print(step, out.geometry[0], out.multi_modal_input["image_grid_thw"].tolist())
