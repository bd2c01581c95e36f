"""Multi-attempt workflows: retry with a feedback message until the reward is positive.

The whole conversation is one trajectory: the prompt, each attempt (loss on), and each feedback
message (loss off). The final reward is the last attempt's reward times ``turn_discount`` per
extra attempt, as in AReaL's ``MultiTurnWorkflow``; a negative reward (``giou``) is discounted
too, so it grows less negative with failed attempts (shift such a reward to be non-negative, or
keep ``turn_discount`` at 1).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

from areal.api import InferenceEngine
from areal.api.cli_args import GenerationHyperparameters
from areal.utils.hf_utils import apply_chat_template
from areal.utils.perf_tracer import session_context

from vlrollout.argtypes import check_count
from vlrollout.packaging import TrajectoryBuilder
from vlrollout.processors.turns import special_token_texts, turn_end_token_id
from vlrollout.workflows.episode import EpisodeWorkflow, log_reward
from vlrollout.workflows.steps import (
    build_request,
    capped_gconfig,
    check_engine_takes_videos,
    close_turn_tokens,
    context_full,
    generate,
    reward_task_data,
)

DEFAULT_FEEDBACK = (
    "Your answer is either wrong or not parsable to the reward function. "
    "Please carefully read the question, check your previous answer, and try again."
)


def feedback_token_ids(tokenizer: Any, feedback: str) -> list[int]:
    """Tokens that follow an assistant turn's end-of-turn token up to the next generation prompt.

    Derived from the chat template itself (render a conversation with and without the feedback
    turn and take the difference after the assistant's end token, :func:`turn_end_token_id`),
    so the packed sequence is exactly what the template would produce for the whole
    conversation — including the newline after ``<|im_end|>`` that AReaL's ``MultiTurnWorkflow``
    drops. A template that ends turns with plain text (LLaVA-1.5) gets what follows the
    rendered turn, after the eos token the model stops on.
    """
    eos = turn_end_token_id(tokenizer)
    first = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    s1 = apply_chat_template(tokenizer, first, tokenize=True)
    s2 = apply_chat_template(
        tokenizer,
        first + [{"role": "user", "content": feedback}],
        tokenize=True,
        add_generation_prompt=True,
    )
    # The last end-of-turn token of the assistant turn, or (none written) the turn's last token.
    end = len(s1) - 1 - s1[::-1].index(eos) if eos in s1 else len(s1) - 1
    if s2[: end + 1] != s1[: end + 1]:
        raise ValueError("the chat template renders the first turns differently with feedback")
    return s2[end + 1 :]


class MultiAttemptWorkflow(EpisodeWorkflow):
    """Retry until reward > 0 or ``max_turns`` attempts; pack all attempts in one trajectory.

    The argument order is AReaL's ``MultiTurnWorkflow``'s; text without ``processor``, vision
    with one (images stay in the prompt; feedback turns are text).

    Args:
        reward_fn, gconfig, tokenizer, processor: As in
            :class:`~vlrollout.workflows.episode.EpisodeWorkflow`.
        max_turns: Maximum number of attempts (>= 1).
        turn_discount: Reward factor per extra attempt, in (0, 1].
        feedback: The message appended after a failed attempt.
        max_total_tokens: Context limit for the prompt and every attempt; ``None`` for none.
            An attempt's ``max_new_tokens`` is capped to the room left, and the episode ends
            (with its last attempt's reward) when the feedback would leave no room for another:
            an engine asked for more than its context refuses the request, and the whole episode
            is lost as an engine error.
        **kwargs: The keyword arguments of :class:`~vlrollout.workflows.episode.EpisodeWorkflow`.
    """

    def __init__(
        self,
        reward_fn: Callable[..., float] | str,
        gconfig: GenerationHyperparameters,
        tokenizer: Any,
        max_turns: int,
        turn_discount: float,
        processor: Any = None,
        *,
        feedback: str = DEFAULT_FEEDBACK,
        max_total_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        check_count("max_turns", max_turns, 1)
        if max_total_tokens is not None:
            check_count("max_total_tokens", max_total_tokens, 2)
        if isinstance(turn_discount, bool) or not isinstance(turn_discount, numbers.Real):
            raise TypeError(f"turn_discount must be a number, got {turn_discount!r}")
        if not isinstance(feedback, str):
            raise TypeError(f"feedback must be a str, got {type(feedback).__name__}")
        if not 0.0 < turn_discount <= 1.0:
            raise ValueError(f"turn_discount must be in (0, 1], got {turn_discount}")
        own = {
            "max_turns": max_turns,
            "turn_discount": turn_discount,
            "feedback": feedback,
            "max_total_tokens": max_total_tokens,
        }
        if max_total_tokens is not None:  # a prompt with no room for one token is too long
            kwargs.setdefault("max_prompt_tokens", max_total_tokens - 1)
        super().__init__(reward_fn, gconfig, tokenizer, processor, episode_settings=own, **kwargs)
        self.max_turns = max_turns
        self.max_total_tokens = max_total_tokens
        self.turn_discount = turn_discount
        special = [t for t in special_token_texts(self.ctx.tokenizer) if t in feedback]
        if special:
            raise ValueError(
                f"feedback holds the special token text {special[0]!r}, which the tokenizer reads "
                "as the token itself (an image placeholder, a turn's end); write it without"
            )
        self.feedback = feedback
        self.feedback_ids = feedback_token_ids(self.ctx.tokenizer, feedback)
        self.turn_end_id = turn_end_token_id(self.ctx.tokenizer)

    def _between_turns(self, output_tokens: Sequence[int]) -> list[int]:
        """Observation tokens after a failed attempt: eos if the attempt was cut off, then feedback."""
        return close_turn_tokens(output_tokens, self.turn_end_id) + self.feedback_ids

    @session_context()
    async def _episode(self, engine: InferenceEngine, data: dict[str, Any]) -> dict[str, Any]:
        ctx = self.ctx
        prepared = await ctx.prepare(data)
        check_engine_takes_videos(engine, prepared)
        builder = TrajectoryBuilder.from_prepared(prepared)
        geometry = [g.to_dict() for g in prepared.geometry]
        task_data = reward_task_data(data, prepared)
        # vLLM re-renders the conversation from messages, so they grow with the token sequence
        # (appended to the prompt's messages only when an engine reads them).
        later_messages: list[dict[str, Any]] = []
        reward, discount = 0.0, 1.0
        for turn in range(self.max_turns):
            if turn > 0:
                discount *= self.turn_discount
            req = build_request(
                prepared,
                capped_gconfig(ctx.gconfig, self.max_total_tokens, len(builder.token_ids)),
                ctx.tokenizer,
                ctx.processor,
                builder.token_ids,
                later_messages=later_messages,
            )
            resp = await generate(engine, req, prepared.placeholder_ids)
            builder.add_generated(resp)
            reward = await ctx.reward(
                ctx.reward_prompt(resp.input_tokens, prepared.image_token_id),
                ctx.decode_completion(resp.output_tokens),
                resp.input_tokens,
                resp.output_tokens,
                task_data,
                geometry=geometry,
            )
            if reward > 0 or turn == self.max_turns - 1:
                break
            observation = self._between_turns(resp.output_tokens)
            if context_full(self.max_total_tokens, len(builder.token_ids) + len(observation)):
                break  # no room for another attempt: the episode ends at this one
            builder.add_observation(observation)
            later_messages += [
                {"role": "assistant", "content": ctx.decode_completion(resp.output_tokens)},
                {"role": "user", "content": self.feedback},
            ]
        final = float(reward * discount)
        log_reward(reward=final, num_turns=builder.num_generated_turns)
        return builder.build(final)


class VisionMultiAttemptWorkflow(MultiAttemptWorkflow):
    """The vision argument order ``(reward_fn, gconfig, tokenizer, processor, max_turns,
    turn_discount, ...)`` for :class:`MultiAttemptWorkflow`."""

    def __init__(
        self,
        reward_fn: Callable[..., float] | str,
        gconfig: GenerationHyperparameters,
        tokenizer: Any,
        processor: Any,
        max_turns: int,
        turn_discount: float,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            reward_fn, gconfig, tokenizer, max_turns, turn_discount, processor, **kwargs
        )
