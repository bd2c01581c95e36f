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
        "AReaL 1.0.4's FSDP actor cannot run its forward: under FSDP2 the SigLIP vision tower "
        "fails with 'aten.embedding.default got mixed torch.Tensor and DTensor', and AReaL never "
        "passes the token_type_ids Gemma 3 requires in training mode"
    ),
}
"""``model_type`` → why AReaL's FSDP actor cannot train it (observed on the tiny random model of
the family, :mod:`vlrollout.testing.tiny_families`)."""


def refusal(hf_config: Any) -> str | None:
    """Why ``vlrollout train`` refuses a model config, or ``None`` when it can train it.

    >>> from transformers import Gemma3Config, Qwen2VLConfig
    >>> refusal(Qwen2VLConfig()) is None, refusal(Gemma3Config()).startswith("model family")
    (True, True)
    """
    model_type = getattr(hf_config, "model_type", None)
    reason = NOT_TRAINABLE.get(model_type)
    return None if reason is None else f"model family {model_type!r} cannot be trained: {reason}"


def check_trainable(path: str) -> None:
    """Refuse the model at ``path`` (a folder or hub id) when its family cannot be trained.

    A config that cannot be read here is left to the model loader, which reports it.

    Raises:
        vlrollout.errors.ConfigError: the family and the reason, in one line.
    """
    try:
        hf_config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        return
    reason = refusal(hf_config)
    if reason is not None:
        raise ConfigError(f"actor.path={path}: {reason}")
