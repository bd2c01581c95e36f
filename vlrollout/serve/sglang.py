"""SGLang's HTTP subset, as AReaL 1.0.4's ``RemoteSGLangEngine`` uses it.

Client code read: ``areal/engine/sglang_remote.py`` (``SGLangBackend``) and
``areal/infra/remote_inf_engine.py`` (``RemoteInfEngine.agenerate``, ``_update_weights_from_disk``).

- ``POST /generate`` ``{input_ids, image_data, sampling_params: {top_p, top_k, max_new_tokens,
  temperature (0 = greedy), stop_token_ids, ignore_eos, skip_special_tokens,
  frequency_penalty, stop?}, return_logprob, stream: false}`` →
  ``{text, output_ids, meta_info: {id, finish_reason: {type, ...}, prompt_tokens,
  completion_tokens, output_token_logprobs: [[logprob, token_id, null], ...], weight_version}}``.
  ``image_data`` is base64 without a ``data:`` prefix (data URLs are accepted too).
  ``video_data`` (SGLang's field; AReaL 1.0.4's client never sends it: its ``ModelRequest`` has
  no video) takes videos the same way; ``input_ids`` must expand each video's placeholders as the
  served preprocessor samples it (its default frame sampling).
- ``POST /pause_generation``, ``/continue_generation``, ``/update_weights_from_disk
  {model_path, abort_all_requests}`` → ``{success, message}``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from areal.api.io_struct import ModelRequest

from vlrollout.processors.decode_room import ImageHeaders
from vlrollout.serve.control import control_routes
from vlrollout.serve.errors import BadRequest, check_fields, check_flags, flag, token_ids, typed
from vlrollout.serve.state import (
    STATE,
    ServerState,
    check_min_room,
    check_prompt_room,
    response_text,
)

GENERATE_FIELDS = (
    "input_ids",
    "image_data",
    "video_data",
    "sampling_params",
    "return_logprob",
    "stream",
    "rid",
)
SAMPLING_FIELDS = (
    "max_new_tokens",
    "min_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop_token_ids",
    "stop",
    "ignore_eos",
    "skip_special_tokens",
    "frequency_penalty",
    "n",
)


def _finish_reason(resp: Any) -> dict[str, Any]:
    if resp.stop_reason == "stop":
        return {"type": "stop", "matched": resp.output_tokens[-1] if resp.output_tokens else None}
    if resp.stop_reason == "length":
        return {"type": "length", "length": resp.output_len}
    message = "Abort before prefill" if not resp.output_tokens else "Abort in running batch"
    return {"type": "abort", "message": message}


def _sources(body: dict[str, Any], key: str, where: str) -> list[Any]:
    """``body[key]`` as a list of inline media (one string is a list of one)."""
    value = body.get(key)
    if isinstance(value, str):
        value = [value]
    if value is not None and not isinstance(value, list):
        raise BadRequest(f"{where}: {key} must be a list of base64 strings")
    return value or []


async def generate(request: web.Request, body: Any) -> dict[str, Any]:
    state: ServerState = request.app[STATE]
    where = "/generate"
    check_fields(body, GENERATE_FIELDS, where, required=["input_ids"])
    check_flags(body, ("stream", "return_logprob"), where)
    if body.get("stream"):
        raise BadRequest(f"{where}: stream=true is not supported; send stream=false")
    ids = token_ids(body["input_ids"], f"{where}: input_ids")
    rid = typed(body, "rid", str, where) or ""
    sp = typed(body, "sampling_params", dict, where) or {}
    check_fields(sp, SAMPLING_FIELDS, f"{where}: sampling_params")
    check_flags(sp, ("skip_special_tokens", "ignore_eos"), f"{where}: sampling_params")
    if sp.get("n", 1) != 1:
        raise BadRequest(f"{where}: sampling_params.n must be 1, got {sp['n']!r}")
    gconfig = state.gconfig(
        where, sp, sp.get("max_new_tokens"), fields_where=f"{where}: sampling_params"
    )
    check_prompt_room(state, len(ids), where)
    check_min_room(state, len(ids), gconfig.min_new_tokens, "min_new_tokens", where)
    images = _sources(body, "image_data", where)
    videos = _sources(body, "video_data", where)
    metadata: dict[str, Any] = {}
    mm: dict[str, Any] = {}
    raws, headers = [], ImageHeaders([], 0)
    if images:
        raws = await asyncio.to_thread(state.encoded_images, images, where)
        headers = await asyncio.to_thread(state.image_headers, raws, where)
        if not videos:  # videos' frames may share the image placeholder (GLM-4.1V)
            state.check_image_placeholders(ids, headers.sizes, where)
    clips = await asyncio.to_thread(state.encoded_videos, videos, where) if videos else []
    peeked = await asyncio.to_thread(state.video_headers, clips, where) if videos else []
    if peeked:
        state.check_video_placeholders(ids, peeked, where)
    if images or videos:
        async with state.decoding_room(headers, where, peeked):
            if images:
                mm.update(await asyncio.to_thread(state.vision_tensors, raws, where))
            if videos:
                mm.update(await asyncio.to_thread(state.video_tensors, clips, where))
    if mm:
        metadata["multi_modal_input"] = mm
    req = ModelRequest(rid=rid, input_ids=ids, gconfig=gconfig, metadata=metadata)
    resp = await state.generate(req, abort_on_pause=True, where=where)
    tokenizer = state.engine.tokenizer
    meta = {
        "id": req.rid,
        "finish_reason": _finish_reason(resp),
        "prompt_tokens": len(ids),
        "completion_tokens": resp.output_len,
        "weight_version": state.engine.get_version(),
    }
    if body.get("return_logprob"):
        meta["output_token_logprobs"] = [
            [lp, tok, None]
            for lp, tok in zip(resp.output_logprobs, resp.output_tokens, strict=True)
        ]
    skip = flag(sp, "skip_special_tokens", True)
    text, matched = response_text(tokenizer, resp, req.gconfig, skip)
    if matched is not None:  # SGLang names the stop string it matched
        meta["finish_reason"] = {"type": "stop", "matched": matched}
    return {"text": text, "output_ids": resp.output_tokens, "meta_info": meta}


ROUTES = {"/generate": generate}
"""Generation routes (admission-controlled)."""

CONTROL_ROUTES = control_routes(
    "/pause_generation",
    "/continue_generation",
    "/update_weights_from_disk",
    pause_fields=("mode",),
    pause_modes=("abort",),
)
"""Pause, continue and weight updates (absent with ``--no-control``)."""
