"""The aiohttp application: JSON in and out, errors as 4xx answers that leave the server serving."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from vlrollout.logs import get_logger
from vlrollout.process_memory import resident_bytes
from vlrollout.serve.admission import (
    Admission,
    QueueLimits,
    admission_middleware,
    charge_read_body,
)
from vlrollout.serve.auth import key_middleware
from vlrollout.serve.errors import BadRequest, body_too_large
from vlrollout.serve.limits import BODY_IDLE_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES, PROTOCOLS
from vlrollout.serve.memory import trim_after_drain, trim_soon
from vlrollout.serve.state import STATE, ServerState

if TYPE_CHECKING:
    from vlrollout.workflows.preparation import FrameSampling

logger = get_logger(__name__)

PARSE_OFF_LOOP_BYTES = 64 * 1024
"""Bodies larger than this are parsed on a worker thread: a burst of image requests parsed on the
event loop one after another kept ``/health`` and every other answer waiting behind them."""

Route = Callable[[web.Request, Any], Awaitable[dict[str, Any] | web.StreamResponse]]


async def _read_body(request: web.Request, idle_s: float) -> bytes:
    """The whole body, as ``request.read()`` reads it, or 408 when no byte of it arrives for
    ``idle_s`` seconds."""
    chunks, size = [], 0
    while True:
        try:
            chunk = await asyncio.wait_for(request.content.readany(), idle_s)
        except TimeoutError:
            raise BadRequest(
                f"{request.path}: no byte of the body for {idle_s:g} s; the request is dropped",
                408,
            ) from None
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > request.client_max_size:
            raise web.HTTPRequestEntityTooLarge(max_size=request.client_max_size, actual_size=size)
        chunks.append(chunk)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""Half of a UTF-16 pair: what a JSON ``\\ud800`` escape without its other half decodes to."""


class NotUnicodeText(ValueError):
    """A JSON string holds a lone surrogate; the message names where."""


def _lone_surrogate_at(value: Any, where: str = "") -> str | None:
    """Where in ``value`` (``messages[0].content``) a string holds a lone surrogate, if any."""
    if isinstance(value, str):
        return where if _LONE_SURROGATE.search(value) else None
    if isinstance(value, dict):
        found = (
            _lone_surrogate_at(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()
        )
    elif isinstance(value, list):
        found = (_lone_surrogate_at(v, f"{where}[{i}]") for i, v in enumerate(value))
    else:
        return None
    return next((f for f in found if f is not None), None)


def _parse(raw: bytes) -> Any:
    """A JSON body: UTF-8 as RFC 8259 has it (a BOM tolerated), never another encoding
    guessed from its first bytes, whose strings are Unicode text: a ``\\uD800``-``\\uDFFF``
    escape without its pair is refused (:class:`NotUnicodeText`), as the tokenizer would fail
    on it."""
    body = json.loads(raw.decode("utf-8-sig"))
    if b"\\u" in raw and (where := _lone_surrogate_at(body)) is not None:
        raise NotUnicodeText(
            f"{where or 'the body'} holds a lone UTF-16 surrogate (half of a \\uD800-\\uDFFF "
            "pair), which is not Unicode text"
        )
    return body


async def _read_json(request: web.Request) -> Any:
    try:
        raw = await _read_body(request, request.app[STATE].body_idle_timeout_s)
    except web.HTTPRequestEntityTooLarge:
        raise body_too_large(request.path, request.app[STATE].max_body_bytes) from None
    except web.RequestPayloadError as e:  # a Content-Encoding the body is not in
        encoding = request.headers.get("Content-Encoding", "")
        raise BadRequest(
            f"{request.path}: the body cannot be decoded as its Content-Encoding {encoding!r} "
            f"({str(e).splitlines()[-1].strip()})"
        ) from None
    charge_read_body(request, request.app[STATE].admission, len(raw))
    if not raw.strip():
        return {}
    try:
        if len(raw) > PARSE_OFF_LOOP_BYTES:
            return await asyncio.to_thread(_parse, raw)
        return _parse(raw)
    except UnicodeDecodeError as e:
        raise BadRequest(f"{request.path}: the body is not UTF-8 ({e})") from None
    except json.JSONDecodeError as e:
        raise BadRequest(f"{request.path}: malformed JSON body: {e}") from None
    except ValueError as e:  # an integer literal past Python's int_max_str_digits (4300)
        raise BadRequest(f"{request.path}: the JSON body cannot be read: {e}") from None
    except RecursionError:
        raise BadRequest(f"{request.path}: the JSON body is nested too deeply") from None
    except NotUnicodeText as e:
        raise BadRequest(f"{request.path}: {e}") from None


def _json_route(
    fn: Route, browsers: bool = True
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``fn`` as an aiohttp handler of a JSON body; ``browsers=False`` refuses a request with an
    ``Origin`` header (403): browsers send one with every cross-site POST, and a form POST
    needs no CORS preflight, so a web page could otherwise drive a keyless server."""

    async def handler(request: web.Request) -> web.Response:
        request.app[STATE].requests[request.path] += 1
        if not browsers and "Origin" in request.headers:
            raise BadRequest(
                f"{request.path}: control routes do not answer browsers (the request has an "
                "Origin header)",
                403,
            )
        result = await fn(request, await _read_json(request))
        return result if isinstance(result, web.StreamResponse) else web.json_response(result)

    return handler


CLIENT_CLOSED = 499
"""The status a request is counted under when its client closed the connection before its answer
(nginx's "client closed request"); nothing is sent."""


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    """Every failure becomes a JSON error body; client mistakes are 4xx, ours 500. Each error
    answer is counted by status for ``/health``; a request whose client closed the connection
    first (its handler is cancelled, nothing is answered) is logged and counted as 499."""
    try:
        response = await _answer(request, handler)
    except asyncio.CancelledError:
        transport = request.transport
        if transport is None or transport.is_closing():
            logger.info(
                "%s %s -> %d: the client closed the connection before the answer",
                request.method,
                request.path,
                CLIENT_CLOSED,
            )
            request.app[STATE].errors[str(CLIENT_CLOSED)] += 1
        raise
    if response.status >= 400:
        request.app[STATE].errors[str(response.status)] += 1
    return response


async def _answer(request: web.Request, handler) -> web.StreamResponse:
    """The handler's response, or the JSON error body of its failure."""
    try:
        return await handler(request)
    except BadRequest as e:
        logger.info("%s %s -> %d: %s", request.method, request.path, e.status, e.message)
        return web.json_response(e.body(), status=e.status, headers=e.headers)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        message = f"{request.method} {request.path}: {e.reason}"
        return web.json_response(BadRequest(message, e.status).body(), status=e.status)
    except Exception as e:  # a bug or engine failure: answer, log, keep serving
        logger.exception("%s %s failed", request.method, request.path)
        body = BadRequest(f"{type(e).__name__}: {e}", 500).body()
        return web.json_response(body, status=500)


async def _health(request: web.Request) -> web.Response:
    """``status``, the protocol spoken, pause state, weight version, requests per path, the queue's counters, error
    answers by status, generated tokens (total and per second over the last ten seconds),
    resident memory and the image ``size`` the served processor resizes to (which clients must
    match)."""
    state: ServerState = request.app[STATE]
    return web.json_response(
        {
            "status": "ok",
            "protocol": request.app[SERVED_PROTOCOL],
            "paused": not state.running.is_set(),
            "version": state.engine.get_version(),
            "requests": dict(state.requests),
            "queue": state.admission.snapshot(),
            "errors": dict(state.errors),
            "generated_tokens": state.tokens.total,
            "tokens_per_s": round(state.tokens.per_second(), 3),
            "rss_bytes": resident_bytes(),
            "image_size": state.image_size(),
        }
    )


SERVED_PROTOCOL: web.AppKey[str] = web.AppKey("protocol", str)
"""The protocol the application speaks, which ``/health`` names (clients check it before use)."""

NO_BOUND = QueueLimits()
"""Queue limits that bound nothing (``build_app``'s default; the command line sets bounds)."""


def _weights_root(engine: Any, weights_root: str | Path | None) -> Path:
    if weights_root is not None:
        return Path(weights_root).resolve()
    folder = getattr(engine.model.config, "name_or_path", "")
    if not folder or not Path(folder).is_dir():
        raise ValueError(
            "build_app(control=True) needs weights_root: the engine's model was not loaded from "
            f"a folder whose parent could be the root (name_or_path={folder!r})"
        )
    return Path(folder).resolve().parent


def build_app(
    engine: Any,
    protocol: str = "sglang",
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_image_pixels: int | None = None,
    max_image_bytes: int | None = None,
    max_video_frame_pixels: int | None = None,
    frames: FrameSampling | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    destroy_engine: bool = False,
    api_key: str | None = None,
    control: bool = True,
    weights_root: str | Path | None = None,
    limits: QueueLimits = NO_BOUND,
    body_idle_timeout_s: float = BODY_IDLE_TIMEOUT_S,
) -> web.Application:
    """An aiohttp application serving ``engine`` over ``protocol`` (``sglang`` or ``vllm``).

    Args:
        engine: An initialised :class:`~vlrollout.engine.LocalInferenceEngine`.
        protocol: Which HTTP subset to speak (:mod:`vlrollout.serve.sglang`,
            :mod:`vlrollout.serve.vllm`); ``GET /health`` is always there.
        max_body_bytes: Larger bodies get 413.
        max_image_pixels: Largest decoded image (default: the processors' limit).
        max_image_bytes: Largest encoded image (default: the processors' limit).
        max_video_frame_pixels: Largest decoded video frame (default: the processors' limit).
        frames: How requests' videos are sampled (default: the model family's settings).
        min_pixels, max_pixels: Each image's pixel budget (default: the processor's settings);
            clients must build ``input_ids`` with the same.
        destroy_engine: Call ``engine.destroy()`` when the application shuts down.
        api_key: Every route answers 401 unless the request carries
            ``Authorization: Bearer <api_key>`` (``None``: no key).
        control: Serve the pause, continue and weight-update routes (``False``: they are 404).
        weights_root: Weight updates load only from folders under it (default: the parent of
            the engine's model folder).
        limits: Bounds on queued generation requests and their bytes (default: none); beyond
            them a request gets 503 with ``Retry-After``.
        body_idle_timeout_s: A body none of whose bytes arrive for this long gets 408
            (:data:`BODY_IDLE_TIMEOUT_S`).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if protocol == "sglang":
        from vlrollout.serve.sglang import CONTROL_ROUTES, ROUTES

        get_routes = {}
    else:
        from vlrollout.serve.vllm import CONTROL_ROUTES, ROUTES
        from vlrollout.serve.vllm import GET_ROUTES as get_routes

    root = _weights_root(engine, weights_root) if control else None
    admission = Admission(limits, on_drain=trim_after_drain(), on_large_decode=trim_soon)
    middlewares = [_errors, *([key_middleware(api_key)] if api_key else [])]
    middlewares.append(admission_middleware(admission, set(ROUTES), max_body_bytes))
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
    app[SERVED_PROTOCOL] = protocol

    async def on_startup(app: web.Application) -> None:  # the Event needs the running loop
        app[STATE] = ServerState(
            engine,
            max_image_pixels=max_image_pixels,
            max_image_bytes=max_image_bytes,
            max_video_frame_pixels=max_video_frame_pixels,
            max_body_bytes=max_body_bytes,
            frames=frames,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            weights_root=root,
            admission=admission,
            body_idle_timeout_s=body_idle_timeout_s,
        )

    async def on_shutdown(app: web.Application) -> None:
        app[STATE].stop()

    async def on_cleanup(app: web.Application) -> None:
        if destroy_engine:
            engine.destroy()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    app.router.add_get("/health", _health)
    for path, fn in ROUTES.items():
        app.router.add_post(path, _json_route(fn))
    for path, fn in (CONTROL_ROUTES if control else {}).items():
        app.router.add_post(path, _json_route(fn, browsers=False))
    for path, get in get_routes.items():
        app.router.add_get(path, get)
    return app
