"""Which frames of a video the model sees: the sampling settings, their family defaults, the rule.

Frames are sampled once, here, and handed to the transformers processor with
``do_sample_frames=False`` and the matching ``video_metadata``, so the processor never samples a
second time and its timing (Qwen2.5-VL's ``second_per_grid_ts``, Qwen3-VL's ``<t seconds>``
prompt timestamps) describes exactly the frames the model saw.

The rule (Qwen2-VL's and Qwen2.5-VL's video processors' ``sample_frames``; every family here gets
it, Qwen3-VL too, whose own processor rounds ``linspace(0, total_frames - 1, n)`` instead: evenly
spaced as well, the timestamps handed over are those of the frames picked here):

1. ``n = total_frames / source_fps * fps`` frames, clamped to ``[min_frames, min(max_frames,
   total_frames)]``;
2. rounded down to a multiple of the family's ``temporal_patch_size`` (2 for Qwen-VL, 1 for others),
   never below one patch when the clip has that many frames;
3. frame ``k`` is source frame ``floor(k * total_frames / n)`` (evenly spaced from the first frame).

Defaults are the family's transformers video processor's own settings (``fps``, ``min_frames``,
``max_frames``, ``temporal_patch_size``); where it leaves one unset: ``fps`` 2.0 (Qwen2-VL's and
Qwen2.5-VL's published sampling rate, qwen-vl-utils ``FPS``), ``max_frames``
:data:`FALLBACK_MAX_FRAMES`, ``min_frames`` 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from transformers.models.qwen3_vl.video_processing_qwen3_vl import (
    Qwen3VLVideoProcessor,
    smart_resize,
)

from .families import check_pixel_bounds

FALLBACK_FPS = 2.0
"""Frames per second when the family's video processor sets none (Qwen2-VL, LLaVA-OneVision)."""
FALLBACK_MAX_FRAMES = 32
"""Most frames per video when the family's video processor sets no ``max_frames``/``num_frames``
(LLaVA-OneVision's published evaluation samples 32)."""


VIDEO_UNSUPPORTED = {
    "SmolVLMProcessor": "SmolVLM's processor turns a video into image frames and takes no image "
    "beside it; its video path is not supported here",
}
"""Processors with a transformers video processor whose video path this package does not serve
(their videos are refused like those of a family without video)."""

_GLM_MIX = (
    "GLM-4.1V cannot take images and videos in one prompt: transformers 5.3's processor expands "
    "an image before a video wrong, and its model counts a video's frame tokens as image tokens "
    "(the forward fails in either order); give the images and the videos in separate items"
)
MIXED_MEDIA_UNSUPPORTED = {"Glm4vProcessor": _GLM_MIX, "Glm46VProcessor": _GLM_MIX}
"""Processors whose model cannot take images and videos in one prompt, with the reason."""


@dataclass(frozen=True)
class VideoSampling:
    """Frame sampling settings for one preprocessor.

    Attributes:
        fps: Frames sampled per second of source video.
        max_frames: Most frames sampled from one video.
        min_frames: Fewest frames sampled (when the clip has that many).
        frame_factor: Sampled counts are a multiple of this (the family's temporal patch).
        min_pixels, max_pixels: Pixel budget passed to the video processor's resize
            (``size={"shortest_edge", "longest_edge"}``); ``None``: the processor's own.
    """

    fps: float = FALLBACK_FPS
    max_frames: int = FALLBACK_MAX_FRAMES
    min_frames: int = 1
    frame_factor: int = 1
    min_pixels: int | None = None
    max_pixels: int | None = None

    def __post_init__(self) -> None:
        for name in ("fps", "max_frames", "min_frames", "frame_factor"):
            check_video_setting(name, getattr(self, name))
        if self.max_frames < self.frame_factor:
            raise ValueError(
                f"video max_frames={self.max_frames} is below the family's temporal patch of "
                f"{self.frame_factor} frames"
            )

    def count(self, total_frames: int, source_fps: float) -> int:
        """How many frames to sample from ``total_frames`` at ``source_fps``.

        >>> VideoSampling(fps=2.0, frame_factor=2).count(8, 4.0)
        4
        >>> VideoSampling(fps=2.0, frame_factor=2).count(1, 4.0)
        1
        """
        if total_frames <= self.frame_factor:
            return total_frames
        n = total_frames / source_fps * self.fps
        n = min(max(n, self.min_frames), self.max_frames, total_frames)
        return max(self.frame_factor, math.floor(n / self.frame_factor) * self.frame_factor)

    def indices(self, total_frames: int, source_fps: float) -> list[int]:
        """Source frame indices to sample (step 3 of the module rule).

        >>> VideoSampling(fps=2.0, frame_factor=2).indices(8, 4.0)
        [0, 2, 4, 6]
        """
        n = self.count(total_frames, source_fps)
        return [math.floor(k * total_frames / n) for k in range(n)]


def _size_get(size: Any, key: str) -> Any:
    if size is None:
        return None
    return size.get(key) if isinstance(size, Mapping) else getattr(size, key, None)


WHOLE_SETTINGS = frozenset({"max_frames", "min_frames", "frame_factor", "min_pixels", "max_pixels"})
"""Video settings that count frames or pixels."""


def check_video_setting(name: str, value: Any) -> None:
    """Refuse a video setting ``name`` that is not a positive finite number, or (for
    :data:`WHOLE_SETTINGS`) not a whole one: ``max_frames=2.5`` would sample 2 frames, and
    ``fps=inf`` every frame, where the command line refuses both.

    >>> check_video_setting("max_frames", 4.0)
    >>> check_video_setting("fps", "2")
    Traceback (most recent call last):
    ...
    ValueError: video fps must be a positive finite number, got '2'
    """
    number = isinstance(value, int | float) and not isinstance(value, bool)
    positive = number and math.isfinite(value) and value > 0
    if name in WHOLE_SETTINGS and not (positive and float(value).is_integer()):
        raise ValueError(f"video {name} must be a whole number > 0, got {value!r}")
    if not positive:
        raise ValueError(f"video {name} must be a positive finite number, got {value!r}")


def family_sampling(
    processor: Any,
    fps: float | None = None,
    max_frames: int | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> VideoSampling | None:
    """The settings for ``processor``'s video processor, each ``None`` argument its default.

    Returns ``None`` when the processor has no video processor, or one listed in
    :data:`VIDEO_UNSUPPORTED`.

    Raises:
        ValueError: ``min_pixels``/``max_pixels`` for a video processor that resizes to a fixed
            size (no ``shortest_edge``/``longest_edge`` pixel budget), a lower bound above the
            upper one (given or the processor's own), or a non-positive setting.
    """
    given = {
        "fps": fps,
        "max_frames": max_frames,
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
    }
    for name, value in given.items():
        if value is not None:
            check_video_setting(name, value)
    vp = getattr(processor, "video_processor", None)
    if vp is None or type(processor).__name__ in VIDEO_UNSUPPORTED:
        return None
    size = getattr(vp, "size", None)
    if (min_pixels is not None or max_pixels is not None) and _size_get(
        size, "longest_edge"
    ) is None:
        raise ValueError(
            f"video min_pixels/max_pixels apply to pixel-budget video processors (Qwen-VL); "
            f"{type(vp).__name__} resizes frames to a fixed size {size}"
        )
    if min_pixels is not None or max_pixels is not None:
        lo = min_pixels if min_pixels is not None else _size_get(size, "shortest_edge")
        hi = max_pixels if max_pixels is not None else _size_get(size, "longest_edge")
        try:
            check_pixel_bounds(lo, hi, min_pixels, max_pixels)
        except ValueError as e:
            raise ValueError(f"video {e}") from None
    default_max = getattr(vp, "max_frames", None) or getattr(vp, "num_frames", None)
    return VideoSampling(
        fps=float(fps if fps is not None else getattr(vp, "fps", None) or FALLBACK_FPS),
        max_frames=int(
            max_frames if max_frames is not None else default_max or FALLBACK_MAX_FRAMES
        ),
        min_frames=int(getattr(vp, "min_frames", None) or 1),
        frame_factor=int(getattr(vp, "temporal_patch_size", None) or 1),
        min_pixels=min_pixels,
        max_pixels=max_pixels,
    )


def videos_kwargs(sampling: VideoSampling, processor: Any) -> dict[str, Any]:
    """The processor's ``videos_kwargs`` for already-sampled frames (no second sampling), with the
    pixel budget when one is set (the other bound stays the processor's own)."""
    out: dict[str, Any] = {"do_sample_frames": False}
    if sampling.min_pixels is not None or sampling.max_pixels is not None:
        size = getattr(processor.video_processor, "size", None)
        out["size"] = {
            "shortest_edge": sampling.min_pixels
            if sampling.min_pixels is not None
            else _size_get(size, "shortest_edge"),
            "longest_edge": sampling.max_pixels
            if sampling.max_pixels is not None
            else _size_get(size, "longest_edge"),
        }
    return out


def budget_video_tokens(
    vp: Any,
    frames: int,
    width: int,
    height: int,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> int | None:
    """Video tokens a clip of ``frames`` sampled ``width``×``height`` frames takes after a
    pixel-budget video processor's resize, counted before any frame is decoded: Qwen2-VL's and
    Qwen2.5-VL's own count (``get_num_of_video_patches``), or Qwen3-VL's resize (whose budget
    spans the clip's frames), over the merge; the processor pads a clip to whole temporal
    patches. ``None`` for other video processors.

    Raises:
        ValueError: a frame the resize refuses (an aspect ratio over 200).
    """
    step = int(vp.temporal_patch_size)
    grid_t = math.ceil(frames / step)
    merge = int(vp.merge_size) ** 2
    if hasattr(vp, "get_num_of_video_patches"):
        budget = {"min_pixels": min_pixels, "max_pixels": max_pixels}
        budget = {k: v for k, v in budget.items() if v is not None}
        return int(vp.get_num_of_video_patches(grid_t * step, height, width, budget)) // merge
    if isinstance(vp, Qwen3VLVideoProcessor):
        lo = min_pixels if min_pixels is not None else _size_get(vp.size, "shortest_edge")
        hi = max_pixels if max_pixels is not None else _size_get(vp.size, "longest_edge")
        factor = int(vp.patch_size) * int(vp.merge_size)
        h, w = smart_resize(frames, height, width, step, factor, lo, hi)
        return grid_t * (h // vp.patch_size) * (w // vp.patch_size) // merge
    return None
