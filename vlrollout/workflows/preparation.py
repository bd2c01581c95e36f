"""Choosing a workflow's preprocessor: the chat template for text, a multimodal one for images;
and loading the tokenizer and processor it needs when a config names them by path."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Any

from areal.utils.hf_utils import load_hf_tokenizer
from transformers import AutoProcessor

from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.processors.base import Preprocessor
from vlrollout.processors.contract import load_preprocessor
from vlrollout.processors.video_sampling import check_video_setting


@dataclass(frozen=True)
class FrameSampling:
    """How the default preprocessor samples a video's frames; ``None``: the family's default
    (the transformers video processor's own setting).

    Attributes:
        fps: Frames sampled per second of video.
        max_frames: Most frames sampled from one video.
        min_pixels, max_pixels: Pixel budget of each sampled frame (Qwen-VL families).

    >>> FrameSampling(fps=2.0).options()
    {'video_fps': 2.0}
    """

    fps: float | None = None
    max_frames: int | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is not None:
                check_video_setting(name, value)

    def options(self) -> dict[str, Any]:
        """The preprocessor factory's keyword arguments for the settings given (``video_fps``,
        ...); none for settings left to the family, so plug-ins without video keep working."""
        return {f"video_{k}": v for k, v in asdict(self).items() if v is not None}


def load_tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object, or one loaded from a local path (AReaL configs pass paths)."""
    if isinstance(tokenizer, str):
        return load_hf_tokenizer(tokenizer)
    return tokenizer


def load_processor(processor: Any) -> Any:
    """A processor object, or one loaded from a local path with ``AutoProcessor``.

    Paths are loaded once per process: AReaL builds a workflow from its import path and kwargs for
    every submitted item, which would otherwise re-read the processor from disk each time.
    """
    if isinstance(processor, str):
        return _load_processor_from_path(processor)
    return processor


@functools.lru_cache(maxsize=8)
def _load_processor_from_path(path: str) -> Any:
    return AutoProcessor.from_pretrained(path, local_files_only=True)


def text_preprocessor(tokenizer: Any, enable_thinking: bool = False) -> Preprocessor:
    """The text workflows' preprocessor: the tokenizer's chat template, no images."""
    return AutoProcessorPreprocessor(
        tokenizer, chat_template_kwargs={"enable_thinking": enable_thinking}
    )


def build_preprocessor(
    tokenizer: Any,
    processor: Any,
    preprocessor: Preprocessor | str | dict[str, Any] | None,
    *,
    enable_thinking: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    frames: FrameSampling | None = None,
) -> tuple[Any, Preprocessor]:
    """``(processor, preprocessor)`` for a workflow: text preparation when ``processor`` is
    ``None`` (the tokenizer's chat template unless a preprocessor object is given), vision
    preparation otherwise (:func:`build_vision_preprocessor`)."""
    if processor is not None:
        return build_vision_preprocessor(
            processor,
            preprocessor,
            enable_thinking=enable_thinking,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            frames=frames,
        )
    if min_pixels is not None or max_pixels is not None or (frames and frames.options()):
        raise ValueError(
            "min_pixels/max_pixels and video frame settings need a multimodal processor; this "
            "workflow has none"
        )
    if isinstance(preprocessor, str | dict):
        preprocessor = load_preprocessor(
            preprocessor,
            processor=tokenizer,
            chat_template_kwargs={"enable_thinking": enable_thinking},
        )
    return None, preprocessor or text_preprocessor(tokenizer, enable_thinking)


def build_vision_preprocessor(
    processor: Any,
    preprocessor: Preprocessor | str | dict[str, Any] | None,
    *,
    enable_thinking: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    frames: FrameSampling | None = None,
) -> tuple[Any, Preprocessor]:
    """The given preprocessor, or the default one for ``processor``, returned with the processor
    (loaded first when given as a local path).

    ``preprocessor`` is an object, a registered name or import path, or a mapping
    ``{"name": ..., **options}`` whose options go to the plug-in's factory (how a run config sets
    them). ``frames`` reach the factory as options (``video_fps=...``), only those set.
    Plug-ins are built and checked under the contract of :mod:`vlrollout.processors.contract`.
    (Workflows wrap the preprocessor in the prepare-once cache.)
    """
    processor = load_processor(processor)
    video = frames.options() if frames is not None else {}
    if preprocessor is not None and not isinstance(preprocessor, str | dict):
        if min_pixels is not None or max_pixels is not None or video:
            raise ValueError(
                "min_pixels/max_pixels and video frame settings configure the default "
                "preprocessor; a custom preprocessor object must be built with its own limits"
            )
    elif video:
        spec = preprocessor if isinstance(preprocessor, dict) else {"name": preprocessor}
        preprocessor = {**spec, "name": spec.get("name") or "auto", **video}
    preprocessor = load_preprocessor(
        preprocessor,
        processor=processor,
        chat_template_kwargs={"enable_thinking": enable_thinking},
        min_pixels=min_pixels,
        max_pixels=max_pixels,
    )
    return processor, preprocessor


def vision_settings_problem(
    model: str,
    preprocessor: Preprocessor | str | dict[str, Any] | None,
    min_pixels: int | None,
    max_pixels: int | None,
    frames: FrameSampling,
    budget: str,
) -> str | None:
    """Why an image budget or frame settings do not suit the model's processor (a fixed-size
    family takes no pixel budget, a family without video no frame settings), naming them as
    ``budget`` (the caller's name for the pixel budget) or "video settings"; ``None`` when they
    suit it. Other errors of the preprocessor's plug-in propagate."""
    try:
        build_vision_preprocessor(
            model, preprocessor, min_pixels=min_pixels, max_pixels=max_pixels, frames=frames
        )
    except ValueError as e:
        message = str(e).splitlines()[0]
        return f"{'video settings' if message.startswith('video') else budget}: {message}"
    return None
