"""Single-turn workflows: one prompt, one completion, one reward (the RLVR pattern).

Text and vision differ only in the preprocessor: ``RLVRWorkflow`` uses the tokenizer's chat
template, ``VisionRLVRWorkflow`` a multimodal processor. Both are importable by string path
(``vlrollout.workflows.VisionRLVRWorkflow``) the way AReaL configs name workflows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from areal.api import InferenceEngine
from areal.api.cli_args import GenerationHyperparameters
from areal.utils.perf_tracer import session_context

from vlrollout.packaging import pack_single_turn
from vlrollout.processors.base import Preprocessor
from vlrollout.workflows.episode import (
    EpisodeContext,
    EpisodeWorkflow,
    load_tokenizer,
    log_reward,
    text_preprocessor,
)
from vlrollout.workflows.steps import RewardCaller, build_request, generate
from vlrollout.workflows.vision import build_vision_preprocessor


class SingleTurnWorkflow(EpisodeWorkflow):
    """Prepare → generate once → reward → pack.

    Args:
        reward_fn: AReaL-style reward ``(prompt, completions, prompt_ids, completion_ids,
            **task_data) -> float`` or its import path. ``prompt`` is the chat-templated prompt
            with each image written once (see :meth:`EpisodeContext.reward_prompt`). Task data
            gets each image's ``geometry`` (list of dicts) so grounding rewards can convert frames.
        gconfig: Generation settings (``n_samples`` is forced to 1: AReaL groups episodes).
        tokenizer: Tokenizer or a local path.
        preprocessor: Builds the prompt; see :mod:`vlrollout.processors`.
        processor: Multimodal processor sent along with requests (``None`` for text).
        reward_timeout_s: Seconds before an episode is rejected with ``reward_timeout``.
        max_prompt_tokens: Longer prompts are rejected with ``prompt_too_long``.
    """

    def __init__(
        self,
        reward_fn: Callable[..., float] | str,
        gconfig: GenerationHyperparameters,
        tokenizer: Any,
        preprocessor: Preprocessor,
        processor: Any = None,
        reward_timeout_s: float = 15.0,
        max_prompt_tokens: int | None = None,
    ) -> None:
        tokenizer = load_tokenizer(tokenizer)
        self.ctx = EpisodeContext(
            tokenizer=tokenizer,
            preprocessor=preprocessor,
            gconfig=gconfig,
            reward=RewardCaller(reward_fn, timeout_s=reward_timeout_s),
            processor=processor,
            max_prompt_tokens=max_prompt_tokens,
        )

    @session_context()
    async def _episode(self, engine: InferenceEngine, data: dict[str, Any]) -> dict[str, Any]:
        ctx = self.ctx
        prepared = await ctx.prepare(data)
        req = build_request(prepared, ctx.gconfig, ctx.tokenizer, ctx.processor)
        resp = await generate(engine, req)
        reward = await ctx.reward(
            prepared.prompt_text,
            ctx.decode_completion(resp.output_tokens),
            resp.input_tokens,
            resp.output_tokens,
            data,
            geometry=[g.to_dict() for g in prepared.geometry],
        )
        log_reward(reward=reward)
        return pack_single_turn(
            prepared.input_ids,
            resp,
            reward,
            multi_modal_input=prepared.multi_modal_input,
            mm_token_type_ids=prepared.mm_token_type_ids,
        )


class RLVRWorkflow(SingleTurnWorkflow):
    """Text single-turn workflow: the chat template of ``tokenizer`` builds the prompt."""

    def __init__(
        self,
        reward_fn: Callable[..., float] | str,
        gconfig: GenerationHyperparameters,
        tokenizer: Any,
        enable_thinking: bool = False,
        preprocessor: Preprocessor | None = None,
        **kwargs: Any,
    ) -> None:
        tokenizer = load_tokenizer(tokenizer)
        preprocessor = preprocessor or text_preprocessor(tokenizer, enable_thinking)
        super().__init__(reward_fn, gconfig, tokenizer, preprocessor, **kwargs)


class VisionRLVRWorkflow(SingleTurnWorkflow):
    """Vision single-turn workflow: a multimodal processor builds prompt and image tensors.

    Args:
        processor: A transformers processor or a local path to one.
        preprocessor: A custom preprocessor, its registered name or import path; by default the
            one :mod:`vlrollout.processors` picks for ``processor``.
        min_pixels, max_pixels: Resize limits passed to the processor's own arguments.
    """

    def __init__(
        self,
        reward_fn: Callable[..., float] | str,
        gconfig: GenerationHyperparameters,
        tokenizer: Any,
        processor: Any,
        enable_thinking: bool = False,
        preprocessor: Preprocessor | str | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        **kwargs: Any,
    ) -> None:
        processor, preprocessor = build_vision_preprocessor(
            processor,
            preprocessor,
            enable_thinking=enable_thinking,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
        )
        super().__init__(reward_fn, gconfig, tokenizer, preprocessor, processor=processor, **kwargs)
