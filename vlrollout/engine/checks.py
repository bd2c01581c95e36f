"""Checks of an engine section that need no model: run before anything is loaded, so a typo in a
path, a device or an address costs nothing (``vlrollout run``, ``vlrollout eval``,
``vlrollout serve``)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from pathlib import Path

from vlrollout.engine.config import EngineConfig, is_device_name
from vlrollout.errors import ConfigError

WEIGHTS_CHECK = "/vlrollout/check_weights_path"
"""``vlrollout serve``'s route, POST ``{"model_path": folder}``: 200 if a weight update could
load from ``folder`` (which need not exist yet), else the 403 that update would get. Not in
SGLang's or vLLM's protocol; ``vlrollout train`` asks it before its first rollout."""


def check_engine(cfg: EngineConfig) -> None:
    """Refuse an engine that cannot start, before loading anything.

    Raises:
        ConfigError: no model folder, CUDA asked for but absent, or a server that does not answer.
    """
    model = Path(cfg.model).expanduser()
    if not model.is_dir():
        what = "is a file" if model.exists() else "does not exist"
        shipped = Path(__file__).resolve().parents[2] / "assets" / "tiny-qwen2vl"
        hint = f" (the tiny model shipped in this checkout: {shipped})" if shipped.is_dir() else ""
        raise ConfigError(
            f"model folder {cfg.model} {what}; pass --model PATH to a local folder with "
            f"config.json and the weights (nothing is downloaded){hint}"
        )
    if cfg.kind == "local" and not (model / "config.json").is_file():
        raise ConfigError(
            f"model folder {cfg.model} has no config.json; pass --model PATH to a saved "
            "transformers model (save_pretrained)"
        )
    if cfg.kind == "local":
        check_cuda(cfg.device)
    for address in cfg.addresses if cfg.kind != "local" else []:
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=3).close()
        except OSError as e:
            raise ConfigError(
                f"cannot reach the {cfg.kind} server at {address} "
                f"({e.strerror or type(e).__name__}); start it first (docs/scale_out.md) "
                "or fix --address"
            ) from None
        check_protocol(cfg.kind, address)


GENERATION_ROUTES = {"sglang": "/generate", "vllm": "/v1/completions"}
"""The POST route AReaL's client of each protocol generates through."""


def check_protocol(kind: str, address: str) -> None:
    """Refuse a server at ``address`` that does not speak ``kind``'s protocol: ``vlrollout
    serve`` names its protocol in ``/health``; another server is asked for ``kind``'s generation
    route with a GET, which a server that has the route answers 405 (it takes POST) and one that
    lacks it 404. Any other answer, or none (a key required, a slow server), is left to the run.

    Raises:
        ConfigError: The server speaks another protocol.
    """
    spoken = _served_protocol(address)
    if spoken is not None:
        if spoken != kind:
            raise ConfigError(
                f"the {kind} server at {address} speaks {spoken}'s protocol (its /health says "
                f"so), not {kind}'s; pass the protocol it speaks"
            )
        return
    route = GENERATION_ROUTES[kind]
    try:
        urllib.request.urlopen(f"http://{address}{route}", timeout=3).close()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise ConfigError(
                f"the {kind} server at {address} has no {route} (404): it does not speak "
                f"{kind}'s protocol; start it with that protocol or name the one it speaks"
            ) from None
    except (OSError, ValueError):
        pass


def check_device(device: str, flag: str = "--device") -> None:
    """Refuse a device name the engine does not take, or CUDA where there is none, naming
    ``flag``.

    Raises:
        ConfigError: not ``cpu``, ``cuda`` or ``cuda:N``, or a CUDA device this machine lacks.
    """
    if not is_device_name(device):
        raise ConfigError(f"{flag} must be cpu, cuda or cuda:N, got {device!r}")
    check_cuda(device, flag)


def check_cuda(device: str, flag: str = "--device") -> None:
    """Refuse ``cuda`` / ``cuda:N`` where torch sees no such device; other devices pass."""
    if not device.startswith("cuda"):
        return
    import torch  # only for a CUDA device: the other checks run before torch is imported

    if not torch.cuda.is_available():
        raise ConfigError(
            f"{flag} {device}: CUDA is not available here "
            f"(torch {torch.__version__}); use {flag} cpu"
        )
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ConfigError(
            f"{flag} {device}: only {torch.cuda.device_count()} CUDA device(s); "
            f"use cuda:0 … cuda:{torch.cuda.device_count() - 1}"
        )


def _served_protocol(address: str) -> str | None:
    """The protocol a ``vlrollout serve`` at ``address`` names in ``/health``; ``None`` for any
    other answer (another server, a key required, none)."""
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=3) as r:
            health = json.loads(r.read() or b"null")
    except (OSError, ValueError):
        return None
    spoken = health.get("protocol") if isinstance(health, dict) else None
    return spoken if spoken in GENERATION_ROUTES else None
