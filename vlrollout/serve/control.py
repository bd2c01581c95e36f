"""Pause, continue and load new weights: the same three actions under each protocol's paths.

SGLang: ``/pause_generation``, ``/continue_generation``, ``/update_weights_from_disk``; AReaL's
vLLM server: ``/areal_pause_generation``, ``/areal_continue_generation``, ``/areal_update_weights``.

A weight update loads only from a folder under the server's weights root (``--weights-root``,
default the served model's parent folder), resolved with symbolic links followed: a client must
not make the server load (and run the code paths of) any folder on the machine.
:data:`WEIGHTS_CHECK` (both protocols, vlrollout's own) answers as a weight update from a folder
would, without loading anything: ``vlrollout train`` asks it before its first rollout, so a
``cluster.fileroot`` outside the root stops the run at start with the server's reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from vlrollout.engine.checks import WEIGHTS_CHECK
from vlrollout.serve.errors import BadRequest, check_fields, check_flags, typed
from vlrollout.serve.state import STATE

Handler = Callable[[web.Request, Any], Awaitable[dict[str, Any]]]


def check_under_root(path: str, root: Path, where: str) -> None:
    """403 unless ``path``, with symbolic links and ``..`` resolved, lies under ``root``.

    >>> check_under_root("/srv/models/../../etc", Path("/srv/models"), "/update")
    Traceback (most recent call last):
    ...
    vlrollout.serve.errors.BadRequest: /update: model_path '/srv/models/../../etc' is outside the weights root /srv/models (vlrollout serve --weights-root)
    """
    try:
        resolved, allowed = Path(path).resolve(), root.resolve()
    except (ValueError, OSError) as e:  # a NUL byte, a name too long for the OS
        raise BadRequest(f"{where}: model_path {path!r} is no path: {e}") from None
    if not resolved.is_relative_to(allowed):
        raise BadRequest(
            f"{where}: model_path {path!r} is outside the weights root {allowed} "
            "(vlrollout serve --weights-root)",
            status=403,
        )


def control_routes(
    pause: str,
    resume: str,
    weights: str,
    pause_fields: Sequence[str] = (),
    pause_modes: Sequence[str] = (),
) -> dict[str, Handler]:
    """Handlers for the three control paths of one protocol (``pause_fields``: the optional body
    fields its pause request may carry, e.g. SGLang's ``mode``; ``pause_modes``: the values of
    ``mode`` this server does, pausing by aborting the requests in flight)."""

    async def pause_generation(request: web.Request, body: Any) -> dict[str, Any]:
        check_fields(body or {}, tuple(pause_fields), pause)
        mode = (body or {}).get("mode")
        if pause_modes and mode is not None and mode not in pause_modes:
            raise BadRequest(
                f"{pause}: mode must be one of {list(pause_modes)} (this server pauses by "
                f"aborting the requests in flight), got {mode!r}"
            )
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
        check_flags(body, ("abort_all_requests",), weights)
        if body.get("load_format") not in (None, "auto"):
            raise BadRequest(
                f"{weights}: load_format {body['load_format']!r} is not supported: this server "
                "loads a Hugging Face folder as transformers does (load_format 'auto' or none)"
            )
        check_under_root(path, request.app[STATE].weights_root, weights)
        version = await request.app[STATE].update_weights(
            path, bool(body.get("abort_all_requests", False))
        )
        return {
            "success": True,
            "message": f"loaded {path} (version {version})",
            "weight_version": version,
        }

    async def check_weights_path(request: web.Request, body: Any) -> dict[str, Any]:
        check_fields(body, ("model_path",), WEIGHTS_CHECK, required=["model_path"])
        path = typed(body, "model_path", str, WEIGHTS_CHECK)
        check_under_root(path, request.app[STATE].weights_root, WEIGHTS_CHECK)
        return {"success": True, "message": f"weight updates may load from {path}"}

    return {
        pause: pause_generation,
        resume: continue_generation,
        weights: update_weights,
        WEIGHTS_CHECK: check_weights_path,
    }
