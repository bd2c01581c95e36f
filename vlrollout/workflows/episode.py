"""What every workflow does around its episode: prepare the prompt, record the outcome.

``EpisodeContext`` holds the parts a workflow is configured with (tokenizer, processor,
preprocessor, generation config, reward caller, ledger); :class:`EpisodeWorkflow` builds it once
for every episode shape.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from areal import workflow_context
from areal.api import RolloutWorkflow
from areal.api.cli_args import GenerationHyperparameters
from areal.utils import stats_tracker

from vlrollout.argtypes import check_count
from vlrollout.checks import check_processor_parity
from vlrollout.families import family_name_at
from vlrollout.ledger import EpisodeLedger, EpisodeRejected
from vlrollout.packaging import PackingError
from vlrollout.processors.auto import item_label
from vlrollout.processors.base import (
    ENCODE_ENGINE_IMAGES_AHEAD,
    PreparedPrompt,
    Preprocessor,
    item_copy,
    prompt_token_limit,
)
from vlrollout.processors.cache import PreparedPromptCache, item_fields_key, item_key
from vlrollout.processors.contract import check_prepared, merge_sizes, plugin_name
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.families import adapter_for
from vlrollout.rewards.caller import RewardCaller, reward_argument_clash
from vlrollout.rewards.registry import BOX_REWARDS, get_reward
from vlrollout.rewards.text_extract import completion_text
from vlrollout.workflows.preparation import FrameSampling, build_preprocessor, load_tokenizer
from vlrollout.workflows.shared import config_key, shared_state

# Cache keys the current episode holds; released when the episode ends (see EpisodeWorkflow).
_HELD: contextvars.ContextVar[list[tuple[PreparedPromptCache, str]] | None] = (
    contextvars.ContextVar("vlrollout_held_prompts", default=None)
)


def _default_key(preprocessor: Any) -> Callable[[dict[str, Any]], str]:
    """How items share a preparation without the preprocessor's own ``cache_key``: by prompt and
    media when it declares it reads nothing else (``reads_only_prompt_and_media``, as the
    built-in one), else by every field but the id (a plug-in may read any of them)."""
    if getattr(preprocessor, "reads_only_prompt_and_media", False):
        return item_key
    return item_fields_key


@dataclass
class EpisodeContext:
    """The configured parts of a workflow.

    Args:
        tokenizer: The tokenizer (decodes completions, gives stop/pad ids).
        preprocessor: Turns a data item into a :class:`PreparedPrompt`.
        gconfig: Generation settings; stop and pad token ids are added from the tokenizer.
        reward: The reward caller (``None`` for a caller that only generates: the evaluator).
        processor: The multimodal processor passed along in requests (``None`` for text).
        max_prompt_tokens: Reject prompts longer than this (``prompt_too_long``) instead of letting
            the engine fail on them; ``None`` disables the check.
    """

    tokenizer: Any
    preprocessor: Preprocessor
    gconfig: GenerationHyperparameters
    reward: RewardCaller | None = None
    processor: Any = None
    max_prompt_tokens: int | None = None
    ledger: EpisodeLedger = field(default_factory=EpisodeLedger)

    parity_checked: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.gconfig = self.gconfig.new_with_stop_and_pad_token_ids(self.tokenizer)
        # AReaL's GroupedRolloutWorkflow calls arun_episode group_size times with the same item:
        # the cache prepares it once (concurrent callers share the in-flight preparation).
        # Entries are pinned by the episodes using them and dropped when the group is done.
        # A preprocessor whose output depends on more than the item (a schedule) keys it itself.
        # The cache's bound is the process-wide default (set_default_cache_bytes).
        self.prompts = PreparedPromptCache(
            self.preprocessor,
            key_fn=getattr(self.preprocessor, "cache_key", None) or _default_key(self.preprocessor),
        )
        if self.max_prompt_tokens is not None:
            check_count("max_prompt_tokens", self.max_prompt_tokens, 1)

    def check_parity_once(self, engine: Any) -> None:
        """Compare the engine's processor with ours before the first episode; an engine that
        fails keeps failing every episode (:class:`~vlrollout.checks.ParityError`).

        Skipped for engines that read the prepared tensors (``reads_multi_modal_input``:
        vlrollout's local engine), which see the trainer's pixels by construction whatever
        their own processor's resize settings, and for engines without a ``processor``
        attribute (AReaL's remote engines): check those with
        :func:`vlrollout.checks.check_processor_parity` against the processor the server serves.
        """
        if self.parity_checked:
            return
        engine_processor = getattr(engine, "processor", None)
        reads_tensors = getattr(engine, "reads_multi_modal_input", False)
        if self.processor is not None and engine_processor is not None and not reads_tensors:
            check_processor_parity(engine_processor, self.preprocessor)
        self.parity_checked = True

    async def prepare(self, data: dict[str, Any]) -> PreparedPrompt:
        """Prepare the prompt off the event loop (decoding and resizing images is CPU work).

        Inside :meth:`EpisodeWorkflow.arun_episode` the entry stays pinned until the episode ends
        (then the last episode of the group drops it); elsewhere it is kept unpinned.
        """
        held = _HELD.get()
        copy = item_copy(data)  # a plug-in may change it; the item is also the reward's data
        with prompt_token_limit(self.max_prompt_tokens):  # images counted before pixels
            if held is None:
                prepared = await self.prompts.aprepare(copy)
            else:
                key, prepared = await self.prompts.acquire(copy)
                held.append((self.prompts, key))
        check_prepared(prepared, plugin_name(self.preprocessor), merge_sizes(self.processor), data)
        if self.max_prompt_tokens is not None and prepared.prompt_len > self.max_prompt_tokens:
            raise EpisodeRejected(
                "prompt_too_long",
                f"prompt has {prepared.prompt_len} tokens, more than max_prompt_tokens="
                f"{self.max_prompt_tokens}",
            )
        return prepared

    def reward_prompt(self, token_ids: Sequence[int], image_token_id: int | None) -> str:
        """The reward's ``prompt`` argument, one meaning for every workflow.

        ``prompt`` is the chat-templated text that the scored completion continues, with each
        image written once, as the chat template writes it (Qwen: ``<|vision_start|>
        <|image_pad|><|vision_end|>``), never the processor's expansion into one placeholder per
        image token (videos likewise). For a single-turn episode it equals
        ``PreparedPrompt.prompt_text``; for later turns it also holds the earlier turns. (AReaL's
        own workflows pass the expanded text.)
        """
        ids = list(token_ids)
        runs = {image_token_id, getattr(self.processor, "video_token_id", None)} - {None}
        ids = [t for k, t in enumerate(ids) if t not in runs or k == 0 or ids[k - 1] != t]
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def decode_completion(self, token_ids: Sequence[int]) -> str:
        """Completion text for rewards (:func:`~vlrollout.rewards.text_extract.completion_text`)."""
        return completion_text(self.tokenizer, token_ids, set(self.gconfig.stop_token_ids))

    async def run_recorded(
        self, data: dict[str, Any], episode: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any] | None:
        """Run an episode; a bad item or a failed step becomes ``None`` plus a ledger record.

        Bugs (``PackingError``, anything unexpected) still raise: they are not bad data.
        """
        label = item_label(data) if isinstance(data, dict) else "item"
        try:
            trajectory = await episode()
        except PreprocessError as e:
            # Records are keyed by the item; the preprocessor's finer location (e.g. "item 7,
            # image 2") goes into the detail.
            # Items with the same content share one preparation, so the error may name the
            # item that started it: keep only its finer location, under this item's label.
            finer = e.item.split(", ", 1)[1] if e.item and ", " in e.item else ""
            where = f"{label}, {finer}: " if finer else ""
            self.ledger.reject(label, e.reason, where + e.detail, error=e)
            return None
        except EpisodeRejected as e:
            self.ledger.reject(label, e.reason, e.detail, error=e)
            return None
        except PackingError:
            raise
        self.ledger.accept()
        return trajectory


def build_context(
    tokenizer: Any,
    processor: Any,
    gconfig: GenerationHyperparameters,
    *,
    reward: RewardCaller | None = None,
    preprocessor: Preprocessor | str | dict[str, Any] | None = None,
    enable_thinking: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    frames: FrameSampling | None = None,
    max_prompt_tokens: int | None = None,
) -> EpisodeContext:
    """An :class:`EpisodeContext` from a tokenizer and processor (objects or paths) and the
    preprocessing settings: how every workflow builds its context, and the evaluator too
    (``reward=None``: it scores completions with its task, not a reward)."""
    tok = load_tokenizer(tokenizer)
    proc, prep = build_preprocessor(
        tok,
        processor,
        preprocessor,
        enable_thinking=enable_thinking,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        frames=frames,
    )
    return EpisodeContext(
        tokenizer=tok,
        preprocessor=prep,
        gconfig=gconfig,
        reward=reward,
        processor=proc,
        max_prompt_tokens=max_prompt_tokens,
    )


class EpisodeWorkflow(RolloutWorkflow):
    """The base of every vlrollout workflow: owns the :class:`EpisodeContext`, checks processor
    parity once, runs ``_episode`` and records the outcome (a bad item or a failed step becomes
    ``None`` for AReaL plus a record in :attr:`ledger`).

    Text or vision preparation is picked from whether ``processor`` is given. Subclasses are the
    episode shapes (:class:`~vlrollout.workflows.SingleTurnWorkflow`,
    :class:`~vlrollout.workflows.MultiAttemptWorkflow`,
    :class:`~vlrollout.workflows.ToolUseWorkflow`); they implement ``_episode``.

    Args:
        reward_fn: AReaL-style reward ``(prompt, completions, prompt_ids, completion_ids,
            **task_data) -> float``, a registered reward name or an import path. ``prompt`` is
            the chat-templated prompt with each image written once, in every shape (see
            :meth:`EpisodeContext.reward_prompt`). Task data gets each image's ``geometry``
            (list of dicts) so grounding rewards can convert frames.
        gconfig: Generation settings (stop and pad token ids are added from the tokenizer).
        tokenizer: Tokenizer or a local path.
        processor: Multimodal processor or a local path; ``None`` for a text workflow.
        enable_thinking: Passed to the chat template.
        preprocessor: Builds the prompt: an object, a registered name or an import path; by
            default the chat template (text) or the one :mod:`vlrollout.processors` picks for
            ``processor``.
        min_pixels, max_pixels: Resize limits of the default vision preprocessor.
        frames: How the default vision preprocessor samples video frames (``None``: the
            family's defaults). Rewards of an item with videos get ``video_timing``: one dict
            per video, in prompt order, with its sampled frames' timestamps.
        reward_timeout_s: Seconds before an episode is rejected with ``reward_timeout``.
        max_prompt_tokens: Longer prompts are rejected with ``prompt_too_long``.
        share: A name for this workflow's state (context, prepared-prompt cache, ledger, one-time
            checks) when a caller builds a workflow per item, as AReaL's ``submit`` does with an
            import path and ``workflow_kwargs``: every workflow built with the same ``share``
            uses the state the first one built (:mod:`vlrollout.workflows.shared`; another
            configuration under the same name is refused). Build one more with the same arguments
            to read the run's :attr:`ledger`; ``vlrollout.workflows.shared.release(name)`` frees
            it. ``None``: this instance has its own state.
        episode_settings: A subclass's own settings of its episodes (turns, tools, feedback),
            part of the configuration ``share`` compares.
    """

    def __init__(
        self,
        reward_fn: Callable[..., float] | str,
        gconfig: GenerationHyperparameters,
        tokenizer: Any,
        processor: Any = None,
        enable_thinking: bool = False,
        *,
        preprocessor: Preprocessor | str | dict[str, Any] | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        frames: FrameSampling | None = None,
        reward_timeout_s: float = 15.0,
        max_prompt_tokens: int | None = None,
        share: str | None = None,
        episode_settings: dict[str, Any] | None = None,
    ) -> None:
        reward = named_box_reward(reward_fn, processor)

        def build() -> EpisodeContext:
            return build_context(
                tokenizer,
                processor,
                gconfig,
                reward=RewardCaller(reward, timeout_s=reward_timeout_s),
                preprocessor=preprocessor,
                enable_thinking=enable_thinking,
                min_pixels=min_pixels,
                max_pixels=max_pixels,
                frames=frames,
                max_prompt_tokens=max_prompt_tokens,
            )

        if share is None:
            self.ctx = build()
            return
        settings = {
            "preprocessor": preprocessor,
            "min_pixels": min_pixels,
            "max_pixels": max_pixels,
            "frames": frames,
            "reward_timeout_s": reward_timeout_s,
            "max_prompt_tokens": max_prompt_tokens,
            **(episode_settings or {}),
        }
        key, refs = config_key(
            type(self), (reward_fn, gconfig, tokenizer, processor, enable_thinking), settings
        )
        self.ctx = shared_state(share, key, refs, build)

    @property
    def ledger(self) -> EpisodeLedger:
        return self.ctx.ledger

    async def arun_episode(self, engine: Any, data: dict[str, Any]) -> dict[str, Any] | None:
        if not isinstance(data, Mapping):
            raise TypeError(
                "a data item is a dict (messages or a prompt, images, task fields), "
                f"got {type(data).__name__}: {str(data)[:80]!r}"
            )
        self.ctx.check_parity_once(engine)
        held: list[tuple[PreparedPromptCache, str]] = []
        token = _HELD.set(held)
        ahead = ENCODE_ENGINE_IMAGES_AHEAD.set(reads_image_data(engine))
        try:
            return await self.ctx.run_recorded(data, lambda: self._checked_episode(engine, data))
        finally:
            ENCODE_ENGINE_IMAGES_AHEAD.reset(ahead)
            _HELD.reset(token)
            for cache, key in held:
                cache.release(key)

    async def _checked_episode(self, engine: Any, data: dict[str, Any]) -> dict[str, Any]:
        """:meth:`_episode` of an item whose fields can reach the reward (checked before any
        generation: a clash would fail every completion's reward after it was generated)."""
        clash = reward_argument_clash(data)
        if clash is not None:
            raise EpisodeRejected("reserved_field", clash)
        return await self._episode(engine, data)

    async def _episode(self, engine: Any, data: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


def named_box_reward(reward_fn: Any, processor: Any) -> Any:
    """A built-in box reward named by ``reward_fn`` (``"iou"``, ``"giou"``, ...), built to read
    boxes as ``processor``'s model family writes them (its box parser,
    :func:`vlrollout.rewards.box_parsing.get_parser`); any other ``reward_fn`` as it is.
    Without it the name would read Qwen2.5-VL's pixel boxes whatever the model writes.

    Raises:
        ValueError: the family writes no box convention of its own (the message says to name a
            reward built with the convention the model writes).
    """
    if not isinstance(reward_fn, str) or reward_fn not in BOX_REWARDS or processor is None:
        return reward_fn
    if isinstance(processor, str | os.PathLike):  # a model folder, as AReaL configs name it
        family = family_name_at(str(processor))
    else:
        family = adapter_for(processor).name
    return get_reward(reward_fn, family=family)


def reads_image_data(engine: Any) -> bool:
    """Whether ``engine`` sends a request's ``image_data``/``vision_msg_vllm`` (AReaL's SGLang
    and vLLM clients, any engine not marked otherwise) rather than reading the prepared tensors
    (an engine with ``reads_multi_modal_input = True``, as vlrollout's local engine)."""
    return not getattr(engine, "reads_multi_modal_input", False)


def log_reward(**scalars: float) -> None:
    """Report episode scalars to AReaL's stats tracker in the current rollout scope."""
    stats_tracker.get(workflow_context.stat_scope()).scalar(**scalars)
