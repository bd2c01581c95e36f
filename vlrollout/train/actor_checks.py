"""Checks of AReaL's actor settings that AReaL makes only once the model has loaded, or never:
each bad value is refused before launch in one line naming its key."""

from __future__ import annotations

import dataclasses
from typing import Any

from vlrollout.errors import ConfigError


def check_choices(obj: Any, prefix: str) -> None:
    """Refuse a value outside the ``choices`` an AReaL config field declares (its loader does not
    enforce them: ``importance_sampling_level=seq`` failed mid-run), in ``obj`` and the config
    sections inside it.

    >>> from areal.api.cli_args import PPOActorConfig
    >>> check_choices(PPOActorConfig(importance_sampling_level="seq"), "actor")
    Traceback (most recent call last):
    ...
    vlrollout.errors.ConfigError: actor.importance_sampling_level='seq' is not one of 'token', 'sequence'
    """
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name, None)
        choices = f.metadata.get("choices")
        if choices and not f.name.startswith("_") and value not in choices:
            shown = ", ".join(repr(c) for c in choices)
            raise ConfigError(f"{prefix}.{f.name}={value!r} is not one of {shown}")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_choices(value, f"{prefix}.{f.name}")


def check_reward_shaping(actor: Any) -> None:
    """Refuse a reward clip that empties the range AReaL clamps rewards to (every reward would
    become ``reward_clip`` and every advantage 0, while the logged rewards look normal) and an
    overlong penalty without its length and factor (AReaL asserts them at the first step)."""
    if not actor.reward_clip > 0:
        raise ConfigError(
            f"actor.reward_clip must be > 0 (rewards are clamped to [-clip, clip]), got "
            f"{actor.reward_clip}"
        )
    if actor.overlong_reward_penalty:
        missing = [
            k for k in ("overlong_tokens", "overlong_penalty_factor") if getattr(actor, k) is None
        ]
        if missing:
            raise ConfigError(
                f"actor.overlong_reward_penalty=true needs {' and '.join(f'actor.{k}' for k in missing)} "
                "(the length from which completions are penalised, and by how much)"
            )


def check_minibatches(cfg: Any, world_size: int) -> None:
    """Refuse more PPO minibatches than a process has sequences in a step, and a micro-batch
    capacity below one completion's length: AReaL fails on either only once the model has loaded,
    naming neither key."""
    sequences = cfg.train_dataset.batch_size // world_size * cfg.gconfig.n_samples
    if cfg.actor.ppo_n_minibatches > sequences:
        raise ConfigError(
            f"actor.ppo_n_minibatches={cfg.actor.ppo_n_minibatches} is more than the "
            f"{sequences} sequences each process trains on a step (train_dataset.batch_size / "
            f"processes x gconfig.n_samples)"
        )
    capacity = cfg.actor.mb_spec.max_tokens_per_mb
    if capacity is not None and capacity <= cfg.gconfig.max_new_tokens:
        raise ConfigError(
            f"actor.mb_spec.max_tokens_per_mb={capacity} cannot hold one sequence: a completion "
            f"alone may take gconfig.max_new_tokens={cfg.gconfig.max_new_tokens} tokens, and its "
            "prompt more"
        )
