"""CPU-safe trainer defaults, chosen automatically where there is no GPU.

AReaL 1.0's defaults assume CUDA and flash-attn: on a CPU-only machine
``attn_impl="flash_attention_2"`` raises ImportError, ``dtype="bfloat16"`` makes trainer logprobs
drift from a float32 rollout by hundredths of a nat, and AReaL's vocab-parallel logprob helper is
``torch.compile``d (slow on the first call, and it needs a C++ compiler). :func:`apply_cpu_defaults` changes exactly those
and returns one line per change, for the log.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch


def has_flash_attn() -> bool:
    """Whether the ``flash_attn`` package (varlen kernels that keep packed sequences apart) exists."""
    return importlib.util.find_spec("flash_attn") is not None


def has_gpu() -> bool:
    return torch.cuda.is_available()


def disable_compile() -> None:
    """Run AReaL's ``torch.compile``d helpers eagerly (env for child processes, config for this one)."""
    os.environ["TORCHDYNAMO_DISABLE"] = "1"
    from vlrollout.compat.torch import disable_dynamo  # after the variable: dynamo reads it

    disable_dynamo()


def apply_cpu_defaults(actor_config: Any, *, gpu: bool | None = None) -> list[str]:
    """Make an AReaL ``TrainEngineConfig`` runnable on the CPU; returns what was changed and why.

    Without a GPU: ``attn_impl`` → ``sdpa`` (unless already ``sdpa``/``eager``), ``dtype`` →
    ``float32``, ``gradient_checkpointing`` off, and ``torch.compile`` disabled. With a GPU
    nothing changes.

    >>> from areal.api.cli_args import PPOActorConfig
    >>> cfg = PPOActorConfig(experiment_name="e", trial_name="t")
    >>> msgs = apply_cpu_defaults(cfg, gpu=False)
    >>> cfg.attn_impl, cfg.dtype
    ('sdpa', 'float32')
    """
    if gpu is None:
        gpu = has_gpu()
    if gpu:
        return []
    changes: list[str] = []
    if actor_config.attn_impl not in ("sdpa", "eager"):
        changes.append(
            f"attn_impl {actor_config.attn_impl} -> sdpa (no GPU: flash-attn cannot run)"
        )
        actor_config.attn_impl = "sdpa"
    if actor_config.dtype != "float32":
        changes.append(
            f"dtype {actor_config.dtype} -> float32 (no GPU: bf16 trainer logprobs drift ~0.05 "
            f"from the float32 rollout)"
        )
        actor_config.dtype = "float32"
    if actor_config.gradient_checkpointing:
        changes.append("gradient_checkpointing on -> off (no GPU: memory is not the limit)")
        actor_config.gradient_checkpointing = False
    disable_compile()
    changes.append("torch.compile off (TORCHDYNAMO_DISABLE=1: no compiler wait on the CPU)")
    return changes
