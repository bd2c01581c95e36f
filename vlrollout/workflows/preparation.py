"""Choosing a workflow's preprocessor: the chat template for text, a multimodal one for images."""

from __future__ import annotations

from typing import Any

from vlrollout.processors.base import Preprocessor


def text_preprocessor(tokenizer: Any, enable_thinking: bool = False) -> Preprocessor:
    """The text workflows' preprocessor: the tokenizer's chat template, no images."""
    from vlrollout.processors.auto import AutoProcessorPreprocessor

    return AutoProcessorPreprocessor(
        tokenizer, chat_template_kwargs={"enable_thinking": enable_thinking}
    )


def build_preprocessor(
    tokenizer: Any,
    processor: Any,
    preprocessor: Preprocessor | str | None,
    *,
    enable_thinking: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
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
        )
    if min_pixels is not None or max_pixels is not None:
        raise ValueError(
            "min_pixels/max_pixels need a multimodal processor; this workflow has none"
        )
    if isinstance(preprocessor, str):
        from vlrollout.processors import registry

        preprocessor = registry.get_preprocessor(
            preprocessor,
            processor=tokenizer,
            chat_template_kwargs={"enable_thinking": enable_thinking},
        )
    return None, preprocessor or text_preprocessor(tokenizer, enable_thinking)


def build_vision_preprocessor(
    processor: Any,
    preprocessor: Preprocessor | str | None,
    *,
    enable_thinking: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> tuple[Any, Preprocessor]:
    """The given preprocessor (object, registered name or import path), or the default one for
    ``processor``, returned with the processor (loaded first when given as a local path).
    (Workflows wrap the preprocessor in the prepare-once cache.)"""
    from vlrollout.processors import registry
    from vlrollout.workflows.episode import load_processor

    processor = load_processor(processor)
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
    return processor, preprocessor
