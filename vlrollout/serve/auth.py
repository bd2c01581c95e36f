"""The API key: checked on every route, read from a flag or the environment, and a warning for a
server that listens beyond loopback without one.

Clients send the key as vLLM's and SGLang's servers expect it, ``Authorization: Bearer <key>``
(the OpenAI client does so from its ``api_key``). The comparison is constant-time
(:func:`hmac.compare_digest`), so the answer's timing does not reveal how much of a guess was
right. AReaL 1.0.4's remote engines send no ``Authorization`` header (their aiohttp sessions are
built without headers and take none from configuration), so a trainer reaches a keyed server only
through a loopback server without a key (docs/serving.md, "Access").
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import os
import socket
from pathlib import Path

from aiohttp import web

from vlrollout.serve.errors import BadRequest

API_KEY_ENV = "VLROLLOUT_API_KEY"
"""The environment variable holding the key when ``--api-key`` is not given: an environment
variable stays out of ``ps`` listings, a command-line argument does not."""


def api_key(args: argparse.Namespace) -> str | None:
    """The key ``vlrollout serve`` requires: ``--api-key``, else ``$VLROLLOUT_API_KEY``; ``None``
    (no key) when neither is set or the variable is empty."""
    return getattr(args, "api_key", None) or os.environ.get(API_KEY_ENV) or None


def key_middleware(key: str):
    """An aiohttp middleware answering 401 to any request, on any path (unknown ones included),
    whose ``Authorization`` header is not ``Bearer <key>``."""
    expected = f"Bearer {key}".encode()

    @web.middleware
    async def require_key(request: web.Request, handler) -> web.StreamResponse:
        # aiohttp decodes header bytes that are not UTF-8 with surrogateescape: back to bytes.
        sent = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(sent, expected):
            raise BadRequest(
                f"{request.method} {request.path}: missing or wrong API key "
                "(send 'Authorization: Bearer <key>')",
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await handler(request)

    return require_key


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (``localhost``,
    ``127.0.0.0/8``, ``::1``); an unresolvable host counts as not loopback."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {info[4][0].split("%")[0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def exposure_warning(host: str, key: str | None, control: bool, weights_root: Path) -> str | None:
    """What a server listening on ``host`` without a key exposes, or ``None`` when it has a key or
    listens on loopback only."""
    if key or is_loopback(host):
        return None
    reach = "generate"
    if control:
        reach += f", pause generation and load weights from any folder under {weights_root}"
    return (
        f"{host} is not a loopback address and no API key is set: anyone who reaches the port "
        f"can {reach}. Set {API_KEY_ENV} (or --api-key), bind to 127.0.0.1, or add --no-control "
        "for generation only"
    )
