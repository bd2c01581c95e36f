"""AReaL's vLLM server flavour (``areal/engine/vllm_ext/areal_vllm_server.py``), as AReaL 1.0.4's
``RemotevLLMEngine`` (``areal/engine/vllm_remote.py``, ``VLLMBackend``) uses it.

- ``POST /v1/chat/completions`` when the request has ``vision_msg_vllm``: OpenAI messages whose
  ``image_url`` is a ``data:<mime>;base64,...`` URL, flat sampling fields (``max_tokens``,
  ``temperature`` (0 = greedy), ``top_p``, ``top_k``, ``stop_token_ids``, ``ignore_eos``,
  ``skip_special_tokens``, ``return_tokens_as_token_ids``, ``logprobs: true``,
  ``use_beam_search``, ``stream``); the client reads ``choices[0].finish_reason`` and
  ``choices[0].logprobs.content[i]`` (``token`` = ``"token:<id>"``, ``logprob``). The server
  builds the prompt from the messages with our preprocessor (chat template + processor).
- ``POST /v1/completions`` otherwise: ``prompt`` = token ids, ``logprobs: 0``; the client reads
  ``choices[0].logprobs.tokens`` / ``token_logprobs``.
- ``POST /areal_pause_generation``, ``/areal_continue_generation``, ``/areal_update_weights
  {model_path}`` → ``{success, message}``.

Pause: completions requests are aborted (``finish_reason: "abort"`` with the tokens so far) and
AReaL resends prompt + tokens. Chat requests are *held* instead: on an abort AReaL's client
appends the partial tokens to ``req.input_ids`` but resends the unchanged ``messages``, so the
continuation would restart from the prompt and the trajectory would splice two unrelated
completions. Held requests resume after ``/areal_continue_generation`` (re-prefilled with new
weights if an update came in between).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from aiohttp import web
from areal.api.io_struct import ModelRequest

from vlrollout.serve.control import control_routes
from vlrollout.serve.errors import BadRequest, check_fields, token_ids
from vlrollout.serve.state import STATE, ServerState, encoded_image

SAMPLING_FIELDS = (
    "model",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop_token_ids",
    "stop",
    "ignore_eos",
    "skip_special_tokens",
    "return_tokens_as_token_ids",
    "logprobs",
    "top_logprobs",
    "use_beam_search",
    "stream",
    "n",
    "frequency_penalty",
)


def _gconfig(state: ServerState, body: dict[str, Any], where: str):
    if body.get("stream"):
        raise BadRequest(f"{where}: stream=true is not supported; send stream=false")
    if body.get("use_beam_search"):
        raise BadRequest(f"{where}: use_beam_search is not supported")
    if body.get("n", 1) != 1:
        raise BadRequest(f"{where}: n must be 1, got {body['n']!r}")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    max_tokens = 16 if max_tokens is None else max_tokens  # vLLM's completions default
    return state.gconfig(where, body, max_tokens, min_tokens_key="min_tokens")


def _finish(resp: Any) -> str:
    return resp.stop_reason if resp.stop_reason in ("stop", "length") else "abort"


def _text(state: ServerState, resp: Any, body: dict[str, Any]) -> str:
    tok = state.engine.tokenizer
    skip = body.get("skip_special_tokens", True)
    return tok.decode(resp.output_tokens, skip_special_tokens=skip) if tok else ""


def _usage(n_prompt: int, resp: Any) -> dict[str, int]:
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": resp.output_len,
        "total_tokens": n_prompt + resp.output_len,
    }


def _split_images(messages: Any, where: str) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Messages with ``{"type": "image"}`` parts, and the decoded bytes of each image URL."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest(f"{where}: messages must be a non-empty list")
    out, images = [], []
    for m, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(f"{where}: messages[{m}] must be an object")
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for p, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "image_url":
                    url = part.get("image_url")
                    url = url.get("url") if isinstance(url, dict) else url
                    label = f"{where}: messages[{m}].content[{p}]"
                    images.append(encoded_image(url, label))
                    parts.append({"type": "image"})
                else:
                    parts.append(part)
            message = {**message, "content": parts}
        out.append(message)
    return out, images


async def chat_completions(request: web.Request, body: Any) -> dict[str, Any]:
    state: ServerState = request.app[STATE]
    where = "/v1/chat/completions"
    check_fields(body, (*SAMPLING_FIELDS, "messages"), where, required=["messages"])
    gconfig = _gconfig(state, body, where)
    messages, images = _split_images(body["messages"], where)
    if state.preprocessor is None:
        raise BadRequest(f"{where}: the served model has no processor to render messages")

    def prepare():
        from vlrollout.processors.errors import PreprocessError

        try:
            return state.preprocessor.prepare({"messages": messages, "images": images})
        except PreprocessError as e:
            raise BadRequest(f"{where}: {e.reason}: {e.detail}") from None

    prepared = await asyncio.to_thread(prepare)
    metadata = {"multi_modal_input": prepared.multi_modal_input} if images else {}
    req = ModelRequest(input_ids=list(prepared.input_ids), gconfig=gconfig, metadata=metadata)
    resp = await state.generate(req, abort_on_pause=False, where=where)
    content = [
        {"token": f"token:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
        for t, lp in zip(resp.output_tokens, resp.output_logprobs, strict=True)
    ]
    return {
        "id": f"chatcmpl-{req.rid}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or "vlrollout",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": _text(state, resp, body)},
                "logprobs": {"content": content} if body.get("logprobs") else None,
                "finish_reason": _finish(resp),
            }
        ],
        "usage": _usage(len(prepared.input_ids), resp),
    }


async def completions(request: web.Request, body: Any) -> dict[str, Any]:
    state: ServerState = request.app[STATE]
    where = "/v1/completions"
    check_fields(body, (*SAMPLING_FIELDS, "prompt"), where, required=["prompt"])
    gconfig = _gconfig(state, body, where)
    prompt = body["prompt"]
    if isinstance(prompt, str) and state.engine.tokenizer is not None:
        prompt = state.engine.tokenizer(prompt)["input_ids"]
    ids = token_ids(prompt, f"{where}: prompt")
    req = ModelRequest(input_ids=ids, gconfig=gconfig)
    resp = await state.generate(req, abort_on_pause=True, where=where)
    logprobs = None
    if body.get("logprobs") is not None:
        logprobs = {
            "tokens": [f"token:{t}" for t in resp.output_tokens],
            "token_logprobs": list(resp.output_logprobs),
            "top_logprobs": None,
            "text_offset": [],
        }
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model") or "vlrollout",
        "choices": [
            {
                "index": 0,
                "text": _text(state, resp, body),
                "logprobs": logprobs,
                "finish_reason": _finish(resp),
            }
        ],
        "usage": _usage(len(ids), resp),
    }


ROUTES = {
    "/v1/chat/completions": chat_completions,
    "/v1/completions": completions,
    **control_routes(
        "/areal_pause_generation", "/areal_continue_generation", "/areal_update_weights"
    ),
}
