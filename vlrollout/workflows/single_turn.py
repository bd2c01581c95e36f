"""Single-turn workflow: one prompt, one completion, one reward (the RLVR pattern).

Text and vision differ only in the preparation :class:`~vlrollout.workflows.episode.EpisodeWorkflow`
picks (a processor given or not). ``RLVRWorkflow`` and ``VisionRLVRWorkflow`` are AReaL's names for
the same shape, kept so AReaL configs naming ``vlrollout.workflows.VisionRLVRWorkflow`` work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from areal.api import InferenceEngine
from areal.api.cli_args import GenerationHyperparameters
from areal.utils.perf_tracer import session_context

from vlrollout.packaging import pack_single_turn
from vlrollout.workflows.episode import EpisodeWorkflow, log_reward
from vlrollout.workflows.steps import (
    build_request,
    check_engine_takes_videos,
    generate,
    reward_task_data,
)


class SingleTurnWorkflow(EpisodeWorkflow):
    """Prepare → generate once → reward → pack. Arguments: see
    :class:`~vlrollout.workflows.episode.EpisodeWorkflow` (text without ``processor``, vision with
    one)."""

    @session_context()
    async def _episode(self, engine: InferenceEngine, data: dict[str, Any]) -> dict[str, Any]:
        ctx = self.ctx
        prepared = await ctx.prepare(data)
        check_engine_takes_videos(engine, prepared)
        req = build_request(prepared, ctx.gconfig, ctx.tokenizer, ctx.processor)
        resp = await generate(engine, req, prepared.placeholder_ids)
        reward = await ctx.reward(
            prepared.prompt_text,
            ctx.decode_completion(resp.output_tokens),
            resp.input_tokens,
            resp.output_tokens,
            reward_task_data(data, prepared),
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
    """AReaL's name and argument order (``reward_fn, gconfig, tokenizer, enable_thinking``) for
    the text single-turn workflow."""

    def __init__(
        self,
        reward_fn: Callable[..., float] | str,
        gconfig: GenerationHyperparameters,
        tokenizer: Any,
        enable_thinking: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(reward_fn, gconfig, tokenizer, enable_thinking=enable_thinking, **kwargs)


VisionRLVRWorkflow = SingleTurnWorkflow
"""AReaL's name for the vision single-turn workflow; AReaL's argument order
``(reward_fn, gconfig, tokenizer, processor, ...)`` is :class:`SingleTurnWorkflow`'s."""
