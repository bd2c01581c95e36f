"""One preprocessor for every transformers processor: :class:`AutoProcessorPreprocessor`.

The transformers processor does the real work (chat template, image resize, placeholder expansion);
this class loads images (:mod:`.image_loading`), pairs them with placeholders (:mod:`.messages`),
passes the resize budget through the processor's own kwargs, and packs the result into a
:class:`~vlrollout.processors.base.PreparedPrompt`. Family differences live in :mod:`.families`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import torch

from .base import LAZY, EngineImages, PreparedPrompt
from .errors import PreprocessError
from .families import FamilyAdapter, adapter_for
from .image_loading import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, LoadedImage, load_image
from .merge_kwargs_cache import with_merged_kwargs_cache
from .messages import normalize_messages

TEXT_KEYS = frozenset({"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids"})
ID_FIELDS = ("id", "uid", "idx", "index")


def item_label(data: dict[str, Any]) -> str:
    """How errors name a data item: ``"item <id>"`` from its id field, else ``"item"``."""
    for key in ID_FIELDS:
        if data.get(key) is not None:
            return f"item {data[key]}"
    return "item"


class AutoProcessorPreprocessor:
    """Prepare data items with any transformers ``ProcessorMixin`` (or a plain tokenizer).

    Args:
        processor: A processor instance, or a local directory for
            ``AutoProcessor.from_pretrained(path, local_files_only=True)``. A tokenizer (no
            ``image_processor``) works for text-only items.
        min_pixels: Lower pixel budget per image, passed to the processor's own resize (Qwen-VL
            families only; the processor's default when ``None``).
        max_pixels: Upper pixel budget per image, likewise.
        max_image_pixels: Largest decoded image accepted before resizing (decompression-bomb guard).
        max_image_bytes: Largest encoded image accepted.
        add_generation_prompt: Passed to the chat template.
        chat_template_kwargs: Extra chat-template variables (e.g. ``{"enable_thinking": False}``).
        processor_kwargs: Extra kwargs for every processor call (e.g. ``{"images_kwargs": {...}}``).
        adapter: Override the detected :class:`~vlrollout.processors.families.FamilyAdapter`.

    Raises:
        ValueError: ``min_pixels``/``max_pixels`` for a family that resizes to a fixed size, or no
            chat template on the processor or tokenizer.

    >>> from vlrollout.testing.offline_processors import build_offline_processor
    >>> pre = AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"), max_pixels=56 * 56)
    >>> from PIL import Image
    >>> p = pre.prepare({"messages": [{"role": "user", "content": "<image>Colour?"}],
    ...                  "images": [Image.new("RGB", (64, 64), "red")]})
    >>> p.multi_modal_input["image_grid_thw"].tolist(), p.geometry[0].model_width
    ([[1, 4, 4]], 56)
    """

    def __init__(
        self,
        processor: Any,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        *,
        max_image_pixels: int = DEFAULT_MAX_PIXELS,
        max_image_bytes: int = DEFAULT_MAX_BYTES,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
        processor_kwargs: dict[str, Any] | None = None,
        adapter: FamilyAdapter | None = None,
    ) -> None:
        if isinstance(processor, str | os.PathLike):
            from transformers import AutoProcessor

            processor = AutoProcessor.from_pretrained(str(processor), local_files_only=True)
        self.processor = processor
        # What prepare() calls: the same processor, validating its fixed arguments only once.
        self._call_processor = with_merged_kwargs_cache(processor)
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.has_vision = getattr(processor, "image_processor", None) is not None
        self.adapter = adapter or adapter_for(processor)
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self.max_image_pixels, self.max_image_bytes = max_image_pixels, max_image_bytes
        self.add_generation_prompt = add_generation_prompt
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.processor_kwargs = dict(processor_kwargs or {})
        if min_pixels is not None or max_pixels is not None:
            if self.adapter.resize_kwargs is None:
                raise ValueError(
                    f"min_pixels/max_pixels apply to pixel-budget families (Qwen-VL); "
                    f"{self.adapter.name} ({type(processor).__name__}) resizes to a fixed size: "
                    "configure its image processor's size instead"
                )
            images_kwargs = self.adapter.resize_kwargs(processor, min_pixels, max_pixels)
            merged = {**self.processor_kwargs.get("images_kwargs", {}), **images_kwargs}
            self.processor_kwargs["images_kwargs"] = merged
        if not (
            getattr(processor, "chat_template", None)
            or getattr(self.tokenizer, "chat_template", None)
        ):
            raise ValueError(
                f"{type(processor).__name__} has no chat template; pass one "
                "(processor.chat_template = ...) or build the processor with chat_template="
            )
        self.image_token_id = self._image_token_id()
        self.image_marker_id = self._token_id(*self.adapter.image_marker_attrs)

    @property
    def family(self) -> str:
        return self.adapter.name

    def _image_token_id(self) -> int | None:
        tid = getattr(self.processor, "image_token_id", None)
        if isinstance(tid, int):
            return tid
        return self._token_id("image_token")

    def _token_id(self, *attrs: str) -> int | None:
        """The id of the first token the processor names in ``attrs`` that the tokenizer has."""
        for attr in attrs:
            token = getattr(self.processor, attr, None)
            if isinstance(token, str):
                tid = self.tokenizer.convert_tokens_to_ids(token)
                if isinstance(tid, int) and tid != self.tokenizer.unk_token_id:
                    return tid
        return None

    # -- steps -------------------------------------------------------------------------------

    def load_images(self, sources: Sequence[Any], item: str) -> list[LoadedImage]:
        """Load every source, naming failures ``"<item>, image <k>"`` (1-based)."""
        return [
            load_image(
                src,
                f"{item}, image {k}",
                max_pixels=self.max_image_pixels,
                max_bytes=self.max_image_bytes,
            )
            for k, src in enumerate(sources, start=1)
        ]

    def render(self, messages: list[dict[str, Any]]) -> str:
        """The chat-templated prompt text (placeholders not yet expanded)."""
        owner = self.processor if getattr(self.processor, "chat_template", None) else self.tokenizer
        text = owner.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=self.add_generation_prompt,
            **self.chat_template_kwargs,
        )
        return text if isinstance(text, str) else text[0]

    def check_placeholders(self, prompt_text: str, n_images: int, item: str) -> None:
        """The rendered prompt must hold exactly one placeholder per image."""
        placeholder = self.adapter.placeholder(self.processor) if self.has_vision else None
        if placeholder is None:
            return
        found = prompt_text.count(placeholder)
        if found != n_images:
            raise PreprocessError(
                item,
                "placeholder_mismatch",
                f"the chat-templated prompt holds {found} {placeholder!r} placeholder(s) for "
                f"{n_images} image(s); the text may contain the placeholder literally, or the chat "
                "template does not render {'type': 'image'} parts",
            )

    def call_processor(self, prompt_text: str, images: list[LoadedImage], item: str) -> dict:
        """Run the transformers processor once; tensors come back with batch size 1."""
        kwargs: dict[str, Any] = {"text": [prompt_text], "return_tensors": "pt"}
        if images:
            # Nested per-sample list: one prompt with several images (LLaVA-OneVision treats a
            # flat list as one image per sample).
            kwargs["images"] = [[im.image for im in images]]
        if self.has_vision:
            kwargs.update(self.processor_kwargs)
        else:  # a bare tokenizer: the chat template already placed any BOS
            kwargs.update({"add_special_tokens": False, **self.processor_kwargs})
        try:
            return dict(self._call_processor(**kwargs))
        except ValueError as e:
            raise PreprocessError(item, "processor_error", str(e)) from e

    # -- the contract ------------------------------------------------------------------------

    def prepare(self, data: dict[str, Any]) -> PreparedPrompt:
        """Turn one data item into a :class:`PreparedPrompt` (see the class docstring)."""
        item = item_label(data)
        if "messages" not in data:
            raise PreprocessError(item, "bad_message", "data item has no 'messages' field")
        raw = data["messages"]
        messages: list[dict[str, Any]] | None = None
        if isinstance(raw, str) and self.is_templated(raw):
            # AReaL's dataset format: the chat template was applied by the dataset code.
            prompt_text, sources = raw, list(data.get("images") or [])
        else:
            messages, sources = normalize_messages(raw, data.get("images"), item)
            prompt_text = ""
        if sources and not self.has_vision:
            raise PreprocessError(
                item,
                "images_unsupported",
                f"{len(sources)} image(s) but {type(self.processor).__name__} has no image processor",
            )
        images = self.load_images(sources, item)
        if messages is not None:
            prompt_text = self.render(messages)
        self.check_placeholders(prompt_text, len(images), item)
        outputs = self.call_processor(prompt_text, images, item)
        input_ids = _row(outputs["input_ids"])
        mm_types = outputs.get(self.adapter.mm_type_key)
        sizes = [im.original_size for im in images]
        multi_modal_input = {}
        if images:
            multi_modal_input = {
                k: v
                for k, v in outputs.items()
                if k not in TEXT_KEYS and isinstance(v, torch.Tensor)
            }
        prepared = PreparedPrompt(
            input_ids=input_ids,
            prompt_text=prompt_text,
            image_data=LAZY if images else [],
            multi_modal_input=multi_modal_input,
            mm_token_type_ids=_row(mm_types) if mm_types is not None else None,
            geometry=self.adapter.geometry(self.processor, sizes, outputs) if images else [],
            vision_msg_vllm=LAZY if images and messages is not None else None,
            image_token_id=self.image_token_id,
            image_marker_id=self.image_marker_id,
            engine_images=engine_images(images, messages) if images else None,
        )
        if images and messages is None:
            # A templated string cannot be turned back into chat messages; AReaL's datasets give
            # vLLM ``messages_chat`` (its client fills the image URLs from image_data in order).
            prepared.templated = True
            chat = data.get("messages_chat")
            prepared.vision_msg_vllm = copy.deepcopy(list(chat)) if chat else None
        return prepared

    def is_templated(self, text: str) -> bool:
        """Whether a string ``messages`` is an already chat-templated prompt (AReaL's format).

        True when the text starts with one of the tokenizer's special tokens other than the image
        placeholder (Qwen: ``<|im_start|>``), as AReaL's ``clevr_count_70k``/``geometry3k``
        datasets write it. Such text goes to the processor as is, with ``data["images"]`` for its
        placeholders; any other string is one user turn with ``<image>`` markers.
        """
        placeholder = self.adapter.placeholder(self.processor) if self.has_vision else None
        specials = getattr(self.tokenizer, "all_special_tokens", None) or []
        extra = getattr(self.tokenizer, "added_tokens_decoder", None) or {}
        markers = set(specials) | {str(t) for t in extra.values() if getattr(t, "special", False)}
        markers -= {placeholder, "<image>", None, ""}
        stripped = text.lstrip()
        return any(stripped.startswith(m) for m in markers if m)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({type(self.processor).__name__}, family={self.family!r}, "
            f"min_pixels={self.min_pixels}, max_pixels={self.max_pixels})"
        )


def engine_images(images: list[LoadedImage], messages: list[dict[str, Any]] | None) -> EngineImages:
    """What the engine gets for ``images``, encoded only when an engine reads it."""
    parts: list[tuple[Any, str]] = []
    held = 0
    for im in images:
        if im.passthrough:
            parts.append((im.encoded, im.mime))
            held += len(im.encoded or b"")
        else:
            parts.append((im.engine_bytes, im.mime))
            held += im.image.width * im.image.height * 3
    return EngineImages(parts, messages, held)


def _row(value: Any) -> list[int]:
    """First (only) row of a ``[1, L]`` tensor or nested list, as a list of ints."""
    if isinstance(value, torch.Tensor):
        return value.reshape(value.shape[0], -1)[0].tolist() if value.ndim > 1 else value.tolist()
    return list(value[0]) if value and isinstance(value[0], list | tuple) else list(value)
