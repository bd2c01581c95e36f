"""The settings that shape a training run's results, kept in its output folder so a rerun that
resumes it trains on with the same ones.

A rerun of ``vlrollout train`` into a folder with a checkpoint resumes from it; one with another
learning rate, reward, data (its path or its contents), group size or model would carry the run
on as something else and mix both in ``metrics.jsonl``. :func:`check_settings` refuses it,
naming each difference. Settings a resume may change (``total_train_steps``, evaluation and
logging cadence, progress bars) are not kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from vlrollout.errors import ConfigError
from vlrollout.files import atomic_write_json, data_sha256, differences

SETTINGS_FILE = "settings.json"

RESULT_SETTINGS = (
    "seed",
    "total_train_epochs",
    "actor.path",
    "actor.optimizer",
    "actor.use_lora",
    "actor.lora_rank",
    "actor.lora_alpha",
    "actor.target_modules",
    "actor.eps_clip",
    "actor.eps_clip_higher",
    "actor.c_clip",
    "actor.m2_threshold",
    "actor.kl_ctl",
    "actor.kl_estimator",
    "actor.ppo_n_minibatches",
    "actor.use_decoupled_loss",
    "actor.reward_scaling",
    "actor.reward_bias",
    "actor.reward_clip",
    "actor.reward_norm",
    "actor.adv_norm",
    "actor.overlong_reward_penalty",
    "actor.overlong_tokens",
    "actor.overlong_penalty_factor",
    "actor.mask_no_eos_with_zero",
    "actor.discount",
    "actor.gae_lambda",
    "actor.use_sapo_loss",
    "actor.sapo_tau_pos",
    "actor.sapo_tau_neg",
    "actor.rejection_sampling",
    "actor.importance_sampling_level",
    "actor.prox_logp_method",
    "actor.recompute_logprob",
    "actor.temperature",
    "gconfig",
    "rollout.max_head_offpolicyness",
    "train_dataset.path",
    "train_dataset.batch_size",
    "valid_dataset.path",
    "vlrollout.task",
    "vlrollout.train_items",
    "vlrollout.data_seed",
    "vlrollout.eval_items",
    "vlrollout.eval_seed",
    "vlrollout.eval_task",
    "vlrollout.box_format",
    "vlrollout.eval_box_format",
    "vlrollout.eval_samples",
    "vlrollout.reward",
    "vlrollout.ground_metric",
    "vlrollout.data_format",
    "vlrollout.data_map",
    "vlrollout.images_root",
    "vlrollout.prompt",
    "vlrollout.freeze_vision_tower",
    "vlrollout.freeze_projector",
    "vlrollout.dynamic_sampling",
    "vlrollout.dynamic_sampling_rounds",
    "vlrollout.dynamic_sampling_scale",
    "vlrollout.min_pixels",
    "vlrollout.max_pixels",
    "vlrollout.video_fps",
    "vlrollout.video_max_frames",
    "vlrollout.video_min_pixels",
    "vlrollout.video_max_pixels",
)
"""Dotted config keys whose values shape what the run trains and reports."""

DATA_FILES = ("train_dataset", "valid_dataset")
"""Sections whose data file's contents are kept too (``SECTION.sha256``): a file rewritten in
place, or another one at the same relative path from another folder, is other data."""


def _value(cfg: Any, dotted: str) -> Any:
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__ if not k.startswith("_")}
    return value


def _leaves(key: str, value: Any, out: dict[str, Any]) -> None:
    """``value`` under ``key`` as JSON keeps it, a mapping flattened into dotted keys (an empty
    one kept as ``{}``, so a later run that fills it differs)."""
    if isinstance(value, dict) and not value:
        out[key] = {}
    elif isinstance(value, dict):
        for k, v in value.items():
            if not str(k).startswith("_"):
                _leaves(f"{key}.{k}", v, out)
    elif isinstance(value, (set, frozenset)):
        out[key] = sorted(str(v) for v in value)
    elif isinstance(value, (list, tuple)):
        out[key] = [v if isinstance(v, (str, int, float, bool)) else str(v) for v in value]
    elif isinstance(value, (str, int, float, bool)) or value is None:
        out[key] = value
    else:
        out[key] = str(value)


def _root(key: str) -> str | None:
    """The :data:`RESULT_SETTINGS` key that dotted ``key`` is, or is a leaf of."""
    return next((r for r in RESULT_SETTINGS if key == r or key.startswith(f"{r}.")), None)


def run_settings(cfg: Any) -> dict[str, Any]:
    """The :data:`RESULT_SETTINGS` of ``cfg``, by dotted key down to each leaf."""
    out: dict[str, Any] = {}
    for key in RESULT_SETTINGS:
        _leaves(key, _value(cfg, key), out)
    for section in DATA_FILES:
        path = _value(cfg, f"{section}.path")
        if path and Path(path).exists():
            out[f"{section}.sha256"] = data_sha256(path)
    return out


def check_settings(out: Path, cfg: Any, resuming: bool) -> None:
    """Refuse to resume the run in ``out`` with other settings; record this run's settings.

    A settings file written before some of today's keys were kept holds the run to the keys it
    has. A setting recorded empty or null and given leaves now (``actor.adv_norm``) is compared
    leaf by leaf, as is one recorded with leaves and given as null.

    Raises:
        ConfigError: ``resuming`` and the recorded settings differ, naming each difference; or
            ``out`` holds a ``vlrollout run``'s results.
    """
    path = out / SETTINGS_FILE
    if not path.exists() and (out / "summary.json").is_file() and (out / "items").is_dir():
        raise ConfigError(
            f"vlrollout.output {out} holds the results of a vlrollout run (summary.json, items/): "
            "training would write its report over the run's; use another vlrollout.output"
        )
    new = run_settings(cfg)
    if resuming and path.is_file():
        try:
            old = json.loads(path.read_text()).get("settings", {})
        except (OSError, ValueError, AttributeError):  # unreadable: nothing to hold the run to
            old = new
        kept = {_root(k) for k in old} - {None}  # the keys that file's version recorded
        compared = {k: v for k, v in new.items() if k in old or _root(k) in kept}
        changed = differences(old, compared)
        if changed:
            raise ConfigError(
                f"vlrollout.output {out} holds a run trained with other settings "
                f"({'; '.join(changed)}): rerun with them to resume it, or use another "
                "vlrollout.output (or delete that folder) to start a new run"
            )
    atomic_write_json(path, {"settings": new})
