"""Choosing the preprocessor of a vision workflow."""

from __future__ import annotations

from typing import Any

from vlrollout.processors.base import Preprocessor


def build_vision_preprocessor(
    processor: Any,
    preprocessor: Preprocessor | str | None,
    *,
    enable_thinking: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> Preprocessor:
    """The given preprocessor (object, registered name or import path), or the default one for
    ``processor``. (Workflows wrap it in the prepare-once cache.)"""
    from vlrollout.processors import registry

    if preprocessor is None or isinstance(preprocessor, str):
        preprocessor = registry.get_preprocessor(
            preprocessor or "auto",
            processor=processor,
            chat_template_kwargs={"enable_thinking": enable_thinking},
            min_pixels=min_pixels,
            max_pixels=max_pixels,
        )
    elif min_pixels is not None or max_pixels is not None:
        raise ValueError(
            "min_pixels/max_pixels configure the default preprocessor; a custom preprocessor "
            "object must be built with its own limits"
        )
    return preprocessor
