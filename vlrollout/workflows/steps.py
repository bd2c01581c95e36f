"""Steps every workflow shares: build the request, generate, and turn failures into reasons.

Scoring is :class:`vlrollout.rewards.caller.RewardCaller`; a step rejects an episode by raising
:class:`~vlrollout.ledger.EpisodeRejected`.

Workflows compose these functions instead of inheriting copies of them (AReaL's
``VisionRLVRWorkflow`` re-implements ``RLVRWorkflow``'s methods and the copies already disagree).
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import torch
from areal.api import InferenceEngine, ModelRequest, ModelResponse
from areal.api.cli_args import GenerationHyperparameters
from areal.engine.sglang_remote import RemoteSGLangEngine
from areal.engine.vllm_remote import RemotevLLMEngine
from areal.infra import RemoteInfEngine
from areal.utils.dynamic_import import import_from_string
from areal.utils.perf_tracer import atrace_session_phase

from vlrollout.checks import check_request_images
from vlrollout.errors import EngineNotInitialized
from vlrollout.ledger import EpisodeRejected
from vlrollout.packaging import merge_multi_modal_inputs
from vlrollout.processors.base import PreparedPrompt
from vlrollout.processors.messages import paired_image_sources


def resolve_callable(fn: Callable[..., Any] | str, what: str) -> Callable[..., Any]:
    """Accept a callable or an import path (``pkg.mod.attr``), as AReaL configs name hooks."""
    if callable(fn):
        return fn
    if isinstance(fn, str):
        try:
            return import_from_string(fn)
        except Exception as e:  # noqa: BLE001 - re-raised with the path named
            raise ValueError(f"cannot import {what} {fn!r}: {e}") from e
    raise TypeError(f"{what} must be a callable or an import path, got {type(fn).__name__}")


VIDEO_TIMING = "video_timing"
"""The task-data key under which rewards get each video's timing (one dict per video, in prompt
order: the sampled frames' timestamps in seconds, their fps, count and size); the item's own
``videos`` field holds the sources."""


def reward_task_data(data: Mapping[str, Any], prepared: PreparedPrompt) -> Mapping[str, Any]:
    """The item's fields for the reward, with ``images`` every prompt image in prompt order
    (aligned with ``geometry``: images given inside message parts too), plus
    :data:`VIDEO_TIMING` when the prompt has videos (temporal rewards score answers in seconds
    against the frames the model saw)."""
    extra: dict[str, Any] = {}
    images, listed = paired_image_sources(data), list(data.get("images") or [])
    if images is not None and (
        len(images) != len(listed) or any(a is not b for a, b in zip(images, listed, strict=True))
    ):
        extra["images"] = images
    if prepared.videos:
        extra[VIDEO_TIMING] = [clip.to_dict() for clip in prepared.videos]
    return {**data, **extra} if extra else data


AREAL_REMOTE_ENGINES = (RemoteSGLangEngine, RemotevLLMEngine, RemoteInfEngine)
"""AReaL 1.0.4's HTTP clients: their ``ModelRequest`` has no video field."""


def check_engine_takes_videos(engine: InferenceEngine, prepared: PreparedPrompt) -> None:
    """Reject a video prompt bound for one of AReaL's remote engines (``video_unsupported``):
    their requests carry images only, so the server would get the video's placeholders without
    its frames and the model would answer blind. The embedded engine takes the tensors."""
    if prepared.videos and isinstance(engine, AREAL_REMOTE_ENGINES):
        raise EpisodeRejected(
            "video_unsupported",
            f"{len(prepared.videos)} video(s), but {type(engine).__name__} cannot send video "
            "(AReaL's ModelRequest has no video field): run video items on the embedded engine "
            "(engine.kind=local)",
        )


def build_request(
    prepared: PreparedPrompt,
    gconfig: GenerationHyperparameters,
    tokenizer: Any,
    processor: Any = None,
    input_ids: Sequence[int] | None = None,
    multi_modal_inputs: Sequence[Mapping[str, torch.Tensor]] = (),
    image_data: Sequence[str] | None = None,
    vision_msg_vllm: Sequence[dict[str, Any]] | None = None,
    later_messages: Sequence[dict[str, Any]] = (),
) -> ModelRequest:
    """A ``ModelRequest`` that every engine can serve.

    Remote engines get ``image_data`` (SGLang) and ``vision_msg_vllm`` (vLLM); our local engine
    gets the exact training tensors in ``metadata["multi_modal_input"]``, so the engine and the
    trainer see the same pixels by construction. ``input_ids``/``multi_modal_inputs``/
    ``image_data``/``vision_msg_vllm`` override the prompt's for later turns of a multi-turn
    episode; ``later_messages`` are appended to the prompt's vLLM messages (when it has any)
    without encoding its images before an engine reads them. AReaL's vLLM client sends ``vision_msg_vllm`` (not ``input_ids``) and rewrites its
    image URLs in place, so the messages are deep-copied: the cached prompt stays untouched.

    Raises:
        ImagesMissingError: the request's placeholders and images disagree (a bug upstream:
            the model would answer blind).
    """
    metadata: dict[str, Any] = {}
    parts = list(multi_modal_inputs) or (
        [prepared.multi_modal_input] if prepared.multi_modal_input else []
    )
    if parts:
        metadata["multi_modal_input"] = merge_multi_modal_inputs(parts)
    common = {
        "rid": uuid.uuid4().hex,
        "input_ids": list(input_ids if input_ids is not None else prepared.input_ids),
        "gconfig": gconfig.new(n_samples=1),
        "tokenizer": tokenizer,
        "processor": processor,
        "metadata": metadata,
    }
    if image_data is None and vision_msg_vllm is None and prepared.engine_images_pending:
        # Encoded only if the engine reads them (our local engine uses the tensors).
        req: ModelRequest = LazyImagesRequest(prepared, later_messages, **common)
    else:
        messages = vision_msg_vllm if vision_msg_vllm is not None else prepared.vision_msg_vllm
        req = ModelRequest(
            image_data=list(image_data if image_data is not None else prepared.image_data),
            vision_msg_vllm=_vllm_messages(messages, later_messages),
            **common,
        )
    check_request_images(
        req,
        prepared.image_token_id,
        require_vllm_messages=not prepared.templated,
        image_marker_id=prepared.image_marker_id,
        video_token_id=prepared.video_token_id,
        video_frame_images=prepared.video_frame_images,
    )
    return req


_UNREAD = object()


def _vllm_messages(
    messages: Sequence[dict[str, Any]] | None, later: Sequence[dict[str, Any]]
) -> list | None:
    """``ModelRequest.vision_msg_vllm`` for ``messages`` + ``later`` (a copy: AReaL's vLLM client
    rewrites image URLs in place), ``None`` without messages."""
    return [copy.deepcopy([*messages, *later])] if messages else None


class LazyImagesRequest(ModelRequest):
    """A ``ModelRequest`` whose ``image_data``/``vision_msg_vllm`` come from the prepared prompt
    the first time an engine reads them (then they are plain lists, as AReaL's clients expect).

    ``image_count`` and ``has_vllm_messages`` answer the request checks without encoding.
    """

    def __init__(
        self, prepared: PreparedPrompt, later_messages: Sequence[dict[str, Any]] = (), **kwargs: Any
    ) -> None:
        self._prepared, self._later = prepared, list(later_messages)
        super().__init__(image_data=_UNREAD, vision_msg_vllm=_UNREAD, **kwargs)

    @property
    def image_data(self) -> list[str]:  # type: ignore[override]
        if self.__dict__["_image_data"] is _UNREAD:
            self.__dict__["_image_data"] = list(self._prepared.image_data)
        return self.__dict__["_image_data"]

    @image_data.setter
    def image_data(self, value: Any) -> None:
        self.__dict__["_image_data"] = value

    @property
    def vision_msg_vllm(self) -> list | None:  # type: ignore[override]
        if self.__dict__["_vision_msg"] is _UNREAD:
            self.__dict__["_vision_msg"] = _vllm_messages(
                self._prepared.vision_msg_vllm, self._later
            )
        return self.__dict__["_vision_msg"]

    @vision_msg_vllm.setter
    def vision_msg_vllm(self, value: Any) -> None:
        self.__dict__["_vision_msg"] = value

    @property
    def images_unread(self) -> bool:
        return self.__dict__["_image_data"] is _UNREAD

    @property
    def image_count(self) -> int:
        return self._prepared.num_images

    @property
    def has_vllm_messages(self) -> bool:
        lazy = self._prepared.engine_images
        return lazy is not None and lazy.has_messages


async def generate(
    engine: InferenceEngine, req: ModelRequest, placeholders: Collection[int] = ()
) -> ModelResponse:
    """Call the engine, turning engine failures into rejections with a reason.

    Decided per case (see the table in docs/reliability.md): an engine exception or an
    ``abort`` rejects the episode (``engine_error`` / ``engine_abort``), except an engine never
    initialised (the caller's bug: :class:`EngineNotInitialized` is raised); an empty completion
    rejects it (``empty_output``) because it carries nothing to train on; a completion holding
    one of ``placeholders`` (:attr:`PreparedPrompt.placeholder_ids`: a sampler can emit them)
    rejects it (``generated_placeholder``), as the trainer's forward would find more
    placeholders than image features.
    """
    async with atrace_session_phase("generate"):
        try:
            resp = await engine.agenerate(req)
        except (asyncio.CancelledError, EngineNotInitialized):
            raise
        except Exception as e:  # noqa: BLE001 - recorded as the rejection reason
            raise EpisodeRejected("engine_error", brief(f"{type(e).__name__}: {e}")) from e
    if resp.stop_reason == "abort":
        raise EpisodeRejected("engine_abort", f"engine aborted request {req.rid}")
    if resp.output_len == 0:
        raise EpisodeRejected("empty_output", f"engine returned no tokens for request {req.rid}")
    if placeholders:
        check_no_placeholders(resp.output_tokens, placeholders)
    return resp


def check_no_placeholders(tokens: Sequence[int], placeholders: Collection[int]) -> None:
    """Raises ``EpisodeRejected`` (``generated_placeholder``) when ``tokens`` hold one of
    ``placeholders``, naming the first."""
    for position, token in enumerate(tokens):
        if token in placeholders:
            raise EpisodeRejected(
                "generated_placeholder",
                f"the completion holds the image/video placeholder token {token} at position "
                f"{position}; trained on, the sequence would have more placeholders than features",
            )


ERROR_DETAIL_CHARS = 500
"""How much of an engine's error message a rejection keeps: a remote client's message can hold
the whole request, base64 images included (megabytes per record, printed in full)."""


def brief(message: str, limit: int = ERROR_DETAIL_CHARS) -> str:
    """``message`` cut to ``limit`` characters, saying how many were left out.

    >>> brief("x" * 10, limit=4)
    'xxxx... (6 characters left out)'
    """
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message) - limit} characters left out)"


def close_turn_tokens(output_tokens: Sequence[int], eos_token_id: int) -> list[int]:
    """``[eos]`` when a generated turn was cut off before its end-of-turn token, else ``[]``
    (``eos_token_id``: the template's end of turn,
    :func:`vlrollout.processors.turns.turn_end_token_id`).

    What follows a turn (feedback, a tool observation) must start after a closed turn, as the chat
    template renders the whole conversation.
    """
    return [] if output_tokens and output_tokens[-1] == eos_token_id else [eos_token_id]


def capped_gconfig(
    gconfig: GenerationHyperparameters, max_total_tokens: int | None, used: int
) -> GenerationHyperparameters:
    """``gconfig`` with ``max_new_tokens`` capped to the room ``max_total_tokens`` leaves after
    ``used`` tokens (``gconfig`` itself without a limit)."""
    if max_total_tokens is None:
        return gconfig
    room = max_total_tokens - used
    return gconfig.new(max_new_tokens=min(gconfig.max_new_tokens, room))


def context_full(max_total_tokens: int | None, used: int) -> bool:
    """No room left under ``max_total_tokens`` to generate even one token."""
    return max_total_tokens is not None and used >= max_total_tokens
