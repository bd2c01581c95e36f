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
from transformers.image_processing_utils_fast import BaseImageProcessorFast

from .base import (
    ENCODE_ENGINE_IMAGES_AHEAD,
    LAZY,
    PROMPT_TOKEN_LIMIT,
    EngineImages,
    PreparedPrompt,
    images_in_prompt,
)
from .decode_room import DECODE_ROOM, ImageHeaders, video_cost
from .errors import PreprocessError
from .expansion import check_expansion
from .families import FamilyAdapter, adapter_for
from .image_loading import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_PIXELS,
    LoadedImage,
    load_image,
    peek_source,
    shown_sizes,
)
from .merge_kwargs_cache import with_merged_kwargs_cache
from .messages import check_media_fields, normalize_media
from .turns import special_token_texts
from .video_limits import (
    DEFAULT_MAX_FRAME_PIXELS,
    DEFAULT_MAX_SOURCE_FRAMES,
    DEFAULT_MAX_VIDEO_BYTES,
)
from .video_loading import (
    LoadedVideo,
    PeekedVideo,
    VideoLimits,
    peek_video,
)
from .video_sampling import (
    MIXED_MEDIA_UNSUPPORTED,
    VIDEO_UNSUPPORTED,
    budget_video_tokens,
    family_sampling,
    videos_kwargs,
)

TEXT_KEYS = frozenset({"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids"})
ID_FIELDS = ("id", "question_id", "uid", "idx", "index")


def item_label(data: dict[str, Any]) -> str:
    """How errors name a data item: ``"item <id>"`` from its id field, else ``"item"``."""
    for key in ID_FIELDS:
        if data.get(key) is not None:
            return f"item {data[key]}"
    return "item"


def channels_last_kwargs(image_processor: Any, images: Sequence[Any]) -> dict[str, str]:
    """``{"input_data_format": "channels_last"}`` for a slow image processor, ``{}`` for a fast
    one. A slow processor guesses the channel axis of the arrays PIL images become from their
    shape, and an image 1 or 3 pixels tall (``(3, W, 3)``) looked channels-first: it was read
    transposed. Fast processors read PIL images themselves (and refuse the hint). Given only
    for such images: it is what the processor assumes for every other one."""
    if isinstance(image_processor, BaseImageProcessorFast):
        return {}
    if not any(getattr(im, "height", 0) in (1, 3) for im in images):
        return {}
    return {"input_data_format": "channels_last"}


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
        video_fps: Frames sampled per second of video (``None``: the family's default, see
            :mod:`.video_sampling`).
        video_max_frames: Most frames sampled per video (``None``: the family's default).
        video_min_pixels: Lower pixel budget of the video processor's resize (Qwen-VL families:
            per frame for Qwen2/2.5-VL, per temporal patch volume for Qwen3-VL).
        video_max_pixels: Upper pixel budget, likewise.
        max_video_bytes: Largest encoded video accepted.
        max_video_frames: Most frames a source video may have (decompression-bomb guard).
        max_video_frame_pixels: Largest source frame accepted (width × height).

    Raises:
        ValueError: ``min_pixels``/``max_pixels`` for a family that resizes to a fixed size, video
            settings for a processor without a video processor, or no chat template on the
            processor or tokenizer.

    >>> from vlrollout.testing.offline_processors import build_offline_processor
    >>> pre = AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"), max_pixels=56 * 56)
    >>> from PIL import Image
    >>> p = pre.prepare({"messages": [{"role": "user", "content": "<image>Colour?"}],
    ...                  "images": [Image.new("RGB", (64, 64), "red")]})
    >>> p.multi_modal_input["image_grid_thw"].tolist(), p.geometry[0].model_width
    ([[1, 4, 4]], 56)
    """

    reads_only_prompt_and_media = True
    """Its output depends on an item's messages and media alone: items that differ only in
    other fields (labels) share one preparation."""
    decode_room = DECODE_ROOM
    """Where a preparation waits until its images' pixels fit beside those being decoded (the
    process's :data:`~vlrollout.processors.decode_room.DECODE_ROOM`); ``vlrollout serve``, which
    bounds decoding itself, gives its preprocessor an unbounded one."""

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
        video_fps: float | None = None,
        video_max_frames: int | None = None,
        video_min_pixels: int | None = None,
        video_max_pixels: int | None = None,
        max_video_bytes: int = DEFAULT_MAX_VIDEO_BYTES,
        max_video_frames: int = DEFAULT_MAX_SOURCE_FRAMES,
        max_video_frame_pixels: int = DEFAULT_MAX_FRAME_PIXELS,
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
        for name, value in (("min_pixels", min_pixels), ("max_pixels", max_pixels)):
            if value is not None and value < 1:  # a budget of 0 pixels divides by zero later
                raise ValueError(f"{name}={value} must be at least 1 (pixels per image)")
        limits = {
            "max_image_pixels": max_image_pixels,
            "max_image_bytes": max_image_bytes,
            "max_video_bytes": max_video_bytes,
            "max_video_frames": max_video_frames,
            "max_video_frame_pixels": max_video_frame_pixels,
        }
        for name, value in limits.items():  # a limit below 1 refuses every image or video
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a whole number of at least 1")
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
        video = (video_fps, video_max_frames, video_min_pixels, video_max_pixels)
        self.video_sampling = family_sampling(processor, *video)
        if self.video_sampling is None and any(v is not None for v in video):
            raise ValueError(
                f"video frame settings given but {type(processor).__name__} has no video processor"
            )
        self.video_limits = VideoLimits(max_video_bytes, max_video_frames, max_video_frame_pixels)
        self.video_token_id = self._video_token_id() if self.has_video else None

    @property
    def has_video(self) -> bool:
        """Whether the processor takes videos (it has a transformers video processor)."""
        return self.video_sampling is not None

    @property
    def media_fields(self) -> tuple[str, ...]:
        """The item's media fields this preprocessor reads (others are refused, see
        :data:`~vlrollout.processors.messages.MEDIA_FIELDS`)."""
        return ("images", "videos") if self.has_video else ("images",)

    @property
    def family(self) -> str:
        return self.adapter.name

    def _image_token_id(self) -> int | None:
        tid = getattr(self.processor, "image_token_id", None)
        if isinstance(tid, int):
            return tid
        return self._token_id("image_token")

    def _video_token_id(self) -> int | None:
        tid = getattr(self.processor, "video_token_id", None)
        return tid if isinstance(tid, int) else self._token_id("video_token")

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

    def image_headers(self, sources: Sequence[Any], item: str) -> ImageHeaders:
        """Each source's size as stored (before any EXIF rotation) and what decoding them costs,
        from their headers without decoding them, under the same limits and with the same errors
        as :meth:`load_images`."""
        limits = {"max_pixels": self.max_image_pixels, "max_bytes": self.max_image_bytes}
        return ImageHeaders.of(
            [peek_source(src, f"{item}, image {k}", **limits) for k, src in enumerate(sources, 1)]
        )

    def peek_videos(self, sources: Sequence[Any], item: str) -> list[PeekedVideo]:
        """Read and measure every video without decoding a frame (:func:`peek_video`), naming
        failures ``"<item>, video <k>"`` (1-based)."""
        if sources and not self.has_video:
            why = VIDEO_UNSUPPORTED.get(type(self.processor).__name__, "no video processor")
            raise PreprocessError(
                item,
                "videos_unsupported",
                f"{len(sources)} video(s) but {type(self.processor).__name__} takes no video "
                f"({why}); use a video family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE, Qwen3.5, "
                "LLaVA-OneVision, InternVL, GLM-4.1V: docs/families.md)",
            )
        return [
            peek_video(src, f"{item}, video {k}", self.video_sampling, self.video_limits)  # type: ignore[arg-type]
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

    def check_placeholders(
        self, prompt_text: str, n_images: int, item: str, n_videos: int = 0
    ) -> None:
        """The rendered prompt must hold exactly one placeholder per image and per video."""
        video_token = getattr(self.processor, "video_token", None) if self.has_video else None
        if isinstance(video_token, str):
            found = prompt_text.count(video_token)
            if found != n_videos:
                raise PreprocessError(
                    item,
                    "placeholder_mismatch",
                    f"the chat-templated prompt holds {found} {video_token!r} placeholder(s) for "
                    f"{n_videos} video(s); the text may contain the placeholder literally, or the "
                    "chat template does not render {'type': 'video'} parts",
                )
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

    def image_tokens(self, sizes: Sequence[tuple[int, int]]) -> int | None:
        """The tokens images of ``sizes`` (width, height) take in the prompt, from their sizes
        alone (no pixels built, nor decoded: an image's header gives its size); ``None`` when the
        family's adapter cannot count them (see ``FamilyAdapter.image_tokens``)."""
        per_image = self.image_token_counts(sizes)
        return None if per_image is None else sum(per_image)

    def image_token_counts(self, sizes: Sequence[tuple[int, int]]) -> list[int] | None:
        """Each image's tokens (:meth:`image_tokens`), in order; ``None`` when they cannot be
        counted from sizes."""
        count = self.adapter.image_tokens
        if count is None or not self.has_vision:
            return None
        kwargs = self.processor_kwargs.get("images_kwargs", {})
        try:
            per_image = [count(self.processor, kwargs, *size) for size in sizes]
        except ValueError:  # a size the resize refuses: the processor call names the image
            return None
        return None if None in per_image else per_image  # type: ignore[return-value]

    def video_tokens(self, videos: Sequence[PeekedVideo]) -> int | None:
        """The tokens ``videos`` take in the prompt, from their headers alone (no frame decoded),
        on the families whose video resize follows from a clip's size (Qwen2-VL, Qwen2.5-VL,
        Qwen3-VL: :func:`~.video_sampling.budget_video_tokens`); ``None`` elsewhere, or for a
        frame the resize refuses (the processor call names it)."""
        vp = getattr(self.processor, "video_processor", None)
        if vp is None or not videos:
            return None
        s = self.video_sampling
        tokens = 0
        for v in videos:
            width, height = v.size
            try:
                n = budget_video_tokens(
                    vp, len(v.wanted), width, height, s.min_pixels, s.max_pixels
                )  # type: ignore[union-attr]
            except ValueError:
                return None
            if n is None:
                return None
            tokens += n
        return tokens

    def media_tokens(
        self, sizes: Sequence[tuple[int, int]], videos: Sequence[PeekedVideo] = ()
    ) -> int | None:
        """At least the tokens images of ``sizes`` and ``videos`` take in the prompt, from their
        headers (:meth:`image_tokens`, :meth:`video_tokens`): the sum of those the family can
        count; ``None`` when it can count neither."""
        counted = [
            n
            for n in (self.image_tokens(sizes) if sizes else None, self.video_tokens(videos))
            if n is not None
        ]
        return sum(counted) if counted else None

    def check_media_tokens(
        self, sizes: Sequence[tuple[int, int]], item: str, videos: Sequence[PeekedVideo] = ()
    ) -> None:
        """Refuse ``prompt_too_long`` before the processor call when images of ``sizes`` and
        ``videos`` alone take more tokens (:meth:`media_tokens`) than the caller's
        :data:`~vlrollout.processors.base.PROMPT_TOKEN_LIMIT`: decoding and resizing them costs
        far more memory and time than counting their tokens."""
        limit = PROMPT_TOKEN_LIMIT.get()
        tokens = self.media_tokens(sizes, videos) if limit is not None else None
        if tokens is None or tokens <= limit:
            return
        media, fewer = [], []
        if sizes:
            media.append(f"{len(sizes)} image(s) ({shown_sizes(sizes)})")
            fewer.append("smaller images or a lower max_pixels")
        if videos:
            clips = ", ".join(v.shown for v in videos)
            media.append(f"{len(videos)} video(s) ({clips})")
            fewer.append(
                "fewer or smaller video frames: a lower video_max_frames or video_max_pixels"
            )
        raise PreprocessError(
            item,
            "prompt_too_long",
            f"the prompt's {' and '.join(media)} alone take {tokens} tokens, more than the "
            f"{limit} a prompt may hold here; refused before decoding them ({'; '.join(fewer)} "
            "take fewer tokens)",
        )

    def call_processor(
        self,
        prompt_text: str,
        images: list[LoadedImage],
        item: str,
        videos: Sequence[LoadedVideo] = (),
    ) -> dict:
        """Run the transformers processor once; tensors come back with batch size 1.

        Videos go as their sampled frames with their ``video_metadata`` and
        ``do_sample_frames=False``: the processor resizes them but never samples again.
        """
        kwargs: dict[str, Any] = {"text": [prompt_text], "return_tensors": "pt"}
        if images:
            # Nested per-sample list: one prompt with several images (LLaVA-OneVision treats a
            # flat list as one image per sample).
            kwargs["images"] = [[im.image for im in images]]
        if self.has_vision:
            kwargs.update(self.processor_kwargs)
            hint = channels_last_kwargs(self.processor.image_processor, [im.image for im in images])
            if hint:
                kwargs["images_kwargs"] = {**hint, **kwargs.get("images_kwargs", {})}
        else:  # a bare tokenizer: the chat template already placed any BOS
            kwargs.update({"add_special_tokens": False, **self.processor_kwargs})
        call = self._call_processor
        if videos:
            kwargs["videos"] = [torch.from_numpy(v.frames).permute(0, 3, 1, 2) for v in videos]
            kwargs["videos_kwargs"] = {
                **kwargs.get("videos_kwargs", {}),
                **videos_kwargs(self.video_sampling, self.processor),  # type: ignore[arg-type]
                "input_data_format": "channels_first",
                "video_metadata": [v.metadata() for v in videos],
            }
            call = self.processor  # per-video metadata: nothing to reuse between calls
        try:
            return dict(call(**kwargs))
        except (ValueError, RuntimeError) as e:  # RuntimeError: torch's resize of an odd image
            detail = str(e)
            if videos and "pixel_values_videos" in detail:
                counts = [v.clip.num_frames for v in videos]
                detail = (
                    f"{type(self.processor).__name__} stacks a prompt's videos into one tensor, "
                    f"so they need one number of sampled frames (got {counts}); set "
                    f"video_max_frames or give clips of one length ({detail.splitlines()[0]})"
                )
            culprit = self._refused_image(images, detail)
            if culprit is not None:
                size = "x".join(map(str, images[culprit].image.size))
                detail = f"image {culprit + 1} ({size}): {detail}"
            raise PreprocessError(item, "processor_error", detail) from e

    def _refused_image(self, images: list[LoadedImage], message: str) -> int | None:
        """Which of several images the image processor refuses alone with ``message`` (the
        processor refuses the whole call and names none); ``None`` when no single one does."""
        image_processor = getattr(self.processor, "image_processor", None)
        if len(images) < 2 or image_processor is None:
            return None
        kwargs = self.processor_kwargs.get("images_kwargs", {})
        for index, image in enumerate(images):
            try:
                image_processor(images=[image.image], return_tensors="pt", **kwargs)
            except (ValueError, RuntimeError) as e:
                if str(e) == message:
                    return index
            except Exception:  # noqa: BLE001 - only a probe for the message; the call's error stands
                continue
        return None

    # -- the contract ------------------------------------------------------------------------

    def read_item(
        self, data: dict[str, Any], item: str
    ) -> tuple[list[dict[str, Any]] | None, str, list[Any], list[Any]]:
        """``(messages or None when templated, prompt text, image sources, video sources)``.

        Refuses media the item holds that would otherwise be dropped: a media field this
        preprocessor does not read, a placeholder without its medium, or media for a processor
        without the matching processor.
        """
        if "messages" not in data:
            raise PreprocessError(item, "bad_message", "data item has no 'messages' field")
        check_media_fields(data, self.media_fields, item)
        raw = data["messages"]
        if isinstance(raw, str) and self.is_templated(raw):
            # AReaL's dataset format: the chat template was applied by the dataset code.
            images, videos = list(data.get("images") or []), list(data.get("videos") or [])
            messages, prompt_text = None, raw
        else:
            normalized = normalize_media(raw, data.get("images"), data.get("videos"), item)
            messages, prompt_text = normalized.messages, ""
            images, videos = normalized.images, normalized.videos
        if images and not self.has_vision:
            raise PreprocessError(
                item,
                "images_unsupported",
                f"{len(images)} image(s) but {type(self.processor).__name__} has no image processor",
            )
        return messages, prompt_text, images, videos

    def prepare(self, data: dict[str, Any]) -> PreparedPrompt:
        """Turn one data item into a :class:`PreparedPrompt` (see the class docstring)."""
        item = item_label(data)
        messages, prompt_text, image_sources, video_sources = self.read_item(data, item)
        mixed = MIXED_MEDIA_UNSUPPORTED.get(type(self.processor).__name__)
        if mixed and image_sources and video_sources:
            raise PreprocessError(item, "mixed_media_unsupported", mixed)
        headers = self.image_headers(image_sources, item)
        peeked = self.peek_videos(video_sources, item)
        self.check_media_tokens(headers.sizes, item, peeked)  # before any pixel is decoded
        with self.decode_room.hold(headers.cost + video_cost(sum(v.pixels for v in peeked))):
            videos = [v.decode() for v in peeked]
            images = self.load_images(image_sources, item)
            for_engine = engine_images(images, messages) if images else None
            if for_engine is not None and ENCODE_ENGINE_IMAGES_AHEAD.get():
                for_engine.encode_in_background()  # overlaps the template and processor call
            if messages is not None:
                prompt_text = self.render(messages)
            self.check_placeholders(prompt_text, len(images), item, len(videos))
            outputs = self.call_processor(prompt_text, images, item, videos)
        merge = getattr(getattr(self.processor, "image_processor", None), "merge_size", None)
        if merge:
            check_expansion(outputs, self.adapter.mm_type_key, merge, item)
        input_ids = _row(outputs["input_ids"])
        mm_types = outputs.get(self.adapter.mm_type_key)
        sizes = [im.original_size for im in images]
        multi_modal_input = {}
        if images or videos:
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
            engine_images=for_engine,
            videos=[v.clip for v in videos],
            video_token_id=self.video_token_id,
            video_frame_images=self._video_frame_images(input_ids, len(images)) if videos else 0,
        )
        if images and messages is None:
            # A templated string cannot be turned back into chat messages; AReaL's datasets give
            # vLLM ``messages_chat`` (its client fills the image URLs from image_data in order).
            prepared.templated = True
            chat = data.get("messages_chat")
            prepared.vision_msg_vllm = copy.deepcopy(list(chat)) if chat else None
        return prepared

    def _video_frame_images(self, input_ids: list[int], n_images: int) -> int:
        """Image placeholders beyond the item's images: the frames of a family that spells a
        video as images (GLM-4.1V, InternVL)."""
        if self.image_token_id is None:
            return 0
        found = images_in_prompt(input_ids, self.image_token_id, self.image_marker_id)
        return max(0, found - n_images)

    def is_templated(self, text: str) -> bool:
        """Whether a string ``messages`` is an already chat-templated prompt (AReaL's format).

        True when the text starts with one of the tokenizer's special tokens other than the image
        placeholder (Qwen: ``<|im_start|>``), as AReaL's ``clevr_count_70k``/``geometry3k``
        datasets write it. Such text goes to the processor as is, with ``data["images"]`` for its
        placeholders; any other string is one user turn with ``<image>`` markers.
        """
        placeholder = self.adapter.placeholder(self.processor) if self.has_vision else None
        markers = set(special_token_texts(self.tokenizer)) - {placeholder, "<image>"}
        stripped = text.lstrip()
        return any(stripped.startswith(m) for m in markers)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({type(self.processor).__name__}, family={self.family!r}, "
            f"min_pixels={self.min_pixels}, max_pixels={self.max_pixels})"
        )


def engine_images(images: list[LoadedImage], messages: list[dict[str, Any]] | None) -> EngineImages:
    """What the engine gets for ``images``, encoded when an engine reads it (or ahead: see
    :data:`~vlrollout.processors.base.ENCODE_ENGINE_IMAGES_AHEAD`)."""
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
