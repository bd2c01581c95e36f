"""Pause, continue and load new weights: the same three actions under each protocol's paths.

SGLang: ``/pause_generation``, ``/continue_generation``, ``/update_weights_from_disk``; AReaL's
vLLM server: ``/areal_pause_generation``, ``/areal_continue_generation``, ``/areal_update_weights``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from vlrollout.serve.errors import check_fields, typed
from vlrollout.serve.state import STATE

Handler = Callable[[web.Request, Any], Awaitable[dict[str, Any]]]


def control_routes(
    pause: str, resume: str, weights: str, pause_fields: Sequence[str] = ()
) -> dict[str, Handler]:
    """Handlers for the three control paths of one protocol (``pause_fields``: the optional body
    fields its pause request may carry, e.g. SGLang's ``mode``)."""

    async def pause_generation(request: web.Request, body: Any) -> dict[str, Any]:
        check_fields(body or {}, tuple(pause_fields), pause)
        aborted = await request.app[STATE].pause()
        return {"success": True, "message": f"generation paused; aborted {aborted} request(s)"}

    async def continue_generation(request: web.Request, body: Any) -> dict[str, Any]:
        check_fields(body or {}, (), resume)
        await request.app[STATE].resume()
        return {"success": True, "message": "generation continued"}

    async def update_weights(request: web.Request, body: Any) -> dict[str, Any]:
        check_fields(
            body,
            ("model_path", "abort_all_requests", "load_format"),
            weights,
            required=["model_path"],
        )
        path = typed(body, "model_path", str, weights)
        version = await request.app[STATE].update_weights(
            path, bool(body.get("abort_all_requests", False))
        )
        return {
            "success": True,
            "message": f"loaded {path} (version {version})",
            "weight_version": version,
        }

    return {pause: pause_generation, resume: continue_generation, weights: update_weights}
