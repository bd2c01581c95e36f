"""Building an engine from the engine section: our local one, or AReaL's remote SGLang/vLLM ones.

:func:`remote_engine` is the one place an AReaL remote engine is built, for ``vlrollout run``,
``vlrollout train`` and the tests that drive ``vlrollout serve``; we never build our own client.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from areal.api import InferenceEngine
from areal.api.cli_args import InferenceEngineConfig

from vlrollout.engine.config import EngineConfig


def remote_engine(
    kind: str, config: InferenceEngineConfig | None = None, **fields: Any
) -> InferenceEngine:
    """AReaL's own remote engine for ``kind`` (``sglang``/``vllm``), not yet initialised.

    Args:
        kind: ``sglang`` (``RemoteSGLangEngine``) or ``vllm`` (``RemotevLLMEngine``).
        config: AReaL's rollout config (``vlrollout train`` passes its ``rollout`` section);
            ``None``: AReaL's defaults.
        **fields: ``InferenceEngineConfig`` fields that replace the config's
            (``tokenizer_path``, ``max_concurrent_rollouts``, ``experiment_name``, ...).

    The config's ``backend`` names the protocol (``sglang:d1``), as AReaL's ``from_pretrained``
    writes it. Call ``engine.initialize(addr=addresses)`` to connect.
    """
    if kind == "sglang":
        from areal.engine.sglang_remote import RemoteSGLangEngine as cls
    elif kind == "vllm":
        from areal.engine.vllm_remote import RemotevLLMEngine as cls
    else:
        raise ValueError(f"{kind!r} is not a remote engine kind (sglang or vllm)")
    config = dataclasses.replace(config or InferenceEngineConfig(), **fields)
    if not config.backend.startswith(f"{kind}:"):
        config = dataclasses.replace(config, backend=f"{kind}:d1")
    return cls(config)


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
            cfg.model,
            device=cfg.device,
            seed=seed,
            **{"max_batch_size": cfg.max_batch_size, **local_kwargs},
        )
        engine.initialize()
        return engine
    engine = remote_engine(
        cfg.kind, tokenizer_path=cfg.model, max_concurrent_rollouts=max_concurrent_rollouts
    )
    engine.initialize(addr=list(cfg.addresses))
    return engine
