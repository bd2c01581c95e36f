"""Building AReaL's ``FSDPPPOActor`` in this process (world size 1, or one rank under torchrun).

AReaL picks its CPU platform and the gloo backend by itself; ``torch.distributed`` only needs the
rendezvous variables, which :func:`dist_env` fills for a single process (torchrun sets them for
several).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any

from vlrollout.logs import get_logger

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
    from vlrollout.train import freezing, lora, packed_attention, packing
    from vlrollout.train.cpu import apply_cpu_defaults

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
    return actor
