"""Building the engine ``vlrollout run`` uses: our local one, or AReaL's remote SGLang/vLLM ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from areal.api import InferenceEngine


class EngineConfig(Protocol):
    """What the factory reads from a recipe's engine settings (``vlrollout run``'s ``engine:``)."""

    kind: str  # "local", "sglang" or "vllm"
    model: str  # local model folder; the tokenizer/processor path for remote engines
    device: str  # local engine only
    addresses: Sequence[str]  # host:port of the servers, remote engines only


def remote_engine(cfg: EngineConfig, max_concurrent_rollouts: int | None = None) -> InferenceEngine:
    """AReaL's own remote engine for ``cfg.kind`` (``sglang``/``vllm``), not yet initialised.

    Call ``engine.initialize(addr=cfg.addresses)`` to connect; we never build our own client.
    """
    if cfg.kind == "sglang":
        from areal.engine.sglang_remote import RemoteSGLangEngine as cls
    elif cfg.kind == "vllm":
        from areal.engine.vllm_remote import RemotevLLMEngine as cls
    else:
        raise ValueError(f"{cfg.kind!r} is not a remote engine kind")
    return cls.from_pretrained(
        tokenizer_path=cfg.model, max_concurrent_rollouts=max_concurrent_rollouts
    )


def make_engine(
    cfg: EngineConfig,
    seed: int = 0,
    max_concurrent_rollouts: int | None = None,
    **local_kwargs: Any,
) -> Any:
    """An initialised engine for ``cfg``; call ``destroy()`` when done.

    ``local_kwargs`` go to the local engine's constructor (e.g. ``deterministic=True``).
    """
    if cfg.kind == "local":
        from vlrollout.engine.local import LocalInferenceEngine

        engine = LocalInferenceEngine.from_pretrained(
            cfg.model, device=cfg.device, seed=seed, **local_kwargs
        )
        engine.initialize()
        return engine
    engine = remote_engine(cfg, max_concurrent_rollouts)
    engine.initialize(addr=cfg.addresses)
    return engine
