"""Agentic vision workflow: the model calls image tools (zoom, crop, rotate, ...) between turns.

One episode is one trajectory: the prompt, then alternating generated turns (loss on) and tool
observations (loss off, images included), packed by :class:`~vlrollout.packaging.TrajectoryBuilder`.
Every request's ``input_ids`` is the trajectory so far, its ``image_data`` every image so far, and
``metadata["multi_modal_input"]`` the concatenated image tensors, so the engine and the trainer see
the same tokens and pixels. Observation tokens come from the chat template and the processor
(:mod:`vlrollout.tools.observation`), never from re-tokenising decoded text.

The episode ends at the first turn without ``<tool_call>`` (the final answer), after ``max_turns``
generated turns, or at the context limit ``max_total_tokens``: the request's ``max_new_tokens``
is capped to the room left, and a tool observation that would leave no room to generate is not
appended (the episode ends on the generated turn, whose tools did run). Calls in the last allowed
turn are not run. The reward always scores the last generated turn; ``stop_reason`` tells it why
the episode ended (a turn without a call that the context limit cut short is ``context_limit``), and the built-in rewards read that turn without its tool calls
(:func:`vlrollout.rewards.text_extract.without_tool_calls`): an episode that ends on
``max_turns`` mid-call has no answer, not the call's ``zoom_in`` box.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from areal.api import InferenceEngine
from areal.api.cli_args import GenerationHyperparameters
from areal.utils.perf_tracer import session_context

from vlrollout.argtypes import check_count
from vlrollout.geometry import Frame
from vlrollout.packaging import TrajectoryBuilder
from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.processors.base import PreparedPrompt, Preprocessor
from vlrollout.processors.messages import normalize_messages
from vlrollout.tools import (
    Tool,
    ToolContext,
    has_tool_call,
    parse_tool_calls,
    resolve_tools,
    run_tool_calls,
)
from vlrollout.tools.observation import Observation, ObservationEncoder, vllm_message
from vlrollout.workflows.episode import EpisodeWorkflow, log_reward
from vlrollout.workflows.preparation import FrameSampling
from vlrollout.workflows.steps import (
    build_request,
    capped_gconfig,
    check_engine_takes_videos,
    close_turn_tokens,
    context_full,
    generate,
    reward_task_data,
)

DEFAULT_TOOLS = ("zoom_in", "rotate", "image_info")

BOX_FRAMES = {"qwen2_vl": "norm1000", "qwen3_vl": "norm1000", "qwen2_5_vl": "model"}
"""Box convention per processor family (model cards: Qwen2-VL and Qwen3-VL 0-1000 normalised,
Qwen2.5-VL pixels of the resized image); other families default to ``norm1000``."""


@dataclass
class _Episode:
    """Per-episode state besides the builder: images, texts and counters."""

    prepared: PreparedPrompt
    prompt_messages: list[dict[str, Any]]
    tools: ToolContext
    image_data: list[str]
    conversation: list[str] = field(default_factory=list)
    vllm_turns: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: int = 0
    tool_errors: int = 0
    stop_reason: str = "answer"

    def add_turn(self, text: str) -> None:
        self.conversation.append(text)
        self.vllm_turns.append({"role": "assistant", "content": text})

    def add_observation(self, obs: Observation, role: str) -> None:
        self.conversation.append(obs.text)
        self.vllm_turns.append(vllm_message(obs, role))
        for image, geometry in zip(obs.images, obs.geometry, strict=True):
            self.tools.add_image(image.image, geometry)
        self.image_data.extend(obs.image_data)

    def request_prompt(self) -> PreparedPrompt:
        """The prepared prompt with the whole conversation as vLLM messages (AReaL's vLLM client
        sends ``vision_msg_vllm`` instead of ``input_ids``)."""
        if not self.image_data:
            return self.prepared
        messages = list(self.prepared.vision_msg_vllm or self.prompt_messages)
        return replace(self.prepared, vision_msg_vllm=messages + self.vllm_turns)


class ToolUseWorkflow(EpisodeWorkflow):
    """Multi-turn vision workflow with tools; see the module docstring for the episode loop.

    Args:
        reward_fn: AReaL-style reward or its import path. It gets ``prompt`` = the text the last
            turn continues (the earlier turns and tool answers included), ``completions`` = the last
            turn's text, and in task data: ``conversation`` (list of str: model turns at even
            indices, tool observations at odd ones, images as ``<image>``), ``geometry`` of every
            image (prompt images first, then tool images in order), ``tool_calls``,
            ``tool_errors`` and ``stop_reason`` (``"answer"``, ``"max_turns"``,
            ``"context_limit"``). These keys override data fields of the same name.
        gconfig: Generation settings.
        tokenizer: Tokenizer or a local path.
        processor: The multimodal processor (or a local path).
        tools: :class:`~vlrollout.tools.Tool` objects, registered names or import paths.
        max_turns: Most generated turns per episode (>= 1).
        preprocessor: Prompt preprocessor (object, name or import path). Tool images are encoded
            with it when it is an :class:`AutoProcessorPreprocessor`, else with a default one for
            ``processor``.
        min_pixels, max_pixels: Pixel budget of the default preprocessor (prompt and tool images).
        frames: Frame sampling of the prompt's videos (``None``: the family's defaults).
        max_total_tokens: Context limit for prompt + all turns; ``None`` for no limit.
        reward_timeout_s: Seconds before an episode is rejected with ``reward_timeout``.
        enable_thinking: Passed to the chat template.
        box_frame: Override the box convention tools read (``BOX_FRAMES`` by family otherwise).
        tool_role: Role of tool turns in the chat template (``"user"``, as Qwen2.5 renders them).
        max_calls_per_turn: Calls run per turn; further calls get an error.
        share: Name of a shared state, as in :class:`~vlrollout.workflows.episode.EpisodeWorkflow`.

    Example (``tests/workflows/test_tool_use.py`` runs this with a scripted engine)::

        wf = ToolUseWorkflow("my.rewards.answer", gconfig, tokenizer, processor,
                             tools=["zoom_in", "rotate"], max_turns=4, max_total_tokens=4096)
        trajectory = await wf.arun_episode(engine, item)
    """

    def __init__(
        self,
        reward_fn: Callable[..., float] | str,
        gconfig: GenerationHyperparameters,
        tokenizer: Any,
        processor: Any,
        tools: Sequence[Tool | str] | Mapping[str, Tool] = DEFAULT_TOOLS,
        max_turns: int = 4,
        preprocessor: Preprocessor | str | dict[str, Any] | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        max_total_tokens: int | None = None,
        reward_timeout_s: float = 15.0,
        *,
        enable_thinking: bool = False,
        box_frame: str | None = None,
        tool_role: str = "user",
        max_calls_per_turn: int = 4,
        frames: FrameSampling | None = None,
        share: str | None = None,
    ) -> None:
        if processor is None:
            raise ValueError("a tool workflow needs a multimodal processor (tools return images)")
        check_count("max_turns", max_turns, 1)
        if max_total_tokens is not None:
            check_count("max_total_tokens", max_total_tokens, 2)
        check_count("max_calls_per_turn", max_calls_per_turn, 1)
        if box_frame is not None and box_frame not in set(Frame):
            raise ValueError(f"box_frame {box_frame!r} is no frame; one of {', '.join(Frame)}")
        self.tools = resolve_tools(tools)
        super().__init__(
            reward_fn,
            gconfig,
            tokenizer,
            processor,
            enable_thinking,
            preprocessor=preprocessor,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            frames=frames,
            reward_timeout_s=reward_timeout_s,
            max_prompt_tokens=None if max_total_tokens is None else max_total_tokens - 1,
            share=share,
            episode_settings={
                "tools": tools,
                "max_turns": max_turns,
                "max_total_tokens": max_total_tokens,
                "max_calls_per_turn": max_calls_per_turn,
                "box_frame": box_frame,
                "tool_role": tool_role,
            },
        )
        self.max_turns = max_turns
        self.max_total_tokens = max_total_tokens
        self.max_calls_per_turn = max_calls_per_turn
        self.tool_role = tool_role
        observer = self.ctx.preprocessor
        if not isinstance(observer, AutoProcessorPreprocessor):
            observer = AutoProcessorPreprocessor(
                self.ctx.processor, chat_template_kwargs={"enable_thinking": enable_thinking}
            )
        self.encoder = ObservationEncoder(observer, role=tool_role)
        self.box_frame = box_frame or BOX_FRAMES.get(observer.family, "norm1000")

    def _observe(self, ep: _Episode, text: str, output_tokens: Sequence[int]) -> Observation:
        """Run the turn's tool calls and encode the observation (CPU work: called in a thread)."""
        outcomes = run_tool_calls(
            parse_tool_calls(text), self.tools, ep.tools, self.max_calls_per_turn
        )
        close = bool(close_turn_tokens(output_tokens, self.encoder.eos_token_id))
        return self.encoder.encode(outcomes, ep.tools.num_images, close_turn=close)

    @session_context()
    async def _episode(self, engine: InferenceEngine, data: dict[str, Any]) -> dict[str, Any]:
        ctx = self.ctx
        prepared = await ctx.prepare(data)
        check_engine_takes_videos(engine, prepared)
        builder = TrajectoryBuilder.from_prepared(prepared)
        ep = _Episode(
            prepared,
            [] if prepared.vision_msg_vllm or prepared.videos else _text_messages(data),
            ToolContext(prepared.image_data, prepared.geometry, self.box_frame),
            list(prepared.image_data),
        )
        for turn in range(self.max_turns):
            req = build_request(
                ep.request_prompt(),
                capped_gconfig(ctx.gconfig, self.max_total_tokens, len(builder.token_ids)),
                ctx.tokenizer,
                ctx.processor,
                input_ids=builder.token_ids,
                multi_modal_inputs=builder.multi_modal_inputs,
                image_data=ep.image_data,
            )
            resp = await generate(engine, req, ep.prepared.placeholder_ids)
            builder.add_generated(resp)
            text = ctx.decode_completion(resp.output_tokens)
            ep.add_turn(text)
            if not has_tool_call(text):  # an answer, unless the token cap cut the turn short
                cut = resp.stop_reason == "length"
                full = cut and context_full(self.max_total_tokens, len(builder.token_ids))
                ep.stop_reason = "context_limit" if full else "answer"
                break
            if turn == self.max_turns - 1:
                ep.stop_reason = "max_turns"
                break
            if context_full(self.max_total_tokens, len(builder.token_ids)):
                ep.stop_reason = "context_limit"
                break
            obs = await asyncio.to_thread(self._observe, ep, text, resp.output_tokens)
            ep.tool_calls += len(obs.outcomes)
            ep.tool_errors += obs.num_errors
            if context_full(self.max_total_tokens, len(builder.token_ids) + len(obs.token_ids)):
                ep.stop_reason = "context_limit"
                break
            builder.add_observation(obs.token_ids, obs.multi_modal_input, obs.mm_token_type_ids)
            ep.add_observation(obs, self.tool_role)
        task_data = {
            **reward_task_data(data, prepared),
            "conversation": list(ep.conversation),
            "tool_calls": ep.tool_calls,
            "tool_errors": ep.tool_errors,
            "stop_reason": ep.stop_reason,
        }
        reward = await ctx.reward(
            ctx.reward_prompt(resp.input_tokens, prepared.image_token_id),
            ep.conversation[-1],
            resp.input_tokens,
            resp.output_tokens,
            task_data,
            geometry=[g.to_dict() for g in ep.tools.geometry],
        )
        log_reward(
            reward=reward,
            num_turns=builder.num_generated_turns,
            tool_calls=ep.tool_calls,
            tool_errors=ep.tool_errors,
        )
        return builder.build(reward)


def _text_messages(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A text-only prompt's messages (vLLM needs them once a tool adds an image). A prompt with
    videos has none: only the embedded engine, which reads the tensors, runs video items."""
    messages, _ = normalize_messages(data["messages"], None, "prompt")
    return messages


VisionToolWorkflow = ToolUseWorkflow
"""The name ``vlrollout run``'s ``vision_tool`` workflow and earlier configs use."""
