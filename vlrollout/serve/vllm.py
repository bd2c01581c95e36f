"""AReaL's vLLM server flavour (``areal/engine/vllm_ext/areal_vllm_server.py``), as AReaL 1.0.4's
``RemotevLLMEngine`` (``areal/engine/vllm_remote.py``, ``VLLMBackend``) uses it.

- ``POST /v1/chat/completions`` when the request has ``vision_msg_vllm``: OpenAI messages whose
  ``image_url`` (and ``video_url``, which AReaL's client never sends) is a
  ``data:<mime>;base64,...`` URL, flat sampling fields (``max_tokens``,
  ``temperature`` (0 = greedy), ``top_p``, ``top_k``, ``stop_token_ids``, ``ignore_eos``,
  ``skip_special_tokens``, ``return_tokens_as_token_ids``, ``logprobs: true``,
  ``use_beam_search``, ``stream``); the client reads ``choices[0].finish_reason`` and
  ``choices[0].logprobs.content[i]`` (``token`` = ``"token_id:<id>"``, ``logprob``). The server
  builds the prompt from the messages with our preprocessor (chat template + processor).
- ``POST /v1/completions`` otherwise: ``prompt`` = token ids, ``logprobs: 0``,
  ``return_tokens_as_token_ids``; the client reads ``choices[0].logprobs.tokens`` /
  ``token_logprobs``. Without ``return_tokens_as_token_ids`` the tokens are text, as vLLM's.
- ``POST /areal_pause_generation``, ``/areal_continue_generation``, ``/areal_update_weights
  {model_path}`` → ``{success, message}``.

For OpenAI clients and evaluation harnesses: ``GET /v1/models`` lists the served model;
chat completions take ``n`` (choices sampled independently), ``seed``, ``logprobs`` with
``top_logprobs`` (token text unless ``return_tokens_as_token_ids``), report ``finish_reason``
``"length"`` when ``max_tokens`` ran out and per-request ``usage``, and answer ``stream: true``
with server-sent ``chat.completion.chunk`` events once the choices are done (no incremental
decoding: the engine finishes a choice before it is sent).

Pause: completions requests are aborted (``finish_reason: "abort"`` with the tokens so far) and
AReaL resends prompt + tokens. Chat requests are *held* instead: on an abort AReaL's client
appends the partial tokens to ``req.input_ids`` but resends the unchanged ``messages``, so the
continuation would restart from the prompt and the trajectory would splice two unrelated
completions. Held requests resume after ``/areal_continue_generation`` (re-prefilled with new
weights if an update came in between).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from aiohttp import web
from areal.api.io_struct import ModelRequest

from vlrollout.processors.decode_room import ImageHeaders
from vlrollout.processors.image_loading import DEFAULT_MAX_BYTES
from vlrollout.serve.control import control_routes
from vlrollout.serve.errors import BadRequest, check_fields, check_flags, flag, token_ids, typed
from vlrollout.serve.state import (
    STATE,
    ServerState,
    check_min_room,
    encoded_image,
    response_text,
    video_byte_limit,
)

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
    "use_beam_search",
    "stream",
    "n",
    "frequency_penalty",
    "seed",
    *("presence_penalty", "logit_bias", "user"),  # taken at their neutral value: _check_neutral
)


MAX_N = 16
"""Most completions one request may ask for (``n``)."""
MAX_TOP_LOGPROBS = 20
"""Most alternatives per token (``top_logprobs``), OpenAI's limit."""


def _count(body: dict[str, Any], key: str, default: int, low: int, high: int, where: str) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"{where}: {key} must be a whole number in [{low}, {high}], got {value!r}")
    return value


FLAGS = ("stream", "ignore_eos", "skip_special_tokens", "return_tokens_as_token_ids")
"""The boolean fields of both routes (chat's ``logprobs`` too; completions' is a count)."""


def _check_neutral(body: dict[str, Any], where: str) -> None:
    """OpenAI fields harnesses send by default, taken at the value that changes nothing
    (``presence_penalty`` 0, an empty ``logit_bias``, a ``user`` id string) and refused at any
    other, which this server would otherwise ignore."""
    penalty, bias, user = (body.get(k) for k in ("presence_penalty", "logit_bias", "user"))
    if penalty is not None and (isinstance(penalty, bool) or penalty != 0):
        raise BadRequest(f"{where}: presence_penalty is not supported; only 0, got {penalty!r}")
    if bias:
        raise BadRequest(f"{where}: logit_bias is not supported; only an empty one, got {bias!r}")
    if user is not None and not isinstance(user, str):
        raise BadRequest(f"{where}: user must be a string, got {user!r}")


def _gconfig(state: ServerState, body: dict[str, Any], where: str, default_max_tokens: int):
    """AReaL's settings of a request; without ``max_tokens`` the route's default (vLLM's: 16 on
    completions, the rest of the context on chat, the engine capping it at the context)."""
    _check_neutral(body, where)
    check_flags(body, (*FLAGS, "use_beam_search"), where)
    if body.get("use_beam_search"):
        raise BadRequest(f"{where}: use_beam_search is not supported")
    max_tokens = _asked_max_tokens(body)
    max_tokens = default_max_tokens if max_tokens is None else max_tokens
    key = "max_tokens" if body.get("max_completion_tokens") is None else "max_completion_tokens"
    return state.gconfig(
        where, body, max_tokens, min_tokens_key="min_tokens", max_tokens_key=key, top_k_off=(-1, 0)
    )


def _asked_max_tokens(body: dict[str, Any]) -> Any:
    """The completion length a request asks for: ``max_completion_tokens`` (OpenAI's current
    name, which vLLM prefers), else ``max_tokens``; ``None`` for neither (a null is neither)."""
    asked = body.get("max_completion_tokens")
    return body.get("max_tokens") if asked is None else asked


def _check_room(state: ServerState, prompt_len: int, body: dict[str, Any], where: str) -> None:
    """Refuse a ``max_tokens`` or ``min_tokens`` the context cannot hold after the prompt, as
    vLLM does (a 400, never a shorter completion than asked for); without a maximum, the
    completion stops at the context's end."""
    asked = _asked_max_tokens(body)
    if isinstance(asked, int) and prompt_len + asked > state.context_len:
        raise BadRequest(
            f"{where}: this model's maximum context length is {state.context_len} tokens; you "
            f"requested {prompt_len + asked} tokens ({prompt_len} in the prompt, {asked} in the "
            "completion): lower max_tokens or the prompt"
        )
    check_min_room(state, prompt_len, body.get("min_tokens"), "min_tokens", where)


def _stream_options(body: dict[str, Any], where: str) -> dict[str, Any]:
    """``stream_options``: an object whose one field, ``include_usage``, is a boolean, given
    only with ``stream: true`` (as vLLM has it: without a stream it would change nothing)."""
    options = typed(body, "stream_options", dict, where) or {}
    if body.get("stream_options") is not None and not body.get("stream"):
        raise BadRequest(f"{where}: stream_options can only be given with stream=true")
    check_fields(options, ("include_usage",), f"{where}: stream_options")
    check_flags(options, ("include_usage",), f"{where}: stream_options")
    return options


def _served_name(state: ServerState) -> str:
    """The model id ``/v1/models`` lists: the folder the model was loaded from."""
    return getattr(state.engine.model.config, "name_or_path", "") or "vlrollout"


def _check_model(state: ServerState, body: dict[str, Any], where: str) -> str:
    """The served model's name; a request naming another model is a 404, as on vLLM (a LoRA
    adapter never loaded, a typo), so no client gets the base model under another name."""
    served, asked = _served_name(state), body.get("model")
    if asked is not None and asked != served:
        raise BadRequest(
            f"{where}: the model {asked!r} does not exist; this server serves {served!r} "
            "(GET /v1/models)",
            status=404,
        )
    return served


def _token_entry(state: ServerState, token: int, logprob: float, as_ids: bool) -> dict[str, Any]:
    """One OpenAI logprob entry: ``"token_id:<id>"`` when the client asked for ids (AReaL's vLLM
    client does), else the token's text, with its UTF-8 bytes."""
    tok = state.engine.tokenizer
    text = f"token_id:{token}" if as_ids or tok is None else tok.decode([token])
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def _chat_logprobs(state: ServerState, resp: Any, body: dict[str, Any]) -> dict[str, Any]:
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    tops = getattr(resp, "top_logprobs", None) or [[] for _ in resp.output_tokens]
    return {
        "content": [
            {
                **_token_entry(state, t, lp, as_ids),
                "top_logprobs": [_token_entry(state, a, alp, as_ids) for a, alp in top],
            }
            for t, lp, top in zip(resp.output_tokens, resp.output_logprobs, tops, strict=True)
        ]
    }


def _completion_logprobs(state: ServerState, resp: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The legacy completions shape, as vLLM answers ``logprobs: k``: per generated token its
    text (``"token_id:<id>"`` with ``return_tokens_as_token_ids``, which AReaL's client sends), its
    logprob, a dict of it and the k most likely tokens, and its offset in the completion text."""
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    tops = getattr(resp, "top_logprobs", None) or [[] for _ in resp.output_tokens]
    out: dict[str, list[Any]] = {
        "tokens": [],
        "token_logprobs": [],
        "top_logprobs": [],
        "text_offset": [],
    }
    offset = 0
    for token, logprob, top in zip(resp.output_tokens, resp.output_logprobs, tops, strict=True):
        text = _token_entry(state, token, logprob, as_ids)["token"]
        alternatives = {_token_entry(state, a, alp, as_ids)["token"]: alp for a, alp in top}
        out["tokens"].append(text)
        out["token_logprobs"].append(logprob)
        out["top_logprobs"].append({**alternatives, text: logprob})
        out["text_offset"].append(offset)
        offset += len(text)
    return out


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the one served model, in OpenAI's list format."""
    state: ServerState = request.app[STATE]
    entry = {"id": _served_name(state), "object": "model", "created": 0, "owned_by": "vlrollout"}
    return web.json_response({"object": "list", "data": [entry]})


async def _sse(request: web.Request, chunks: list[dict[str, Any]]) -> web.StreamResponse:
    """Send ``chunks`` as server-sent events, then ``data: [DONE]``, as OpenAI streams do."""
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await out.prepare(request)
    for chunk in chunks:
        await out.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await out.write(b"data: [DONE]\n\n")
    await out.write_eof()
    return out


def _stream_chunks(response: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A finished chat completion as ``chat.completion.chunk`` events: per choice its role, its
    text with its logprobs, then its finish reason; with ``include_usage``
    (``stream_options: {"include_usage": true}``, as OpenAI and vLLM) a last chunk with no
    choices and the usage, and ``"usage": null`` in every other chunk, as OpenAI's API has it."""
    head = {k: response[k] for k in ("id", "created", "model")}
    chunks = []
    for choice in response["choices"]:
        base = {
            **head,
            "object": "chat.completion.chunk",
            **({"usage": None} if include_usage else {}),
        }
        index = choice["index"]
        delta = {"role": "assistant", "content": choice["message"]["content"]}
        chunks.append(
            {
                **base,
                "choices": [
                    {
                        "index": index,
                        "delta": delta,
                        "logprobs": choice["logprobs"],
                        "finish_reason": None,
                    }
                ],
            }
        )
        chunks.append(
            {
                **base,
                "choices": [
                    {"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}
                ],
            }
        )
    if include_usage:
        chunks.append(
            {**head, "object": "chat.completion.chunk", "choices": [], "usage": response["usage"]}
        )
    return chunks


def _finish(resp: Any) -> str:
    return resp.stop_reason if resp.stop_reason in ("stop", "length") else "abort"


def _text(state: ServerState, resp: Any, req: ModelRequest, body: dict[str, Any]) -> str:
    """The completion's text, ending before the stop string that stopped the engine."""
    skip = flag(body, "skip_special_tokens", True)
    return response_text(state.engine.tokenizer, resp, req.gconfig, skip)[0]


def _usage(n_prompt: int, *resps: Any) -> dict[str, int]:
    generated = sum(r.output_len for r in resps)
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": generated,
        "total_tokens": n_prompt + generated,
    }


MEDIA_PARTS = {"image_url": ("image", "images"), "video_url": ("video", "videos")}
"""OpenAI/vLLM content parts carrying media: the part type, its placeholder part and item field."""


def _split_media(
    messages: Any, where: str, max_bytes: dict[str, int]
) -> tuple[list[dict[str, Any]], dict[str, list[bytes]]]:
    """Messages with ``{"type": "image"}`` / ``{"type": "video"}`` parts, and the decoded bytes
    of each ``image_url`` / ``video_url`` (each at most ``max_bytes[field]``), by item field
    (``images``, ``videos``). URLs must be inline (base64 or ``data:``), as for images: the
    server reads neither its own files nor the network for a client. A content list holds
    OpenAI's part objects only (:data:`CLIENT_PARTS`): the item forms that name a file
    (``{"type": "image", "image": PATH}``) are refused, so the processor never sees a path."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest(f"{where}: messages must be a non-empty list")
    out: list[dict[str, Any]] = []
    media: dict[str, list[bytes]] = {"images": [], "videos": []}
    for m, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(f"{where}: messages[{m}] must be an object")
        if not isinstance(message.get("role"), str):
            raise BadRequest(
                f"{where}: messages[{m}].role must be a string (user, assistant, system, ...), "
                f"got {_shown(message.get('role'))}"
            )
        content = message.get("content")
        if content is None:  # OpenAI: null only on an assistant turn (one that calls tools)
            if message["role"] != "assistant":
                raise BadRequest(
                    f"{where}: messages[{m}].content is missing; a {message['role']} message "
                    "needs a string or a list of parts"
                )
            message = {**message, "content": ""}
        if isinstance(content, list):
            parts = []
            for p, part in enumerate(content):
                label = f"{where}: messages[{m}].content[{p}]"
                kind = _client_part_kind(part, label)
                if kind in MEDIA_PARTS:
                    placeholder, item_field = MEDIA_PARTS[kind]
                    _check_part_keys(part, kind, label)
                    url = part.get(kind)
                    url = url.get("url") if isinstance(url, dict) else url
                    limit = max_bytes[item_field]
                    media[item_field].append(encoded_image(url, label, limit, what=kind))
                    parts.append({"type": placeholder})
                else:
                    parts.append({"type": "text", "text": part["text"]})
            message = {**message, "content": parts}
        out.append(message)
    return out, media


def _check_part_keys(part: dict[str, Any], kind: str, label: str) -> None:
    """Refuse keys an ``image_url``/``video_url`` part does not have in OpenAI's form (``type``,
    the URL object with ``url`` and ``detail``): a part's own sampling settings (``nframes``,
    ``fps``, ``max_pixels``) would otherwise be ignored, where ``vlrollout run`` refuses them."""
    extra = sorted(set(part) - {"type", kind})
    url = part.get(kind)
    if isinstance(url, dict):
        extra += sorted(set(url) - {"url", "detail"})
        if url.get("detail", "auto") not in IMAGE_DETAILS:
            raise BadRequest(
                f"{label}: {kind}.detail must be one of {', '.join(IMAGE_DETAILS)}, got "
                f"{_shown(url['detail'])}"
            )
    if extra:
        keys = ", ".join(repr(k) for k in extra)
        raise BadRequest(
            f"{label}: {kind} part sets {keys}, which this server does not take per part; it "
            "samples every medium with its own settings (vlrollout serve --help)"
        )


IMAGE_DETAILS = ("auto", "low", "high")
"""OpenAI's values of an image part's ``detail`` (accepted; this server resizes every image by
its own pixel budget)."""

CLIENT_PARTS = ("text", "image_url", "video_url")
"""The content part types a chat request may hold."""


def _client_part_kind(part: Any, label: str) -> str:
    """The type of one content part of a request, which must be one of :data:`CLIENT_PARTS`
    (a text part with its ``text`` string)."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in CLIENT_PARTS:
        raise BadRequest(
            f"{label}: a content part must be an object of type {', '.join(CLIENT_PARTS)}, got "
            f"{_shown(part)}; images and videos go inline, as image_url / video_url data URLs"
        )
    if kind == "text" and not isinstance(part.get("text"), str):
        raise BadRequest(f"{label}: a text part needs its text as a string, got {_shown(part)}")
    return kind


def _shown(part: Any, limit: int = 120) -> str:
    text = repr(part)
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def chat_completions(request: web.Request, body: Any) -> dict[str, Any] | web.StreamResponse:
    """OpenAI chat completions: ``n`` choices sampled independently from one prepared prompt,
    ``logprobs`` with token text (or ``"token_id:<id>"`` with ``return_tokens_as_token_ids``) and
    ``top_logprobs`` alternatives, ``finish_reason`` ``"length"`` when ``max_tokens`` ran out,
    and ``stream: true`` answered as server-sent events once the choices are done."""
    state: ServerState = request.app[STATE]
    where = "/v1/chat/completions"
    check_fields(
        body,
        (*SAMPLING_FIELDS, "top_logprobs", "messages", "stream_options"),
        where,
        required=["messages"],
    )
    model = _check_model(state, body, where)
    check_flags(body, ("logprobs",), where)
    options = _stream_options(body, where)
    gconfig = _gconfig(state, body, where, state.context_len)
    n = _count(body, "n", 1, 1, MAX_N, where)
    top = _count(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS, where)
    if "top_logprobs" in body and body["top_logprobs"] is not None and not body.get("logprobs"):
        raise BadRequest(f"{where}: with top_logprobs, logprobs must be true")
    max_bytes = {
        "images": getattr(state.preprocessor, "max_image_bytes", DEFAULT_MAX_BYTES),
        "videos": video_byte_limit(state.preprocessor),
    }
    # Off the event loop: decoding a burst's base64 images there held up every other answer.
    messages, media = await asyncio.to_thread(_split_media, body["messages"], where, max_bytes)
    if state.preprocessor is None:
        raise BadRequest(f"{where}: the served model has no processor to render messages")
    headers = ImageHeaders([], 0)
    if media["images"]:
        headers = await asyncio.to_thread(state.image_headers, media["images"], where)
    videos = await asyncio.to_thread(state.video_headers, media["videos"], where)
    asked = _asked_max_tokens(body)  # its type was checked with the sampling settings
    room = state.context_len - asked if asked and asked < state.context_len else None
    state.check_media_tokens(headers.sizes, where, room, videos)  # (no room: _check_room says)
    item = {"messages": messages, **{k: v for k, v in media.items() if v}}
    async with state.decoding_room(headers, where, videos):
        prepared = await asyncio.to_thread(state.prepare, item, where)
    _check_room(state, len(prepared.input_ids), body, where)
    mm = prepared.multi_modal_input
    metadata: dict[str, Any] = {"multi_modal_input": mm} if mm else {}
    metadata["stop_skips_special"] = flag(body, "skip_special_tokens", True)  # vLLM's rule
    if top and body.get("logprobs"):
        metadata["top_logprobs"] = top
    seed = _count(body, "seed", -1, 0, 2**63 - 1, where)
    reqs = [
        ModelRequest(
            input_ids=list(prepared.input_ids),
            gconfig=gconfig,
            metadata={**metadata, **({"seed": seed + i} if seed >= 0 else {})},
        )
        for i in range(n)
    ]
    resps = await asyncio.gather(
        *(state.generate(req, abort_on_pause=False, where=where) for req in reqs)
    )
    response = {
        "id": f"chatcmpl-{reqs[0].rid}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": _text(state, resp, req, body)},
                "logprobs": _chat_logprobs(state, resp, body) if body.get("logprobs") else None,
                "finish_reason": _finish(resp),
            }
            for i, (req, resp) in enumerate(zip(reqs, resps, strict=True))
        ],
        "usage": _usage(len(prepared.input_ids), *resps),
    }
    if body.get("stream"):
        include_usage = bool(options.get("include_usage"))
        return await _sse(request, _stream_chunks(response, include_usage))
    return response


async def completions(request: web.Request, body: Any) -> dict[str, Any]:
    state: ServerState = request.app[STATE]
    where = "/v1/completions"
    check_fields(body, (*SAMPLING_FIELDS, "prompt"), where, required=["prompt"])
    model = _check_model(state, body, where)
    check_flags(body, FLAGS, where)
    if body.get("stream"):
        raise BadRequest(f"{where}: stream=true is supported on /v1/chat/completions only")
    _count(body, "n", 1, 1, 1, where)
    gconfig = _gconfig(state, body, where, 16)
    prompt = body["prompt"]
    if isinstance(prompt, str) and state.engine.tokenizer is not None:
        prompt = state.engine.tokenizer(prompt)["input_ids"]
    ids = token_ids(prompt, f"{where}: prompt")
    _check_room(state, len(ids), body, where)
    seed = _count(body, "seed", -1, 0, 2**63 - 1, where)
    top = _count(body, "logprobs", -1, 0, MAX_TOP_LOGPROBS, where)
    metadata: dict[str, Any] = {"seed": seed} if seed >= 0 else {}
    metadata["stop_skips_special"] = flag(body, "skip_special_tokens", True)  # vLLM's rule
    if top > 0:
        metadata["top_logprobs"] = top
    req = ModelRequest(input_ids=ids, gconfig=gconfig, metadata=metadata)
    resp = await state.generate(req, abort_on_pause=True, where=where)
    logprobs = _completion_logprobs(state, resp, body) if top >= 0 else None
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": _text(state, resp, req, body),
                "logprobs": logprobs,
                "finish_reason": _finish(resp),
            }
        ],
        "usage": _usage(len(ids), resp),
    }


GET_ROUTES = {"/v1/models": models}
"""Plain GET handlers (OpenAI clients and evaluation harnesses list the models first)."""

ROUTES = {"/v1/chat/completions": chat_completions, "/v1/completions": completions}
"""Generation routes (admission-controlled)."""

CONTROL_ROUTES = control_routes(
    "/areal_pause_generation", "/areal_continue_generation", "/areal_update_weights"
)
"""Pause, continue and weight updates (absent with ``--no-control``)."""
