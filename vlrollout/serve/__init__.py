"""``vlrollout serve``: the embedded engine behind SGLang's and AReaL's vLLM HTTP protocols.

AReaL's own ``RemoteSGLangEngine`` / ``RemotevLLMEngine`` talk to this server exactly as they
talk to SGLang or AReaL's vLLM server at scale, so the client code users deploy is exercised
on one CPU. :func:`~vlrollout.serve.app.build_app` builds the aiohttp application;
:func:`~vlrollout.serve.main.serve` loads a model and runs it.

Exports are resolved lazily so ``import vlrollout.serve`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["BadRequest", "ServerState", "build_app", "serve"]

_EXPORTS = {
    "BadRequest": "vlrollout.serve.errors",
    "ServerState": "vlrollout.serve.state",
    "build_app": "vlrollout.serve.app",
    "serve": "vlrollout.serve.main",
}

if TYPE_CHECKING:
    from vlrollout.serve.app import build_app
    from vlrollout.serve.errors import BadRequest
    from vlrollout.serve.main import serve
    from vlrollout.serve.state import ServerState


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'vlrollout.serve' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
