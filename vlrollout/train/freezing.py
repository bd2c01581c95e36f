"""Freezing the vision tower and the projector (``vlrollout.freeze_vision_tower`` /
``vlrollout.freeze_projector``).

AReaL 1.0.4's config has no such keys (its ``TrainEngineConfig`` freezes nothing but what LoRA
leaves out), so they live under ``vlrollout:``. Frozen means ``requires_grad=False`` before
AReaL builds the optimizer: :func:`install` wraps the actor's ``_create_optimizer``, which
``FSDPEngine.initialize`` calls after peft's wrapper (so LoRA adapters inside a frozen part are
frozen too) and after FSDP2's ``fully_shard``. FSDP2 copies ``requires_grad`` from the sharded
parameter to the gathered one at every all-gather and reduces only gradients of parameters that
require them, so a frozen parameter never gets a gradient: AdamW (which skips parameters
without one) never changes it, weight decay included, and AReaL's grad-norm clipping
(``get_main_grads_for_grad_norm``) counts only gradients that exist.

The parts are found by module name, one table for every family (:data:`TOWERS`,
:data:`PROJECTORS`), not per ``model_type``. transformers' VLM classes name the vision encoder
``visual`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5: the projector, ``merger``, and Qwen3-VL's
``deepstack_merger_list``, sit inside it), ``vision_tower`` (LLaVA, LLaVA-OneVision, Gemma 3:
projector ``multi_modal_projector`` beside it) or ``vision_model`` (Idefics3, SmolVLM: projector
``connector`` beside it). The tower means the encoder *without* the projector, so the two keys
are independent: the tower alone is LLaVA's recipe (train the projector and the language
model), both freeze everything visual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from vlrollout.compat.areal import wrap_create_optimizer
from vlrollout.errors import ConfigError

TOWERS: tuple[str, ...] = ("visual", "vision_tower", "vision_model")
"""Module names of vision encoders in transformers' VLM classes."""

PROJECTORS: tuple[str, ...] = (
    "merger",
    "deepstack_merger_list",
    "multi_modal_projector",
    "connector",
)
"""Module names of projectors, inside a tower (Qwen-VL) or beside it (LLaVA, Idefics3)."""


def vision_parts(model: torch.nn.Module) -> tuple[list[str], list[str]]:
    """``(towers, projectors)``: qualified names of the vision encoder(s) and projector(s).

    A projector counts only inside a tower or beside one (same parent), so a language-model
    module that happens to share a projector's name is never taken for one.

    >>> from vlrollout.testing.tiny_families import tiny_vlm
    >>> vision_parts(tiny_vlm("llava")[0])
    (['model.vision_tower'], ['model.multi_modal_projector'])
    """
    towers: list[str] = []
    for name, _ in model.named_modules():
        leaf = name.rpartition(".")[2]
        if leaf in TOWERS and not any(name.startswith(t + ".") for t in towers):
            towers.append(name)
    parents = {t.rpartition(".")[0] for t in towers}
    projectors: list[str] = []
    for name, _ in model.named_modules():
        parent, _, leaf = name.rpartition(".")
        inside = any(name.startswith(t + ".") for t in towers)
        if leaf in PROJECTORS and (inside or parent in parents):
            if not any(name.startswith(p + ".") for p in projectors):
                projectors.append(name)
    return towers, projectors


def freeze_vision(model: torch.nn.Module, *, vision_tower: bool, projector: bool) -> dict[str, int]:
    """Set ``requires_grad=False`` on the chosen parts; returns elements frozen per part.

    Raises:
        ConfigError: a part was asked for but the model has none of the names searched, or
            nothing trainable would be left.

    >>> from vlrollout.testing.tiny_families import tiny_vlm
    >>> model = tiny_vlm("qwen2_vl")[0]
    >>> frozen = freeze_vision(model, vision_tower=True, projector=False)
    >>> model.model.visual.blocks[0].attn.qkv.weight.requires_grad, model.model.visual.merger.mlp[0].weight.requires_grad
    (False, True)
    """
    if not (vision_tower or projector):
        return {}
    towers, projectors = vision_parts(model)
    asked = {
        "vision_tower": (vision_tower, towers, TOWERS),
        "projector": (projector, projectors, PROJECTORS),
    }
    for key, (on, found, names) in asked.items():
        if on and not found:
            raise ConfigError(
                f"vlrollout.freeze_{key}=true but {type(model).__name__} has no module named "
                f"{' or '.join(names)}; set it to false"
            )
    in_projector = {id(p) for name in projectors for p in model.get_submodule(name).parameters()}
    frozen = {"vision_tower": 0, "projector": 0}
    for name in towers:
        for p in model.get_submodule(name).parameters():
            part = "projector" if id(p) in in_projector else "vision_tower"
            if asked[part][0] and p.requires_grad:
                p.requires_grad_(False)
                frozen[part] += p.numel()
    for name in projectors:  # projectors beside the tower
        for p in model.get_submodule(name).parameters():
            if projector and p.requires_grad:
                p.requires_grad_(False)
                frozen["projector"] += p.numel()
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(
            "nothing left to train: the frozen vision parts hold every trainable parameter "
            "(with LoRA, actor.target_modules must adapt modules outside them)"
        )
    return {k: v for k, v in frozen.items() if asked[k][0]}


def install(actor: Any, *, vision_tower: bool, projector: bool) -> None:
    """Freeze the chosen parts of ``actor.model`` just before AReaL builds the optimizer.

    Call before ``actor.initialize``; a no-op when both are ``False``. The counts frozen are
    kept in ``actor.vlrollout_frozen`` for the log.
    """
    if not (vision_tower or projector):
        return

    def freezing_first(create_optimizer: Callable[[Any], None]) -> Callable[[Any], None]:
        def freeze_then_create(ft_spec: Any) -> None:
            actor.vlrollout_frozen = freeze_vision(
                actor.model, vision_tower=vision_tower, projector=projector
            )
            create_optimizer(ft_spec)

        return freeze_then_create

    wrap_create_optimizer(actor, freezing_first)
