"""Turn data items (messages + images + videos) into prompts for the engine and tensors for the trainer.

Public API (heavy modules are imported on first attribute access, so ``import vlrollout.processors``
stays cheap)::

    from vlrollout.processors import AutoProcessorPreprocessor, PreparedPromptCache
    from vlrollout.testing.offline_processors import build_offline_processor

    pre = AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"), max_pixels=112 * 112)
    prepared = pre.prepare({"messages": [{"role": "user", "content": "<image>What colour?"}],
                            "images": ["/data/img.png"]})
    cache = PreparedPromptCache(pre)                 # content-keyed, bounded in bytes
    key, prepared = await cache.acquire(data)    # once per group, off the event loop
    cache.release(key)                           # the last release drops the entry
"""

from __future__ import annotations

if __name__ != "vlrollout.processors":
    # The folder sits at the repository top level but is installed as vlrollout.processors
    # (pyproject.toml package-dir). A second identity would give two registries and two copies of
    # every exception class, so importing it under any other name is refused.
    raise ImportError(
        f"this folder is the package vlrollout.processors; import it under that name, not as {__name__!r}"
    )

import importlib
from typing import TYPE_CHECKING

from .base import ImageGeometry, PreparedPrompt, Preprocessor, VideoClip
from .errors import PreprocessError

_LAZY = {
    "AutoProcessorPreprocessor": ".auto",
    "item_label": ".auto",
    "FamilyAdapter": ".families",
    "adapter_for": ".families",
    "LoadedImage": ".image_loading",
    "load_image": ".image_loading",
    "DEFAULT_MAX_PIXELS": ".image_loading",
    "DEFAULT_MAX_BYTES": ".image_loading",
    "to_rgb": ".image_mode",
    "normalize_messages": ".messages",
    "normalize_media": ".messages",
    "check_media_fields": ".messages",
    "MEDIA_FIELDS": ".messages",
    "LoadedVideo": ".video_loading",
    "load_video": ".video_loading",
    "VideoSampling": ".video_sampling",
    "family_sampling": ".video_sampling",
    "PreparedPromptCache": ".cache",
    "item_key": ".cache",
    "register_preprocessor": ".registry",
    "unregister_preprocessor": ".registry",
    "get_preprocessor": ".registry",
    "resolve_preprocessor": ".registry",
    "available_preprocessors": ".registry",
    "model_inputs": ".for_trainers",
    "image_geometry": ".for_trainers",
}

__all__ = [
    "ImageGeometry",
    "PreparedPrompt",
    "VideoClip",
    "Preprocessor",
    "PreprocessError",
    "AutoProcessorPreprocessor",
    "item_label",
    "FamilyAdapter",
    "adapter_for",
    "LoadedImage",
    "load_image",
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MAX_BYTES",
    "to_rgb",
    "normalize_messages",
    "normalize_media",
    "check_media_fields",
    "MEDIA_FIELDS",
    "LoadedVideo",
    "load_video",
    "VideoSampling",
    "family_sampling",
    "PreparedPromptCache",
    "item_key",
    "register_preprocessor",
    "unregister_preprocessor",
    "get_preprocessor",
    "resolve_preprocessor",
    "available_preprocessors",
    "model_inputs",
    "image_geometry",
]

if TYPE_CHECKING:  # pragma: no cover
    from .auto import AutoProcessorPreprocessor, item_label
    from .cache import PreparedPromptCache, item_key
    from .families import FamilyAdapter, adapter_for
    from .for_trainers import image_geometry, model_inputs
    from .image_loading import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, LoadedImage, load_image
    from .image_mode import to_rgb
    from .messages import MEDIA_FIELDS, check_media_fields, normalize_media, normalize_messages
    from .registry import (
        available_preprocessors,
        get_preprocessor,
        register_preprocessor,
        resolve_preprocessor,
        unregister_preprocessor,
    )
    from .video_loading import LoadedVideo, load_video
    from .video_sampling import VideoSampling, family_sampling


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
