"""Steps every workflow shares: prepare, request, generate, score, and turning failures into reasons.

Workflows compose these functions instead of inheriting copies of them (AReaL's
``VisionRLVRWorkflow`` re-implements ``RLVRWorkflow``'s methods and the copies already disagree).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from areal.api import AsyncRewardWrapper, InferenceEngine, ModelRequest, ModelResponse
from areal.api.cli_args import GenerationHyperparameters
from areal.utils.dynamic_import import import_from_string
from areal.utils.perf_tracer import atrace_session_phase, trace_session

from vlrollout.checks import check_request_images
from vlrollout.packaging import merge_multi_modal_inputs
from vlrollout.processors.base import PreparedPrompt
from vlrollout.rewards.pool import NotStarted, RewardBatch, RewardRecipe, current_pool, replace_pool

# Keys of a data item that do not reach the reward function: raw images are heavy to pickle into
# the reward process pool, and rewards get each image's geometry instead — unless the reward says
# it needs them (``needs_images = True``, e.g. CLIPScore).
_NOT_FOR_REWARD = ("images",)


class EpisodeRejected(Exception):
    """Raised inside an episode to reject it with a reason; the workflow records it and returns None."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


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


async def generate(engine: InferenceEngine, req: ModelRequest) -> ModelResponse:
    """Call the engine, turning engine failures into rejections with a reason.

    Decided per case (see the reliability table in the README): an engine exception or an
    ``abort`` rejects the episode (``engine_error`` / ``engine_abort``); an empty completion
    rejects it (``empty_output``) because it carries nothing to train on.
    """
    async with atrace_session_phase("generate"):
        try:
            resp = await engine.agenerate(req)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - recorded as the rejection reason
            raise EpisodeRejected("engine_error", f"{type(e).__name__}: {e}") from e
    if resp.stop_reason == "abort":
        raise EpisodeRejected("engine_abort", f"engine aborted request {req.rid}")
    if resp.output_len == 0:
        raise EpisodeRejected("empty_output", f"engine returned no tokens for request {req.rid}")
    return resp


class RewardCaller:
    """Runs a synchronous reward function in AReaL's ``AsyncRewardWrapper`` process pool.

    AReaL's wrapper returns 0 after a timeout, indistinguishable from a wrong answer; here the
    timeout is enforced outside it, so a timeout rejects the episode with reason
    ``reward_timeout``, and an exception rejects it with ``reward_error`` — never an unexplained 0.
    A crashed worker process is recovered by the wrapper (it recreates the pool and retries once);
    after a timeout the pool is replaced (:func:`vlrollout.rewards.pool.replace_pool`), so a hung
    reward takes down only its own batch (below). The pool receives a :class:`RewardRecipe`, not
    the reward: each worker builds the reward once.

    Calls that become ready in the same event-loop iteration (the episodes of a group) go to the
    pool as one task per worker (:class:`~vlrollout.rewards.pool.RewardBatch`): each task costs
    0.5-1 ms of inter-process round trip (bench/bench_reward_pool.py), and without GPUs AReaL's
    pool has one worker (issue 16). A lone call still leaves in the next iteration, as a batch of
    one. Each call keeps its own timeout and reason; a reward that raises rejects only
    its own episode, but a reward that hangs times out the calls batched with it. A batch starts no
    further call after ``BATCH_BUDGET_S`` (50 ms): the calls it hands back go one per task, and a
    reward that slow is not batched again (the round trip saved is then noise, and queueing behind
    it is not).

    Args:
        reward_fn: ``(prompt, completions, prompt_ids, completion_ids, **task_data) -> float``,
            a built-in reward name (``"iou"``, ``"cider_d"``... see
            :mod:`vlrollout.rewards.registry`) or an import path (a class is instantiated).
            Must be picklable.
        timeout_s: Seconds before the episode is rejected with ``reward_timeout``.
    """

    def __init__(self, reward_fn: Callable[..., float] | str, timeout_s: float = 15.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"reward timeout must be positive, got {timeout_s}")
        if isinstance(reward_fn, str):
            # Built-in reward names and import paths; a class path is instantiated.
            from vlrollout.rewards.registry import get_reward

            reward_fn = get_reward(reward_fn)
        self.reward_fn = resolve_callable(reward_fn, "reward function")
        # What crosses into the pool per call is a small recipe; each worker builds the reward
        # once from the file it names (vlrollout.rewards.pool), so per-call cost does not grow
        # with the reward's state (a CIDEr-D corpus). Raises ValueError if it cannot pickle.
        self.recipe = RewardRecipe.from_reward(self.reward_fn)
        self.timeout_s = timeout_s
        # Every call reaches the pool as a RewardBatch (a lone call as a batch of one). Inner
        # timeout is longer than ours so ours always fires first; one retry covers a broken
        # process pool.
        self._wrapper = AsyncRewardWrapper(
            RewardBatch(self.recipe), timeout_seconds=2 * timeout_s + 1, max_retries=1
        )
        self._pending: dict[asyncio.AbstractEventLoop, list[_PendingCall]] = {}
        self._batching = True  # off once a batch ran past its budget: the reward is slow
        self._running: set[asyncio.Task[None]] = set()

    @trace_session("reward")
    async def __call__(
        self,
        prompt: str,
        completion: str,
        prompt_ids: Sequence[int],
        completion_ids: Sequence[int],
        task_data: Mapping[str, Any],
        geometry: Sequence[Mapping[str, int]] = (),
    ) -> float:
        # Rewards that score the image itself (CLIPScore) declare ``needs_images = True``.
        dropped = () if getattr(self.reward_fn, "needs_images", False) else _NOT_FOR_REWARD
        kwargs = {k: v for k, v in task_data.items() if k not in dropped}
        if geometry:
            kwargs["geometry"] = [dict(g) for g in geometry]
        try:
            args = (prompt, completion, list(prompt_ids), list(completion_ids))
            if getattr(self.reward_fn, "run_in_thread", False):
                # Torch-model rewards: a forked pool worker inherits torch's thread pools and can
                # hang, so they run in a thread of this process (torch releases the GIL).
                call = asyncio.to_thread(self.reward_fn, *args, **kwargs)
            else:
                pool = current_pool(self._wrapper)
                call = self._submit(args, kwargs)
            value = await asyncio.wait_for(call, timeout=self.timeout_s)
        except TimeoutError as e:
            if not getattr(self.reward_fn, "run_in_thread", False):
                # The hung call still occupies a pool worker: replace the pool so the next
                # rewards do not queue behind it (calls beside it are retried by AReaL; calls
                # batched with it time out with it).
                replace_pool(self._wrapper, expected=pool)
            raise EpisodeRejected(
                "reward_timeout", f"reward function took longer than {self.timeout_s}s"
            ) from e
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - recorded as the rejection reason
            raise EpisodeRejected("reward_error", f"{type(e).__name__}: {e}") from e
        try:
            value = float(value)
        except (TypeError, ValueError) as e:
            raise EpisodeRejected(
                "reward_error", f"reward function returned {value!r}, not a number"
            ) from e
        if value != value:  # NaN
            raise EpisodeRejected("reward_error", "reward function returned NaN")
        return value

    def _submit(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> asyncio.Future[Any]:
        """Queue one call for the pool; the first call of a loop iteration schedules the flush."""
        loop = asyncio.get_running_loop()
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        future = loop.create_future()
        pending.append(_PendingCall(args, kwargs, future))
        return future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send the queued calls as one task per pool worker (fewer if fewer calls)."""
        calls = [c for c in self._pending.pop(loop) if not c.future.done()]  # done: cancelled
        n = min(len(calls), self._wrapper.max_workers) if self._batching else len(calls)
        for i in range(n):
            self._start(loop, calls[i * len(calls) // n : (i + 1) * len(calls) // n])

    def _start(self, loop: asyncio.AbstractEventLoop, chunk: list[_PendingCall]) -> None:
        task = loop.create_task(self._run(chunk))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        for call in chunk:
            call.future.add_done_callback(functools.partial(_stop_if_abandoned, task, chunk))

    async def _run(self, chunk: list[_PendingCall]) -> None:
        """One pool task for ``chunk``; each call's future gets its own value or exception."""
        try:
            # A lone call goes as a batch of one too: a reward that raises comes back as its
            # outcome, where AReaL's wrapper would log its traceback twice on stdout.
            outcomes = await self._wrapper([(c.args, c.kwargs) for c in chunk])
            if not isinstance(outcomes, list) or len(outcomes) != len(chunk):
                # AReaL's wrapper answers 0 after its own (longer) timeout.
                raise RuntimeError(f"reward batch of {len(chunk)} returned {outcomes!r}")
        except Exception as e:  # noqa: BLE001 - every call of the task fails with it
            for call in chunk:
                _settle(call.future, error=e)
            return
        handed_back = [c for c, o in zip(chunk, outcomes, strict=True) if isinstance(o, NotStarted)]
        if handed_back:  # the batch spent its time budget: this reward is too slow to batch
            self._batching = False
            loop = asyncio.get_running_loop()
            for call in handed_back:
                if not call.future.done():
                    self._start(loop, [call])
        for call, outcome in zip(chunk, outcomes, strict=True):
            if isinstance(outcome, NotStarted):
                continue
            if isinstance(outcome, Exception):  # RewardBatch hands back what a call raised
                _settle(call.future, error=outcome)
            else:
                _settle(call.future, outcome)


@dataclass
class _PendingCall:
    """A reward call waiting for the pool; its episode awaits :attr:`future`."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: asyncio.Future[Any]


def _settle(future: asyncio.Future[Any], value: Any = None, error: Exception | None = None) -> None:
    if future.done():  # its episode gave up (timeout or cancelled)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _stop_if_abandoned(
    task: asyncio.Task[None], chunk: list[_PendingCall], _: asyncio.Future[Any]
) -> None:
    # Nobody waits for the task any more: cancel it, so a hung batch is not retried on the
    # fresh pool after replace_pool broke the old one.
    if all(c.future.done() for c in chunk):
        task.cancel()


def close_turn_tokens(output_tokens: Sequence[int], eos_token_id: int) -> list[int]:
    """``[eos]`` when a generated turn was cut off before its end-of-turn token, else ``[]``
    (``eos_token_id``: the template's end of turn,
    :func:`vlrollout.processors.turns.turn_end_token_id`).

    What follows a turn (feedback, a tool observation) must start after a closed turn, as the chat
    template renders the whole conversation.
    """
    return [] if output_tokens and output_tokens[-1] == eos_token_id else [eos_token_id]
