"""Which model families ``vlrollout train`` can train with AReaL 1.0.4's FSDP actor.

Checked from the model's ``config.json`` alone (``transformers.AutoConfig``), before any weights
load, so a family the trainer cannot run is refused at start-up in one line instead of failing
inside the first training step.
"""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig

from vlrollout.errors import ConfigError

NOT_TRAINABLE: dict[str, str] = {
    "gemma3": (
        "AReaL 1.0.4's FSDP actor never passes the token_type_ids Gemma 3's forward requires in "
        "training mode (ValueError: `token_type_ids` is required as a model input when "
        "training), and its packed forward attends causally over each image, where Gemma 3 "
        "attends bidirectionally within an image (trainer logprobs 0.38 from the rollout's)"
    ),
}
"""``model_type`` → why AReaL's FSDP actor cannot train it (observed on the tiny random model of
the family, :mod:`vlrollout.testing.tiny_families`)."""

AREAL_VISION_MODELS: tuple[str, ...] = (
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_5",
    "qwen3_vl_moe",
)
"""Families AReaL 1.0.4 loads as vision models itself, checked here (packed logprobs equal the
rollout's, ``ppo_update``'s gradient equals the per-sequence one, two ``vlrollout train`` steps)."""

EXTRA_VISION_MODELS: tuple[str, ...] = (
    "llava",
    "llava_onevision",
    "idefics3",
    "smolvlm",
    "internvl",
    "mistral3",
    "glm4v",
    "lfm2_vl",
)
"""Families AReaL does not list as vision models, checked here as :data:`AREAL_VISION_MODELS`
are; :func:`vlrollout.train.actor.build_actor` registers them with AReaL
(:func:`vlrollout.compat.areal.register_vision_model`) so it loads them as vision models."""

PADDED_IMAGE_KEYS: dict[str, tuple[str, ...]] = {
    "llava_onevision": ("pixel_values",),
    "idefics3": ("pixel_values", "pixel_attention_mask"),
    "mistral3": ("pixel_values",),
    "smolvlm": ("pixel_values", "pixel_attention_mask"),
}
"""Image tensors whose shape past dim 0 differs between sequences (tiles per image, images per
item, image height and width) and whose zero padding the model ignores: padded across a batch before AReaL concatenates them."""

VISION_EMBEDDINGS_IN_PARENT: tuple[str, ...] = ("glm4v", "lfm2_vl")  # GLM-4.1V, SigLIP2
"""Families whose vision embeddings read their position table outside its forward: FSDP keeps
the table in the unit that holds it (:func:`vlrollout.compat.areal.keep_vision_embeddings_in_parent`)."""

TRAINABLE: tuple[str, ...] = AREAL_VISION_MODELS + EXTRA_VISION_MODELS
"""Every family ``vlrollout train`` trains."""


def config_at(path: str) -> Any | None:
    """The transformers config at ``path`` (folder or hub id, local files only), ``None`` when it
    cannot be read here (the model loader reports that)."""
    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        return None


def model_type_at(path: str) -> str | None:
    """The ``model_type`` of the config at ``path``, ``None`` if unreadable."""
    config = config_at(path)
    return None if config is None else config.model_type


def refusal(hf_config: Any) -> str | None:
    """Why ``vlrollout train`` refuses a model config, or ``None`` when it can train it.

    A vision-language family (its config has a ``vision_config``) is trained only when it is in
    :data:`TRAINABLE`; a text-only model is AReaL's own business.

    >>> from transformers import Gemma3Config, Qwen2VLConfig
    >>> refusal(Qwen2VLConfig()) is None, refusal(Gemma3Config()).startswith("model family")
    (True, True)
    """
    model_type = getattr(hf_config, "model_type", None)
    reason = NOT_TRAINABLE.get(model_type)
    if reason is None and model_type not in TRAINABLE and hasattr(hf_config, "vision_config"):
        reason = (
            "vlrollout has not checked AReaL 1.0.4's FSDP actor on it (packed logprobs equal to "
            f"the rollout's, the packed gradient); trained families: {', '.join(TRAINABLE)}"
        )
    return None if reason is None else f"model family {model_type!r} cannot be trained: {reason}"


def trains(family: str) -> str:
    """``"yes"`` when ``vlrollout train`` trains ``family`` (a ``model_type``), else the reason it
    refuses it at start-up (the family table's "trains" column).

    >>> trains("qwen2_vl"), trains("gemma3").startswith("no: ")
    ('yes', True)
    """
    if family in TRAINABLE:
        return "yes"
    reason = NOT_TRAINABLE.get(family)
    if reason is None:
        reason = "not checked with AReaL 1.0.4's FSDP actor, so refused at start-up"
    return f"no: {reason}"


def check_trainable(path: str) -> None:
    """Refuse the model at ``path`` (a folder or hub id) when its family cannot be trained.

    A config that cannot be read here is left to the model loader, which reports it.

    Raises:
        vlrollout.errors.ConfigError: the family and the reason, in one line.
    """
    hf_config = config_at(path)
    if hf_config is None:
        return
    reason = refusal(hf_config)
    if reason is not None:
        raise ConfigError(f"actor.path={path}: {reason}")
