"""What the handlers of both protocols share: the engine, pause state, in-flight requests, images.

Pause semantics follow SGLang (``/pause_generation``) and AReaL's vLLM server
(``/areal_pause_generation``): new generation requests wait until generation continues, and
in-flight requests that the client can resume are aborted at once, returning the tokens made so
far with finish reason ``abort`` (AReaL's ``RemoteInfEngine.agenerate`` then resends prompt +
those tokens). Requests the client could not resume correctly are held instead (see
:mod:`vlrollout.serve.vllm`): the engine pauses between decode steps and a weight update
re-prefills them with the new weights.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from aiohttp import web
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest, ModelResponse

from vlrollout.engine.inputs import count_placeholders, shown_counts
from vlrollout.engine.sampling import check_sampling_values
from vlrollout.families import VIDEO_INPUT_KEYS, context_length, image_token_id
from vlrollout.processors.auto import channels_last_kwargs
from vlrollout.processors.base import prompt_token_limit, run_lengths
from vlrollout.processors.decode_room import DecodeRoom, ImageHeaders, video_cost
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.families import image_size_setting, size_getter
from vlrollout.processors.image_loading import (
    DEFAULT_MAX_BYTES,
    decode_inline,
    has_scheme,
    load_image,
    peek_image,
    shown_sizes,
)
from vlrollout.processors.video_limits import DEFAULT_MAX_VIDEO_BYTES
from vlrollout.processors.video_loading import PeekedVideo
from vlrollout.serve.admission import Admission, TokenRate
from vlrollout.serve.errors import BadRequest, typed
from vlrollout.serve.limits import BODY_IDLE_TIMEOUT_S

if TYPE_CHECKING:
    from vlrollout.workflows.preparation import FrameSampling

# SGLang/vLLM spell "no top-k" as -1 (or 0); AReaL sends int(1e8).
_NO_TOP_K = int(1e8)


@dataclass
class ServerState:
    """The served engine and the server's generation state.

    Args:
        engine: An initialised :class:`~vlrollout.engine.LocalInferenceEngine`.
        max_image_pixels: Largest decoded image accepted (decompression-bomb guard).
        max_image_bytes: Largest encoded image accepted.
        max_video_frame_pixels: Largest decoded video frame accepted (decompression-bomb guard).
        max_body_bytes: The application's body limit (named in 413 answers).
        frames: How the served preprocessor samples videos (``None``: the family's defaults).
        min_pixels, max_pixels: Each image's pixel budget (``None``: the processor's settings).
        weights_root: The folder weight updates may load from (anything under it).
        admission: The queue's bounds and counters (``None``: no bound).
        body_idle_timeout_s: A request body none of whose bytes arrive for this long gets 408.
    """

    engine: Any
    max_image_pixels: int | None = None
    max_image_bytes: int | None = None
    max_video_frame_pixels: int | None = None
    max_body_bytes: int | None = None
    frames: FrameSampling | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None
    weights_root: Path | None = None
    admission: Admission | None = None
    body_idle_timeout_s: float = BODY_IDLE_TIMEOUT_S
    running: asyncio.Event = field(default_factory=asyncio.Event)
    stopping: bool = False  # the server is shutting down: held requests get 503
    inflight: dict[str, bool] = field(default_factory=dict)  # rid -> abort on pause
    preprocessor: Any = None
    requests: collections.Counter = field(default_factory=collections.Counter)  # per path
    errors: collections.Counter = field(default_factory=collections.Counter)  # answers by status
    tokens: TokenRate = field(default_factory=TokenRate)  # generated, all requests

    def __post_init__(self) -> None:
        self.running.set()
        self.context_len = context_length(self.engine.model.config) or 1 << 20
        if self.engine.processor is not None:
            from vlrollout.processors.auto import AutoProcessorPreprocessor

            limits = {
                k: v
                for k, v in (
                    ("max_image_pixels", self.max_image_pixels),
                    ("max_image_bytes", self.max_image_bytes),
                    ("max_video_frame_pixels", self.max_video_frame_pixels),
                )
                if v is not None
            }
            video = self.frames.options() if self.frames is not None else {}
            self.preprocessor = AutoProcessorPreprocessor(
                self.engine.processor, self.min_pixels, self.max_pixels, **limits, **video
            )
            self.preprocessor.decode_room = DecodeRoom(max_pixels=None)  # admission's instead

    # ---------------------------------------------------------------- requests
    def gconfig(
        self,
        where: str,
        fields: Mapping[str, Any],
        max_new_tokens: Any,
        *,
        fields_where: str | None = None,
        min_tokens_key: str = "min_new_tokens",
        max_tokens_key: str = "max_new_tokens",
        top_k_off: tuple[int, ...] = (-1,),
    ) -> GenerationHyperparameters:
        """AReaL generation settings from a request's sampling ``fields`` (validated here).

        The protocols share the field names except the minimum length (SGLang
        ``min_new_tokens``, vLLM ``min_tokens``), where the maximum comes from and the values of
        ``top_k`` that turn it off (SGLang -1, vLLM -1 or 0), so those are arguments; type
        errors name ``fields_where`` (default ``where``).
        """
        fw = fields_where or where
        temperature = typed(fields, "temperature", float, fw)
        top_p = typed(fields, "top_p", float, fw)
        top_k = typed(fields, "top_k", int, fw)
        stop_token_ids = typed(fields, "stop_token_ids", list, fw)
        stop = typed(fields, "stop", (str, list), fw)
        ignore_eos = typed(fields, "ignore_eos", bool, fw)
        frequency_penalty = typed(fields, "frequency_penalty", float, fw)
        min_new_tokens = typed(fields, min_tokens_key, int, fw)
        if max_new_tokens is None:
            max_new_tokens = 128  # SGLang's default
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise BadRequest(f"{fw}: {max_tokens_key} must be an int, got {max_new_tokens!r}")
        if max_new_tokens < 1:
            raise BadRequest(f"{fw}: {max_tokens_key} must be >= 1, got {max_new_tokens}")
        temperature = 1.0 if temperature is None else float(temperature)
        top_p = 1.0 if top_p is None else float(top_p)
        frequency_penalty = float(frequency_penalty or 0.0)
        try:  # before temperature 0 becomes greedy: a NaN must not become 1.0
            check_sampling_values(temperature, top_p, frequency_penalty)
        except ValueError as e:
            raise BadRequest(f"{where}: {e}") from None
        if top_k is not None and top_k < 1 and top_k not in top_k_off:
            off = " or ".join(map(str, top_k_off))
            raise BadRequest(f"{where}: top_k must be {off} (off) or at least 1, got {top_k}")
        top_k = _NO_TOP_K if top_k is None or top_k < 1 else int(top_k)
        stop_ids = list(stop_token_ids or [])
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
            raise BadRequest(f"{where}: stop_token_ids must be a list of ints")
        if any(t < 0 for t in stop_ids):
            raise BadRequest(
                f"{where}: stop_token_ids must be token ids (ints >= 0), got {stop_ids[:8]}"
            )
        if min_new_tokens is not None and min_new_tokens < 0:
            raise BadRequest(f"{where}: {min_tokens_key} must be >= 0, got {min_new_tokens}")
        if min_new_tokens is not None and min_new_tokens > max_new_tokens:
            raise BadRequest(
                f"{where}: {min_tokens_key}={min_new_tokens} must be at most the maximum, "
                f"{max_new_tokens}"
            )
        if isinstance(stop, str):
            stop = [stop]
        if stop is not None and not all(isinstance(s, str) for s in stop):
            raise BadRequest(f"{where}: stop must be a string or a list of strings")
        return GenerationHyperparameters(
            max_new_tokens=max_new_tokens,
            min_new_tokens=int(min_new_tokens or 0),
            greedy=temperature == 0.0,
            temperature=temperature if temperature > 0 else 1.0,
            top_p=top_p,
            top_k=top_k,
            stop_token_ids=stop_ids,
            stop=list(stop) if stop else None,
            ignore_eos=bool(ignore_eos),
            frequency_penalty=frequency_penalty,
            max_tokens=self.context_len,
        )

    def encoded_images(self, images: list[Any], where: str) -> list[bytes]:
        """The encoded bytes of ``images`` (base64 / data URLs, never paths), under the served
        preprocessor's byte limit; run it off the event loop."""
        processor = self.engine.processor
        if processor is None or getattr(processor, "image_processor", None) is None:
            raise BadRequest(f"{where}: images were sent but the served model has no processor")
        limit = self.preprocessor.max_image_bytes
        return [encoded_image(src, f"{where} image {k}", limit) for k, src in enumerate(images, 1)]

    def image_headers(self, raws: list[bytes], where: str) -> ImageHeaders:
        """Each encoded image's (width, height) and what decoding them costs, read from their
        headers without decoding them, under the decode limits (a decompression bomb is refused
        here); run it off the event loop."""
        images = []
        for k, raw in enumerate(raws, start=1):
            label = f"{where} image {k}"
            try:
                images.append(peek_image(raw, label, self.preprocessor.max_image_pixels))
            except PreprocessError as e:
                raise BadRequest(f"{label}: {e.reason}: {e.detail}") from None
        return ImageHeaders.of(images)

    def video_headers(self, raws: list[bytes], where: str) -> list[PeekedVideo]:
        """Each encoded video read and measured without decoding a frame (its sampled frames and
        their size), under the served preprocessor's video limits; run it off the event loop."""
        try:
            return self.preprocessor.peek_videos(raws, where)
        except PreprocessError as e:  # its item names the video: "<where>, video 2"
            raise BadRequest(f"{e.item}: {e.reason}: {e.detail}") from None

    def check_image_placeholders(
        self, ids: list[int], sizes: list[tuple[int, int]], where: str
    ) -> None:
        """Refuse ``input_ids`` whose image placeholders disagree with what images of ``sizes``
        take under the served processor's settings, before they are decoded. Families whose
        tokens cannot be counted from sizes are checked by the engine, after."""
        per_image = self.preprocessor.image_token_counts(sizes)
        if per_image is None:
            return
        tokens, token_id = sum(per_image), image_token_id(self.engine.model.config)
        n_tokens, n_runs = count_placeholders(ids, token_id)
        if (n_tokens, n_runs) == (tokens, len(sizes)):
            runs = run_lengths([t == token_id for t in ids])
            if runs == per_image:
                return
            raise BadRequest(
                f"{where}: image placeholders and images disagree: input_ids hold image "
                f"placeholder runs of {shown_counts(runs)} tokens, but the images of "
                f"{shown_sizes(sizes)} take {shown_counts(per_image)} tokens, one run per image "
                "in the order of image_data: send the images in their placeholders' order."
            )
        budget = self.preprocessor.processor_kwargs.get("images_kwargs", {})
        get = size_getter(budget.get("size") or self.engine.processor.image_processor.size)
        raise BadRequest(
            f"{where}: image placeholders and images disagree: input_ids hold {n_tokens} image "
            f"placeholder tokens in {n_runs} run(s), but {len(sizes)} image(s) of "
            f"{shown_sizes(sizes)} take {tokens} tokens in {len(sizes)} run(s), one per image, "
            "under this server's image processor "
            f"(size bounds shortest_edge={get('shortest_edge')}, longest_edge="
            f"{get('longest_edge')}; vlrollout serve --min-pixels/--max-pixels). Build "
            "input_ids and the images with the same processor settings."
        )

    def check_video_placeholders(
        self, ids: list[int], videos: Sequence[PeekedVideo], where: str
    ) -> None:
        """Refuse ``input_ids`` whose video placeholder tokens disagree in number with what
        ``videos`` take under the served frame sampling, before a frame is decoded (the runs are
        not compared: Qwen3-VL writes one per group of frames, between their timestamps).
        Families whose video tokens cannot be counted from the clip's header are checked by the
        engine, after."""
        tokens = self.preprocessor.video_tokens(videos)
        if tokens is None:
            return
        held = ids.count(self.preprocessor.video_token_id)
        if held == tokens:
            return
        clips = ", ".join(v.shown for v in videos)
        raise BadRequest(
            f"{where}: video placeholders and videos disagree: input_ids hold {held} video "
            f"placeholder tokens, but {len(videos)} video(s) ({clips}) take {tokens} under this "
            "server's frame sampling (vlrollout serve --video-fps/--video-max-frames/"
            "--video-min-pixels/--video-max-pixels). Build input_ids and the videos with the "
            "same settings."
        )

    def image_size(self) -> dict[str, int] | None:
        """The ``size`` the served image processor resizes to (its pixel budget's bounds, or a
        fixed size), which clients building ``input_ids`` must match; ``/health`` shows it."""
        if self.preprocessor is None:
            return None
        budget = self.preprocessor.processor_kwargs.get("images_kwargs", {})
        return image_size_setting(self.engine.processor, budget)

    @contextlib.asynccontextmanager
    async def decoding_room(
        self, headers: ImageHeaders, where: str, videos: Sequence[PeekedVideo] = ()
    ) -> AsyncIterator[None]:
        """Room to decode images of ``headers`` and the sampled frames of ``videos``
        (:meth:`Admission.decoding_room`; no bound without admission control). A request whose
        turn comes once the server is stopping is answered 503 undecoded."""
        if self.admission is None:
            self.check_not_stopping(where)
            yield
            return
        pixels = headers.cost + video_cost(sum(v.pixels for v in videos))
        counts = ((len(headers.sizes), "image"), (len(videos), "video"))
        media = " and ".join(f"{n} {kind}(s)" for n, kind in counts if n)
        async with self.admission.decoding_room(pixels, media, where):
            self.check_not_stopping(where)
            yield

    def check_not_stopping(self, where: str) -> None:
        """Answer 503 once the server is shutting down (a client retries elsewhere)."""
        if self.stopping:
            raise BadRequest(
                f"{where}: the server is shutting down; retry on another server", status=503
            )

    def check_media_tokens(
        self,
        sizes: list[tuple[int, int]],
        where: str,
        room: int | None = None,
        videos: Sequence[PeekedVideo] = (),
    ) -> None:
        """Refuse images of ``sizes`` and ``videos`` that alone take more than ``room`` tokens
        (default: the model's context), before they are decoded (the served preprocessor's
        ``prompt_too_long``)."""
        try:
            with prompt_token_limit(self.context_len if room is None else room):
                self.preprocessor.check_media_tokens(sizes, where, videos)
        except PreprocessError as e:
            raise BadRequest(f"{where}: {e.reason}: {e.detail}") from None

    def vision_tensors(self, raws: list[bytes], where: str) -> dict[str, torch.Tensor]:
        """Decode encoded images with our image loading and the model's image processor; run it
        off the event loop."""
        pre = self.preprocessor  # its limits, with load_image's defaults filled in
        loaded = []
        for k, raw in enumerate(raws, start=1):
            label = f"{where} image {k}"
            try:
                loaded.append(
                    load_image(
                        raw, label, max_pixels=pre.max_image_pixels, max_bytes=pre.max_image_bytes
                    )
                )
            except PreprocessError as e:
                raise BadRequest(f"{label}: {e.reason}: {e.detail}") from None
        # One prompt's images as one sample, as the processor's own call passes them: families
        # that treat several images of one prompt differently (LLaVA-OneVision pads each to a
        # square; Idefics3 tiles one sequence's images into one pixel_values row) need the nesting.
        try:
            ip = self.engine.processor.image_processor
            images = [[im.image for im in loaded]]
            budget = self.preprocessor.processor_kwargs.get("images_kwargs", {})
            layout = channels_last_kwargs(ip, images[0])
            out = ip(images=images, return_tensors="pt", **budget, **layout)
        except (ValueError, RuntimeError) as e:  # refused (an extreme aspect ratio), or
            raise BadRequest(f"{where}: processor_error: {e}") from None  # resized to nothing
        return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}

    def prepare(self, item: dict[str, Any], where: str) -> Any:
        """The served preprocessor's :class:`PreparedPrompt` for ``item``; a bad item is a
        :class:`BadRequest` with the preprocessor's reason, naming the image or video at fault
        as the header checks do (``<where> image 2``); run it off the event loop."""
        try:
            with prompt_token_limit(self.context_len):  # images counted before pixels
                return self.preprocessor.prepare(item)
        except PreprocessError as e:  # e.item: "item", or "item, image 2" for one image's fault
            media = e.item.partition(", ")[2]
            named = f"{where} {media}" if media else where
            raise BadRequest(f"{named}: {e.reason}: {e.detail}") from None

    def encoded_videos(self, videos: list[Any], where: str) -> list[bytes]:
        """The encoded bytes of ``videos`` (base64 / data URLs, never paths); run it off the
        event loop."""
        if self.preprocessor is None or not getattr(self.preprocessor, "has_vision", False):
            raise BadRequest(f"{where}: videos were sent but the served model has no processor")
        limit = video_byte_limit(self.preprocessor)
        return [
            encoded_image(v, f"{where} video {k}", limit, "video") for k, v in enumerate(videos, 1)
        ]

    def video_tensors(self, raws: list[bytes], where: str) -> dict[str, torch.Tensor]:
        """The model's video tensors for encoded videos, sampled and resized as the served
        preprocessor does for a chat request (the client's ``input_ids`` must expand each
        video's placeholders for that sampling); run it off the event loop."""
        item = {
            "messages": [{"role": "user", "content": [{"type": "video"} for _ in raws]}],
            "videos": raws,
        }
        prepared = self.prepare(item, where)
        return {k: v for k, v in prepared.multi_modal_input.items() if k in VIDEO_INPUT_KEYS}

    async def generate(self, req: ModelRequest, abort_on_pause: bool, where: str) -> ModelResponse:
        """Wait while paused, then run ``req`` on the engine; bad inputs become 400s."""
        from vlrollout.engine.inputs import PlaceholderMismatchError

        await self.running.wait()
        self.check_not_stopping(where)
        rid = req.rid = req.rid or uuid.uuid4().hex
        self.inflight[rid] = abort_on_pause
        try:
            resp = await self.engine.agenerate(req)
            self.tokens.add(resp.output_len)
            return resp
        except PlaceholderMismatchError as e:
            raise BadRequest(
                f"{where}: {e.kind} placeholders and {e.kind}s disagree: {e}"
            ) from None
        except (ValueError, TypeError) as e:
            raise BadRequest(f"{where}: {e}") from None
        finally:
            self.inflight.pop(rid, None)

    # ---------------------------------------------------------------- control
    async def pause(self) -> int:
        """Hold new requests, abort the resumable in-flight ones; returns how many."""
        self.running.clear()
        await asyncio.to_thread(self.engine.pause_generation)
        rids = {rid for rid, abortable in self.inflight.items() if abortable}
        if not rids:
            return 0
        return await asyncio.wrap_future(self.engine.abort_requests(rids))

    async def resume(self) -> None:
        self.engine.continue_generation()
        self.running.set()

    def stop(self) -> None:
        """The server is shutting down: requests a pause holds are answered 503 instead of
        keeping the shutdown waiting for their clients to give up, and a paused engine finishes
        the requests it holds."""
        self.stopping = True
        self.engine.continue_generation()
        self.running.set()

    async def update_weights(self, path: str, abort_all: bool) -> int:
        """Load ``save_pretrained`` weights from ``path``; returns the engine's new version."""
        from areal.api.io_struct import WeightUpdateMeta

        if not Path(path, "config.json").is_file():
            raise BadRequest(
                f"cannot load weights from {path!r}: not a folder written by save_pretrained "
                "(no config.json); the trainer must save before publishing the update"
            )
        if abort_all and self.inflight:
            await asyncio.wrap_future(self.engine.abort_requests(set(self.inflight)))
        meta = WeightUpdateMeta(type="disk", path=path)
        try:
            fut = self.engine.update_weights_from_disk(meta)
            await asyncio.wrap_future(fut) if isinstance(fut, concurrent.futures.Future) else None
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            raise BadRequest(
                f"cannot load weights from {path!r}: {type(e).__name__}: {e}"
            ) from None
        version = self.engine.get_version() + 1
        self.engine.set_version(version)
        return version


def check_prompt_room(state: ServerState, prompt_len: int, where: str) -> None:
    """Refuse a prompt that fills the model's context before its images' tensors are built
    (the engine would refuse it after)."""
    if prompt_len >= state.context_len:
        raise BadRequest(
            f"{where}: No room to generate: the prompt's {prompt_len} tokens fill the model's "
            f"{state.context_len}-token context"
        )


def check_min_room(state: ServerState, prompt_len: int, minimum: Any, key: str, where: str) -> None:
    """Refuse a minimum completion length the context cannot hold after the prompt: it would
    end short of the minimum it asked for. (A prompt that leaves no room at all is the engine's
    "No room to generate".)"""
    room = state.context_len - prompt_len
    if isinstance(minimum, int) and minimum > room > 0:
        raise BadRequest(
            f"{where}: {key}={minimum} cannot fit: the prompt's {prompt_len} tokens leave "
            f"{room} of the model's {state.context_len}-token context"
        )


def video_byte_limit(preprocessor: Any) -> int:
    """The most encoded bytes of one video ``preprocessor`` takes (its ``video_limits``; a
    plug-in without them: the processors' default), as a run holds it: a clip is many frames, so
    its bound is not one image's."""
    limits = getattr(preprocessor, "video_limits", None)
    return getattr(limits, "max_bytes", DEFAULT_MAX_VIDEO_BYTES)


def encoded_image(
    source: Any, label: str, max_bytes: int = DEFAULT_MAX_BYTES, what: str = "image"
) -> bytes:
    """The bytes of a base64 string or ``data:...;base64,`` URL (an image, or a video with
    ``what="video"``), decoded by the processors'
    :func:`~vlrollout.processors.image_loading.decode_inline` under their byte limit ``max_bytes``.

    Paths and URLs are refused here, before decoding: a server must not read its own files or the
    network on a client's behalf. Every refusal is a :class:`BadRequest` naming ``label`` (the
    field), with the processors' reason and detail when their decoder refused.
    """
    kind = what.removesuffix("_url")
    if not isinstance(source, str):
        raise BadRequest(
            f"{label}: must be a base64 string or data: URL, got {type(source).__name__}"
        )
    not_inline = BadRequest(
        f"{label}: only inline {kind}s (base64 or data: URLs), got {source[:60]!r}"
    )
    if any(has_scheme(source, scheme) for scheme in ("http://", "https://", "file:")):
        raise not_inline
    try:
        return decode_inline(source, label, max_bytes)
    except PreprocessError as e:
        # Valid base64 may start with "/" (every JPEG's starts with "/9j/"), so a leading "/"
        # means a path only when the text is not base64; it is never read either way.
        if e.reason == "image_source" and source.startswith("/"):
            raise not_inline from None
        reason = e.reason.replace("image_", f"{kind}_")  # the decoder speaks of images
        raise BadRequest(f"{label}: {reason}: {e.detail}") from None


def cut_at_stop(
    text: str, stop: str | list[str] | None, searched_from: int = 0
) -> tuple[str, str | None]:
    """``text`` up to the earliest of the request's stop strings that ends after its first
    ``searched_from`` characters, and that string (``None`` when none does): OpenAI, vLLM and
    SGLang return the text without its stop string. The engine looks for stop strings from the
    ``min_new_tokens``-th token on, as vLLM does, so one ending in the text before
    (:func:`stop_search_start`) did not stop it and stays in the text.

    >>> cut_at_stop("red, blue.", [".", ","])
    ('red', ',')
    >>> cut_at_stop("red, blue.", [".", ","], searched_from=4)
    ('red, blue', '.')
    """
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    found = [
        (at, s)
        for s in stops
        if s and (at := text.find(s, max(0, searched_from - len(s) + 1))) != -1
    ]
    if not found:
        return text, None
    at, matched = min(found)
    return text[:at], matched


def stop_search_start(
    tokenizer: Any, tokens: Sequence[int], min_new_tokens: int, skip: bool
) -> int:
    """Characters of the text of the tokens before the ``min_new_tokens``-th: a stop string
    ending in them did not stop the engine (:func:`cut_at_stop`)."""
    if min_new_tokens <= 1:
        return 0
    return len(tokenizer.decode(tokens[: min_new_tokens - 1], skip_special_tokens=skip))


def response_text(
    tokenizer: Any, resp: ModelResponse, gconfig: GenerationHyperparameters, skip: bool
) -> tuple[str, str | None]:
    """A response's text, ending before the stop string that stopped the engine, and that
    string (:func:`cut_at_stop`); ``("", None)`` without a tokenizer."""
    if tokenizer is None:
        return "", None
    text = tokenizer.decode(resp.output_tokens, skip_special_tokens=skip)
    start = stop_search_start(tokenizer, resp.output_tokens, gconfig.min_new_tokens, skip)
    return cut_at_stop(text, gconfig.stop, start)


STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)
"""Where the application keeps its :class:`ServerState`."""
