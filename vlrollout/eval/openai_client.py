"""Predictions from any OpenAI-compatible server (``/v1/chat/completions``): vLLM, SGLang,
``vlrollout serve --protocol vllm``, hosted APIs.

The item is prepared by OUR preprocessor first (:func:`~vlrollout.eval.predict.prepared_or_rejected`,
the workflows' checks and rejection reasons): it gives the OpenAI messages, each image a ``data:``
URL in an ``image_url`` part where its placeholder is (what AReaL's vLLM client sends), and each
image's geometry. Boxes in a completion are then read in the frame the server's model saw only if
the server resizes images as our processor does: serve the same processor config
(``processor_dir``) with the same ``min_pixels``/``max_pixels``. The server renders the chat
template itself; the prompt it ran is not checked against ours.

A failed request (an HTTP error status, a timeout, no connection) becomes a rejected prediction
naming the status and the server's message, never an exception that ends the run.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any
from urllib.parse import urlsplit

import openai
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.eval.predict import check_k, episode_context, item_id, prepared_or_rejected
from vlrollout.eval.prediction import Prediction
from vlrollout.ledger import EpisodeRejected
from vlrollout.processors.auto import item_label
from vlrollout.processors.base import PreparedPrompt
from vlrollout.processors.messages import normalize_media
from vlrollout.workflows.preparation import load_processor


def api_base_url(address: str) -> str:
    """The client's base URL: ``http://`` added when no scheme is given, ``/v1`` when no path is.

    >>> api_base_url("127.0.0.1:8000"), api_base_url("https://api.example.com/openai/v1")
    ('http://127.0.0.1:8000/v1', 'https://api.example.com/openai/v1')
    """
    url = address if "://" in address else f"http://{address}"
    return url.rstrip("/") + ("/v1" if urlsplit(url).path in ("", "/") else "")


def request_rejection(e: openai.OpenAIError, url: str, timeout_s: float) -> EpisodeRejected:
    """A failed request as a rejection: ``http_error`` (with the status and the server's message),
    ``http_timeout``, ``http_connection`` or ``bad_response``."""
    if isinstance(e, openai.APIStatusError):
        return EpisodeRejected("http_error", f"{url}: HTTP {e.status_code}: {e.message}")
    if isinstance(e, openai.APITimeoutError):
        return EpisodeRejected("http_timeout", f"{url}: no answer within {timeout_s} s")
    if isinstance(e, openai.APIConnectionError):
        return EpisodeRejected("http_connection", f"{url}: {e.message}")
    return EpisodeRejected("bad_response", f"{url}: {type(e).__name__}: {e}")


class OpenAIPredictor:
    """Completions from ``/v1/chat/completions`` of an OpenAI-compatible server.

    ``k == 1`` asks for temperature 0 (greedy on vLLM, SGLang and ``vlrollout serve``);
    ``k > 1`` asks for ``n = k`` choices at ``temperature``. Texts are decoded with special tokens
    kept (``skip_special_tokens: false``, a vLLM/SGLang field) and a trailing stop token removed,
    as the workflows decode them, so box tokens survive; servers that keep the stop token's text
    (``vlrollout serve``) and those that drop it (vLLM) give the same text.

    Args:
        base_url: ``host:port`` or a URL (:func:`api_base_url`).
        model_name: The ``model`` field (what the server's ``/v1/models`` lists).
        processor_dir: Local folder of the processor the server uses (loaded with
            ``local_files_only``): our preprocessor builds the messages and the geometry.
        api_key: Sent as a bearer token (``"EMPTY"`` when ``None``, as local servers expect).
        max_tokens: Most tokens per completion.
        temperature: Sampling temperature for ``k > 1``.
        timeout_s: Seconds before a request is given up (``http_timeout``).
        max_retries: The client's retries of connection errors and 408/429/5xx answers.
        seed: Sent with sampled requests (``None``: not sent).
        skip_special_tokens: Sent when not ``None``; set ``None`` for a server that refuses
            the field.
        min_pixels, max_pixels, max_prompt_tokens, enable_thinking: As for
            :class:`~vlrollout.eval.predict.EnginePredictor`.
    """

    def __init__(
        self,
        base_url: str,
        model_name: str,
        processor_dir: str,
        *,
        api_key: str | None = None,
        max_tokens: int,
        temperature: float = 1.0,
        timeout_s: float = 120.0,
        max_retries: int = 2,
        seed: int | None = None,
        skip_special_tokens: bool | None = False,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        max_prompt_tokens: int | None = None,
        enable_thinking: bool = False,
    ) -> None:
        loaded = load_processor(str(processor_dir))
        vision = getattr(loaded, "tokenizer", None) is not None
        self.ctx = episode_context(
            loaded.tokenizer if vision else loaded,
            loaded if vision else None,
            GenerationHyperparameters(max_new_tokens=max_tokens),
            enable_thinking=enable_thinking,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            max_prompt_tokens=max_prompt_tokens,
        )
        self.url, self.model_name, self.api_key = api_base_url(base_url), model_name, api_key
        self.max_tokens, self.temperature, self.seed = max_tokens, temperature, seed
        self.timeout_s, self.max_retries = timeout_s, max_retries
        skip = {} if skip_special_tokens is None else {"skip_special_tokens": skip_special_tokens}
        self.extra_body = skip
        tok = self.ctx.tokenizer
        self.stop_texts = {tok.decode([t], skip_special_tokens=False) for t in self.stops()}
        self._clients: dict[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = {}

    def stops(self) -> list[int]:
        return [t for t in self.ctx.gconfig.stop_token_ids if t is not None]

    def client(self) -> openai.AsyncOpenAI:
        """This event loop's client (an HTTP connection pool belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            self._clients[loop] = openai.AsyncOpenAI(
                base_url=self.url,
                api_key=self.api_key or "EMPTY",
                timeout=self.timeout_s,
                max_retries=self.max_retries,
            )
        return self._clients[loop]

    async def aclose(self) -> None:
        """Close this event loop's client."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    def strip_stop(self, text: str) -> str:
        """``text`` without trailing stop-token texts (``decode_completion``'s rule on text)."""
        stripped = True
        while stripped:
            stripped = False
            for stop in self.stop_texts:
                if stop and text.endswith(stop):
                    text, stripped = text[: -len(stop)], True
        return text

    def messages(self, item: dict[str, Any], prepared: PreparedPrompt) -> list[dict[str, Any]]:
        """The OpenAI messages for ``item``: our preprocessor's (images as ``data:`` URLs)."""
        if prepared.videos:
            raise EpisodeRejected(
                "video_unsupported",
                f"{len(prepared.videos)} video(s): OpenAI chat messages carry images only",
            )
        if prepared.templated:
            raise EpisodeRejected(
                "templated_prompt",
                "the item holds a chat-templated prompt, not messages; a chat server needs messages",
            )
        if prepared.vision_msg_vllm is not None:
            return copy.deepcopy(list(prepared.vision_msg_vllm))
        return normalize_media(item["messages"], None, None, item_label(item)).messages

    async def predict(self, item: dict[str, Any], k: int = 1) -> Prediction:
        """``k`` completions of ``item`` (greedy when ``k == 1``), or why it could not be run."""
        check_k(k)

        async def run(prepared: PreparedPrompt, geometry: list[dict[str, Any]]) -> Prediction:
            request: dict[str, Any] = {
                "model": self.model_name,
                "messages": self.messages(item, prepared),
                "max_tokens": self.max_tokens,
                "temperature": 0.0 if k == 1 else self.temperature,
                "n": k,
                "extra_body": self.extra_body,
            }
            if k > 1 and self.seed is not None:
                request["seed"] = self.seed
            try:
                response = await self.client().chat.completions.create(**request)
            except openai.OpenAIError as e:
                raise request_rejection(e, self.url, self.timeout_s) from e
            return self.prediction(item, prepared, geometry, response, k)

        return await prepared_or_rejected(self.ctx, item, run)

    def prediction(
        self,
        item: dict[str, Any],
        prepared: PreparedPrompt,
        geometry: list[dict[str, Any]],
        response: Any,
        k: int,
    ) -> Prediction:
        """The server's answer as a :class:`Prediction` (rejected: fewer than ``k`` choices, an
        aborted choice, no tokens at all, a reply that is no chat completion)."""
        if not hasattr(response, "choices"):  # the SDK hands back a body that is not JSON as text
            raise EpisodeRejected(
                "bad_response", f"{self.url}: the reply is not a chat completion: {response!r:.120}"
            )
        if not isinstance(response.choices, list):
            raise EpisodeRejected("bad_response", f"{self.url}: the reply has no choices")
        choices = sorted(response.choices, key=lambda c: c.index)
        if len(choices) != k:
            raise EpisodeRejected("bad_response", f"{self.url}: {len(choices)} choices for n={k}")
        if any(c.finish_reason == "abort" for c in choices):
            raise EpisodeRejected("engine_abort", f"{self.url}: a choice finished with 'abort'")
        usage = response.usage
        if usage is not None and usage.completion_tokens == 0:
            raise EpisodeRejected("empty_output", f"{self.url} returned no tokens")
        return Prediction(
            id=item_id(item),
            completions=[self.strip_stop(c.message.content or "") for c in choices],
            geometry=geometry,
            rejection=None,
            prompt_tokens=usage.prompt_tokens if usage is not None else len(prepared.input_ids),
            generated_tokens=usage.completion_tokens if usage is not None else 0,
        )
