"""Building AReaL's ``FSDPPPOActor`` in this process (world size 1, or one rank under torchrun).

AReaL picks its CPU platform and the gloo backend by itself; ``torch.distributed`` only needs the
rendezvous variables, which :func:`dist_env` fills for a single process (torchrun sets them for
several).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Iterator
from typing import Any

from vlrollout.logs import get_logger
from vlrollout.train.support import (
    EXTRA_VISION_MODELS,
    PADDED_IMAGE_KEYS,
    VISION_EMBEDDINGS_IN_PARENT,
    config_at,
    model_type_at,
)

logger = get_logger(__name__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SINGLE_PROCESS = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
"""The rendezvous variables of a world of one (``MASTER_PORT``: a free local port)."""


@contextlib.contextmanager
def dist_env() -> Iterator[dict[str, str]]:
    """Within the block, the rendezvous variables a launcher did not set hold a world of one.

    Yields every rendezvous variable's value. Those filled in are removed again on leaving (ones a
    launcher set are never touched), so the process environment is as it was: they are read only
    while the process group is created (``env://`` rendezvous) and the actor initialised (AReaL's
    ``LOCAL_RANK``); later readers fall back to ``torch.distributed`` or to a world of one.
    """
    added = {k: v for k, v in SINGLE_PROCESS.items() if k not in os.environ}
    if "MASTER_PORT" not in os.environ:
        added["MASTER_PORT"] = str(_free_port())
    os.environ.update(added)
    try:
        yield {k: os.environ[k] for k in (*SINGLE_PROCESS, "MASTER_PORT")}
    finally:
        for key, value in added.items():
            if os.environ.get(key) == value:
                del os.environ[key]


def pad_image_tensors(mm: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The sequences' ``multi_modal_input`` with each of ``keys`` zero-padded at the end of every
    dim but the first to the batch's largest, so the sequences' tensors concatenate on dim 0.

    For the families of :data:`vlrollout.train.support.PADDED_IMAGE_KEYS` the padding is inert:
    LLaVA-OneVision cuts each image's tiles to the count its ``image_sizes`` gives, Mistral 3
    (Pixtral) each image to its ``image_sizes``, Idefics3 and SmolVLM drop all-zero images. Their
    processors pad the same way within one call.
    """
    shapes = {k: [d[k].shape for d in mm if d and k in d] for k in keys}
    out = []
    for d in mm:
        d = dict(d or {})
        for k in keys:
            if k not in d:
                continue
            t = d[k]
            size = [t.shape[0], *(max(s[i] for s in shapes[k]) for i in range(1, t.dim()))]
            if list(t.shape) != size:
                padded = t.new_zeros(size)
                padded[tuple(slice(0, n) for n in t.shape)] = t
                d[k] = padded
        out.append(d)
    return out


def _install_image_padding(actor: Any, keys: tuple[str, ...]) -> None:
    """Pad ``keys`` across each batch's sequences before AReaL (and the packing fix) join them."""
    from vlrollout.compat.areal import wrap_prepare_mb_list

    def padding(original):
        @functools.wraps(original)
        def prepare(input_: dict[str, Any]):
            if input_.get("multi_modal_input"):
                mm = pad_image_tensors(input_["multi_modal_input"], keys)
                input_ = {**input_, "multi_modal_input": mm}
            return original(input_)

        return prepare

    wrap_prepare_mb_list(actor, padding)


def _set_wrap_policy(actor_config: Any) -> None:
    """:func:`vlrollout.compat.areal.fsdp_wrap_classes` as a vision model's FSDP wrap policy,
    unless the config names one."""
    from areal.api.cli_args import FSDPWrapPolicy

    from vlrollout.compat.areal import fsdp_wrap_classes

    fsdp = actor_config.fsdp
    if fsdp.wrap_policy is not None and fsdp.wrap_policy.transformer_layer_cls_to_wrap:
        return
    config = config_at(actor_config.path)
    if config is None or not hasattr(config, "vision_config"):
        return
    classes = fsdp_wrap_classes(config)
    if classes is not None:
        fsdp.wrap_policy = FSDPWrapPolicy(transformer_layer_cls_to_wrap=classes)
        logger.warning("FSDP wraps %s (no class holding an nn.Embedding)", classes)


def build_actor(
    actor_config: Any,
    ft_spec: Any,
    *,
    packing_fix: bool = True,
    freeze_vision_tower: bool = False,
    freeze_projector: bool = False,
    encode_images_once: bool = True,
) -> Any:
    """An initialised ``FSDPPPOActor`` for ``actor_config`` (a ``PPOActorConfig``).

    CPU-safe defaults (:func:`vlrollout.train.cpu.apply_cpu_defaults`) are applied and logged
    when there is no GPU; the packing fix (:mod:`vlrollout.train.packing`) is installed where
    flash-attn is absent (``packing_fix=False`` only to demonstrate the bug), with sdpa run per
    packed sequence (:mod:`vlrollout.train.packed_attention`). The vision parts
    asked for are frozen before the optimizer is built (:mod:`vlrollout.train.freezing`); with
    ``use_lora`` the actor's HF saves write merged weights (:mod:`vlrollout.train.lora`);
    with ``encode_images_once`` each forward encodes a distinct image once
    (:mod:`vlrollout.image_sharing`).
    """
    from areal.engine.fsdp_engine import FSDPPPOActor

    from vlrollout import image_sharing
    from vlrollout.compat.areal import keep_vision_embeddings_in_parent, register_vision_model
    from vlrollout.train import freezing, lora, packed_attention, packing
    from vlrollout.train.cpu import apply_cpu_defaults

    model_type = model_type_at(actor_config.path)
    if model_type in EXTRA_VISION_MODELS:  # checked here, unknown to AReaL
        register_vision_model(model_type)
    if model_type in VISION_EMBEDDINGS_IN_PARENT:
        keep_vision_embeddings_in_parent(VISION_EMBEDDINGS_IN_PARENT)
    _set_wrap_policy(actor_config)
    for line in apply_cpu_defaults(actor_config):
        logger.warning("CPU default: %s", line)
    with dist_env() as env:
        if not actor_config.backend or actor_config.backend == "???":
            # Data parallel over every process the launcher started (1 without torchrun).
            actor_config.backend = f"fsdp:d{env['WORLD_SIZE']}"
        actor = FSDPPPOActor(config=actor_config)
        actor.create_process_group()
        freezing.install(actor, vision_tower=freeze_vision_tower, projector=freeze_projector)
        actor.initialize(addr=None, ft_spec=ft_spec)
    if getattr(actor, "vlrollout_frozen", None):
        logger.warning("frozen (elements): %s", actor.vlrollout_frozen)
    if lora.install(actor):
        logger.warning(
            "LoRA (rank %d, alpha %d): weight updates and checkpoints hold merged weights, the "
            "adapter in their adapter/ folder",
            actor_config.lora_rank,
            actor_config.lora_alpha,
        )
    if encode_images_once:
        image_sharing.install(actor.model)
    if packing_fix and packing.install(actor):
        logger.warning(
            "packing fix installed: packed sequences kept apart by per-sequence positions "
            "(attn_impl=%s, no flash-attn)",
            actor_config.attn_impl,
        )
        # The rows are block-diagonal now: attend within each sequence, not over the row.
        packed_attention.install(actor.model)
    if model_type in PADDED_IMAGE_KEYS:
        _install_image_padding(actor, PADDED_IMAGE_KEYS[model_type])
    return actor
