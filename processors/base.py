"""The preprocessor contract: what every preprocessor returns and the protocol it implements.

A preprocessor turns one data item (chat messages + images + videos) into a
:class:`PreparedPrompt`, which carries everything both sides of RL need: the engine's request
fields (``input_ids``, ``image_data``, ``vision_msg_vllm``) and the trainer's tensors
(``multi_modal_input``), built from the same pixels by construction, plus the geometry rewards need
to convert coordinates and each video's timing (:class:`VideoClip`).
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from vlrollout.geometry import ImageGeometry

if TYPE_CHECKING:
    import torch
    from PIL import Image


@dataclass
class VideoClip:
    """One video of a prompt as the model saw it: which frames were sampled, and when.

    Timestamps follow the transformers video processors' own rule (``frame_index / source_fps``,
    ``VideoMetadata.timestamps``), so what rewards score is what Qwen3-VL's prompt states.

    Attributes:
        frame_indices: The sampled positions on the source's frame grid, increasing: frame
            ``k`` is the one on screen at ``k / source_fps``, which for a constant-rate clip is
            source frame ``k`` and for a variable-rate one (uneven GIF delays, phone clips) the
            frame shown then, not the ``k``-th decoded frame.
        timestamps_s: Time of each sampled frame in seconds from the clip's start.
        fps: Sampled frames per second (``len(frame_indices) / total_frames * source_fps``, what
            Qwen2.5-VL's ``second_per_grid_ts`` is computed from).
        source_fps: The source's frame rate (a frame list: the sampling ``fps`` it is taken at).
        total_frames: Frames in the source.
        width, height: Source frame size in pixels (before the processor's resize).
        source_kind: ``"path"``, ``"bytes"``, ``"base64"``, ``"data_url"`` or ``"frames"``.
        thumbnails: A few small RGB frames (at most 8, 56 px high) for the run report; not in
            :meth:`to_dict`, not compared.
    """

    frame_indices: list[int]
    timestamps_s: list[float]
    fps: float
    source_fps: float
    total_frames: int
    width: int
    height: int
    source_kind: str = "path"
    thumbnails: list[Image.Image] = field(default_factory=list, repr=False, compare=False)

    @property
    def num_frames(self) -> int:
        return len(self.frame_indices)

    @property
    def duration_s(self) -> float:
        """The source's duration: ``total_frames / source_fps``."""
        return self.total_frames / self.source_fps

    def to_dict(self) -> dict[str, Any]:
        """JSON-able timing for rewards and records (no images).

        >>> VideoClip([0, 2], [0.0, 1.0], 1.0, 2.0, 4, 32, 32).to_dict()["timestamps_s"]
        [0.0, 1.0]
        """
        return {
            "timestamps_s": list(self.timestamps_s),
            "frame_indices": list(self.frame_indices),
            "fps": self.fps,
            "source_fps": self.source_fps,
            "num_frames": self.num_frames,
            "total_frames": self.total_frames,
            "duration_s": self.duration_s,
            "width": self.width,
            "height": self.height,
        }


@dataclass
class PreparedPrompt:
    """A data item ready for the engine and the trainer.

    Attributes:
        input_ids: Prompt token ids with image placeholders already expanded by the processor.
        prompt_text: The chat-templated prompt text (before placeholder expansion).
        image_data: One base64 string per image for the engine (SGLang's ``image_data``).
        multi_modal_input: Tensors the model's forward needs for the images and videos, exactly
            as the transformers processor returns them, e.g. ``pixel_values`` (float32,
            ``[num_patches, patch_dim]`` for Qwen2-VL), ``image_grid_thw`` (int64,
            ``[num_images, 3]``), ``pixel_values_videos``, ``video_grid_thw`` (int64,
            ``[num_videos, 3]``), ``second_per_grid_ts`` (Qwen2.5-VL, float ``[num_videos]``).
            Empty for text-only items.
        mm_token_type_ids: Per-token modality ids as the processor returns them (transformers 5
            Qwen-VL families: 0 text, 1 image, 2 video); ``None`` otherwise.
        geometry: One :class:`ImageGeometry` per image, in prompt order.
        vision_msg_vllm: OpenAI-style messages with ``data:`` URLs, which AReaL's vLLM client needs
            to send images at all; ``None`` for text-only items.
        image_token_id: The placeholder token id the processor expands, if the family has one.
        image_marker_id: A token written exactly once per image where one image becomes several
            runs of ``image_token_id`` (Idefics3/SmolVLM tiles); ``None`` when each image is one
            run.
        templated: The item came already chat-templated (AReaL's dataset format); vLLM then gets
            the item's ``messages_chat`` if it has one, else nothing (``vision_msg_vllm`` is None).
        videos: One :class:`VideoClip` per video, in prompt order (their tensors are in
            ``multi_modal_input``). The engine's ``image_data``/``vision_msg_vllm`` carry images
            only: AReaL's ``ModelRequest`` has no video field, so remote engines get no video.
        video_token_id: The family's video placeholder token id (``None``: no video processor).
        video_frame_images: How many of the image placeholders :func:`images_in_prompt` counts
            belong to video frames: families that spell a video as one image per frame
            (GLM-4.1V, InternVL) write image placeholders for it; 0 for the others.
    """

    input_ids: list[int]
    prompt_text: str
    image_data: list[str] = field(default_factory=list)
    multi_modal_input: dict[str, torch.Tensor] = field(default_factory=dict)
    mm_token_type_ids: list[int] | None = None
    geometry: list[ImageGeometry] = field(default_factory=list)
    vision_msg_vllm: list[dict[str, Any]] | None = None
    image_token_id: int | None = None
    image_marker_id: int | None = None
    templated: bool = False
    videos: list[VideoClip] = field(default_factory=list)
    video_token_id: int | None = None
    video_frame_images: int = 0
    engine_images: EngineImages | None = field(default=None, repr=False, compare=False)

    @property
    def num_images(self) -> int:
        return len(self.geometry)

    @property
    def num_videos(self) -> int:
        return len(self.videos)

    @property
    def prompt_len(self) -> int:
        return len(self.input_ids)

    @property
    def placeholder_ids(self) -> frozenset[int]:
        """The token ids that stand for images or videos in this family's sequences: a
        completion holding one cannot be trained on (more placeholders than features)."""
        ids = (self.image_token_id, self.video_token_id)
        return frozenset(i for i in ids if i is not None)

    @property
    def engine_images_pending(self) -> bool:
        """Whether ``image_data``/``vision_msg_vllm`` are still to be encoded (nothing read them)."""
        return self.__dict__.get("_image_data") is None and self.engine_images is not None

    def engine_image_nbytes(self) -> int:
        """Bytes held for the engine's copy of the images (base64 strings, or what encodes them)."""
        if self.engine_images_pending:
            return self.engine_images.nbytes()  # type: ignore[union-attr]
        return sum(len(s) for s in self.image_data)


_PENDING = object()


def _get_image_data(self: PreparedPrompt) -> list[str]:
    value = self.__dict__.get("_image_data")
    if value is None:
        lazy = self.engine_images
        value = lazy.image_data() if lazy is not None else []
        self.__dict__["_image_data"] = value
    return value


def _set_image_data(self: PreparedPrompt, value: Any) -> None:
    self.__dict__["_image_data"] = None if value is _PENDING else list(value)


def _get_vision_msg(self: PreparedPrompt) -> list[dict[str, Any]] | None:
    value = self.__dict__.get("_vision_msg_vllm", _PENDING)
    if value is _PENDING:
        lazy = self.engine_images
        value = lazy.vision_msg_vllm() if lazy is not None else None
        self.__dict__["_vision_msg_vllm"] = value
    return value


def _set_vision_msg(self: PreparedPrompt, value: Any) -> None:
    self.__dict__["_vision_msg_vllm"] = value


# image_data and vision_msg_vllm stay dataclass fields (constructor, dataclasses.replace) but are
# read through properties: a prepared prompt built with ``image_data=LAZY`` and ``engine_images``
# encodes its images only when something (an engine that sends them) reads the field.
PreparedPrompt.image_data = property(_get_image_data, _set_image_data)  # type: ignore[assignment]
PreparedPrompt.vision_msg_vllm = property(_get_vision_msg, _set_vision_msg)  # type: ignore[assignment]
LAZY: Any = _PENDING
"""Pass as ``image_data=LAZY`` (and ``vision_msg_vllm=LAZY``) with ``engine_images=...``."""


ENCODE_ENGINE_IMAGES_AHEAD: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "vlrollout_encode_engine_images_ahead", default=False
)
"""Whether a preprocessor preparing a prompt now should start encoding the engine's copies of its
images in the background (:meth:`EngineImages.encode_in_background`) before its processor call.

A workflow sets it for an episode whose engine reads ``image_data`` (AReaL's SGLang and vLLM
clients): the encode, a lossless re-encode for PIL input, then overlaps the processor call
instead of following it. Engines that read the prepared tensors (``reads_multi_modal_input``:
vlrollout's local engine) never need the encode, and the flag stays off.
"""


PROMPT_TOKEN_LIMIT: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "vlrollout_prompt_token_limit", default=None
)
"""The most prompt tokens the caller preparing a prompt now accepts (``None``: no limit).

A workflow sets it to its ``max_prompt_tokens`` and the server to the model's context. A
preprocessor that can count an item's image tokens from the image sizes alone refuses the item
(``prompt_too_long``) before its processor call builds the pixels, the costly part of preparing a
large image; the caller's check of the prepared prompt's length stays the exact one.
"""


@contextlib.contextmanager
def prompt_token_limit(limit: int | None) -> Iterator[None]:
    """:data:`PROMPT_TOKEN_LIMIT` is ``limit`` inside the block (and in tasks and threads it
    starts, which copy the context)."""
    token = PROMPT_TOKEN_LIMIT.set(limit)
    try:
        yield
    finally:
        PROMPT_TOKEN_LIMIT.reset(token)


_ENCODER = ThreadPoolExecutor(
    max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="vlrollout-engine-images"
)
"""Threads for background encodes: Pillow's encoders release the GIL while they compress."""


class EngineImages:
    """The engine's copies of a prompt's images, encoded once, on first read (or in the background,
    :meth:`encode_in_background`), thread-safely.

    Args:
        images: Per image, the original encoded bytes to pass through, or a callable returning
            the re-encoded bytes, with its MIME type: ``[(bytes_or_fn, mime), ...]``.
        messages: Normalised chat messages for vLLM's ``vision_msg_vllm`` (``None``: none).
        held_bytes: What the pending images hold (for cache accounting).
    """

    def __init__(
        self,
        images: list[tuple[Any, str]],
        messages: list[dict[str, Any]] | None,
        held_bytes: int,
    ) -> None:
        self._images = images
        self._messages = messages
        self._held = held_bytes
        self._lock = threading.Lock()
        self._b64: list[str] | None = None

    def __len__(self) -> int:
        return len(self._images)

    @property
    def has_messages(self) -> bool:
        return self._messages is not None

    def nbytes(self) -> int:
        return self._held if self._b64 is None else sum(len(s) for s in self._b64)

    def image_data(self) -> list[str]:
        with self._lock:
            if self._b64 is None:
                out = []
                for raw, _ in self._images:
                    data = raw if isinstance(raw, bytes) else raw()
                    out.append(base64.b64encode(data).decode("ascii"))
                self._b64 = out
                self._images = [(None, mime) for _, mime in self._images]  # free the sources
            return self._b64

    def encode_in_background(self) -> None:
        """Start :meth:`image_data` in a background thread. A reader meanwhile waits for it (the
        same lock); if it fails, the next reader encodes again and gets the error itself."""
        _ENCODER.submit(self.image_data)

    def vision_msg_vllm(self) -> list[dict[str, Any]] | None:
        if self._messages is None:
            return None
        from .messages import to_openai_messages

        urls = [
            f"data:{mime};base64,{b64}"
            for (_, mime), b64 in zip(self._images, self.image_data(), strict=True)
        ]
        return to_openai_messages(self._messages, urls)


def placeholder_runs(input_ids: Sequence[int], image_token_id: int) -> int:
    """Number of contiguous runs of ``image_token_id`` (one run per image)."""
    runs, previous = 0, False
    for t in input_ids:
        current = t == image_token_id
        runs += current and not previous
        previous = current
    return runs


def run_lengths(marks: Sequence[bool]) -> list[int]:
    """The lengths of the runs of true ``marks``, in order (each image's placeholder run).

    >>> run_lengths([True, False, True, True, False])
    [1, 2]
    """
    runs: list[int] = []
    previous = False
    for mark in marks:
        if mark and previous:
            runs[-1] += 1
        elif mark:
            runs.append(1)
        previous = bool(mark)
    return runs


def images_in_prompt(
    input_ids: Sequence[int], image_token_id: int, image_marker_id: int | None = None
) -> int:
    """How many images ``input_ids`` hold: one per ``image_marker_id`` where the family writes
    one (an image split into tiles is several placeholder runs), else one per placeholder run.

    >>> images_in_prompt([1, 9, 9, 2, 9, 9], 9), images_in_prompt([7, 9, 9, 2, 7, 9, 9], 9, 7)
    (2, 2)
    """
    if image_marker_id is not None:
        return list(input_ids).count(image_marker_id)
    return placeholder_runs(input_ids, image_token_id)


def item_copy(data: Any) -> Any:
    """A copy of ``data`` that ``prepare`` may change without changing the caller's item: its
    dicts, lists and tuples at every depth (messages, parts, labels); images, bytes, tensors
    and other values are shared, not copied (a preprocessor reads them). Everything in this
    package that hands a caller's item to a preprocessor hands it this copy."""
    if isinstance(data, dict):
        return {k: item_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [item_copy(v) for v in data]
    if isinstance(data, tuple):
        return tuple(item_copy(v) for v in data)
    return data


@runtime_checkable
class Preprocessor(Protocol):
    """Turns a data item into a :class:`PreparedPrompt`.

    ``data`` is the dataset row: ``messages`` (OpenAI-style) and ``images`` (paths, bytes, base64,
    ``data:`` URLs or PIL images), plus task fields the preprocessor ignores. Implementations raise
    :class:`vlrollout.processors.errors.PreprocessError` (naming the item and the reason) for bad input.

    ``tokenizer`` and ``processor`` are what the engine's ``ModelRequest`` carries.
    """

    tokenizer: Any
    processor: Any

    def prepare(self, data: dict[str, Any]) -> PreparedPrompt: ...
