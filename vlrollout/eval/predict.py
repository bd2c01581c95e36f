"""Predictions from any AReaL inference engine, prepared and decoded as the workflows do.

:class:`EnginePredictor` is a thin layer over the single-turn workflow's
:class:`~vlrollout.workflows.episode.EpisodeContext`: the same preprocessor (and prepared-prompt
cache), the same ``prompt_too_long`` check, the same request (:func:`build_request`), engine call
(:func:`generate`) and decoding (:meth:`EpisodeContext.decode_completion`), so a completion scored
here is the text a reward would have scored in ``vlrollout run``, and a bad item is rejected with
the reason ``run`` records for it. :func:`prepared_or_rejected` is that shared front half, also
used by :class:`~vlrollout.eval.openai_client.OpenAIPredictor`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from areal.api import InferenceEngine
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.datasets import LOAD_ERROR
from vlrollout.eval.prediction import Prediction
from vlrollout.ledger import EpisodeRejected
from vlrollout.processors.auto import item_label
from vlrollout.processors.base import PreparedPrompt, Preprocessor
from vlrollout.processors.errors import PreprocessError
from vlrollout.workflows.episode import EpisodeContext, build_context
from vlrollout.workflows.preparation import FrameSampling
from vlrollout.workflows.steps import build_request, check_engine_takes_videos, generate

Run = Callable[[PreparedPrompt, list[dict[str, Any]]], Awaitable[Prediction]]


def item_id(item: Any) -> str:
    """The prediction's id: the item's ``id`` as a string, else its label (``"item"``)."""
    if isinstance(item, dict) and item.get("id") is not None:
        return str(item["id"])
    return item_label(item) if isinstance(item, dict) else "item"


def greedy_gconfig(gconfig: GenerationHyperparameters) -> GenerationHyperparameters:
    """Greedy decoding as the training's held-out evaluation sets it: ``greedy=True`` (our engine
    takes the argmax; AReaL's remote clients send temperature 0), one sample, the length limits
    and stops of ``gconfig``; its sampling knobs (temperature, top-p/k, penalties) are dropped,
    since the argmax does not read them."""
    return GenerationHyperparameters(
        n_samples=1,
        greedy=True,
        max_new_tokens=gconfig.max_new_tokens,
        max_tokens=gconfig.max_tokens,
        stop_token_ids=list(gconfig.stop_token_ids or []),
        stop=list(gconfig.stop) if gconfig.stop else None,
    )


def check_k(k: int) -> None:
    """``k`` is the number of completions per item: a whole number >= 1."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (completions per item) must be a whole number >= 1, got {k!r}")


def preprocess_rejection(label: str, e: PreprocessError) -> str:
    """The detail ``run`` records for a ``PreprocessError``: this item's label plus the
    preprocessor's finer location (``image 2``), whichever item started a shared preparation."""
    finer = e.item.split(", ", 1)[1] if e.item and ", " in e.item else ""
    return (f"{label}, {finer}: " if finer else "") + e.detail


async def prepared_or_rejected(ctx: EpisodeContext, item: Any, run: Run) -> Prediction:
    """Prepare ``item`` with ``ctx`` and pass the prompt and its geometry to ``run``; a bad item or
    a rejected step (``PreprocessError``, ``EpisodeRejected``, a ``LOAD_ERROR`` placeholder)
    becomes a rejected :class:`Prediction` with its reason. Anything else is a bug and raises."""
    ident = item_id(item)
    if not isinstance(item, dict):
        return Prediction.rejected(
            ident, "bad_item", f"item is a {type(item).__name__}, not a dict"
        )
    if LOAD_ERROR in item:
        error = item[LOAD_ERROR]
        return Prediction.rejected(ident, error["reason"], error["detail"])
    geometry: list[dict[str, Any]] = []
    try:
        prepared = await ctx.prepare(item)
        geometry = [g.to_dict() for g in prepared.geometry]
        return await run(prepared, geometry)
    except PreprocessError as e:
        return Prediction.rejected(ident, e.reason, preprocess_rejection(item_label(item), e))
    except EpisodeRejected as e:
        return Prediction.rejected(ident, e.reason, e.detail, geometry)


def episode_context(
    tokenizer: Any,
    processor: Any,
    gconfig: GenerationHyperparameters,
    *,
    preprocessor: Preprocessor | str | dict[str, Any] | None = None,
    enable_thinking: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    frames: FrameSampling | None = None,
    max_prompt_tokens: int | None = None,
) -> EpisodeContext:
    """The single-turn workflow's context, built as :class:`EpisodeWorkflow` builds it, without
    a reward (the evaluator scores with its task), one sample per request."""
    return build_context(
        tokenizer,
        processor,
        gconfig.new(n_samples=1),
        preprocessor=preprocessor,
        enable_thinking=enable_thinking,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        frames=frames,
        max_prompt_tokens=max_prompt_tokens,
    )


class EnginePredictor:
    """Completions from an AReaL ``InferenceEngine``: our embedded engine
    (:func:`vlrollout.engine.factory.make_engine`), AReaL's ``RemoteSGLangEngine`` /
    ``RemotevLLMEngine`` pointed at a server (``vlrollout serve``), or the training engine.

    ``k == 1`` decodes greedily (:func:`greedy_gconfig`); ``k > 1`` sends ``k`` requests sampled
    with ``gconfig`` (our engine generates one sequence per request, so ``n_samples`` is never
    used), concurrently.

    Args:
        engine: An initialised inference engine.
        tokenizer: Tokenizer or local path.
        processor: Multimodal processor or local path (``None``: text items).
        gconfig: Generation settings: the length limits for greedy, and the sampling for k > 1.
        preprocessor, min_pixels, max_pixels, frames, enable_thinking: How prompts are built,
            as for the workflows (:func:`vlrollout.workflows.preparation.build_preprocessor`).
        max_prompt_tokens: Longer prompts are rejected with ``prompt_too_long``.
    """

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: Any,
        processor: Any,
        *,
        gconfig: GenerationHyperparameters,
        preprocessor: Preprocessor | str | dict[str, Any] | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        frames: FrameSampling | None = None,
        max_prompt_tokens: int | None = None,
        enable_thinking: bool = False,
    ) -> None:
        self.engine = engine
        self.ctx = episode_context(
            tokenizer,
            processor,
            gconfig,
            preprocessor=preprocessor,
            enable_thinking=enable_thinking,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            frames=frames,
            max_prompt_tokens=max_prompt_tokens,
        )
        self.greedy = greedy_gconfig(gconfig).new_with_stop_and_pad_token_ids(self.ctx.tokenizer)
        self.sampled = self.ctx.gconfig.new(greedy=False)

    async def predict(self, item: dict[str, Any], k: int = 1) -> Prediction:
        """``k`` completions of ``item`` (greedy when ``k == 1``), or why it could not be run.

        Raises:
            ValueError: ``k`` is not >= 1, or ``k > 1`` with a temperature of 0 (every sample
                would be the greedy one).
        """
        check_k(k)
        if k > 1 and self.sampled.temperature == 0:
            raise ValueError(f"k={k} samples need a temperature > 0; gconfig has temperature 0")
        self.ctx.check_parity_once(self.engine)

        async def run(prepared: PreparedPrompt, geometry: list[dict[str, Any]]) -> Prediction:
            check_engine_takes_videos(self.engine, prepared)
            gconfig = self.greedy if k == 1 else self.sampled
            ctx = self.ctx
            calls = [
                generate(
                    self.engine, build_request(prepared, gconfig, ctx.tokenizer, ctx.processor)
                )
                for _ in range(k)
            ]
            results = await asyncio.gather(*calls, return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            return Prediction(
                id=item_id(item),
                completions=[ctx.decode_completion(r.output_tokens) for r in results],
                geometry=geometry,
                rejection=None,
                prompt_tokens=len(prepared.input_ids),
                generated_tokens=sum(r.output_len for r in results),
            )

        return await prepared_or_rejected(self.ctx, item, run)
