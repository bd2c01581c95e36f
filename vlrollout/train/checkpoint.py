"""Resumable checkpoints: AReaL's own ``actor.save`` (HF folder, safetensors + optimizer state).

Layout under ``OUTPUT/checkpoints``: ``step_N/`` (model ``*.safetensors``, config, processor,
optimizer shards, ``state.json``) and ``latest`` (a one-line pointer, replaced atomically after
the folder is complete, so a crash mid-save leaves the previous checkpoint as ``latest``).
``state.json`` holds the step, the weight version and what else the loop needs to resume (the
asynchronous rollouts' dataloader position, :mod:`vlrollout.train.asynchronous`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Checkpoint:
    path: Path
    step: int  # steps completed; training resumes at this step index
    state: dict[str, Any] = field(default_factory=dict)  # the rest of state.json


def save(
    actor: Any,
    out: Path,
    step: int,
    keep: int = 2,
    state: dict[str, Any] | None = None,
    main: bool = True,
) -> Checkpoint:
    """Save the actor (weights + optimizer) after ``step`` completed steps; keep the last ``keep``.

    ``state`` (JSON-serialisable) is written to ``state.json`` beside the step and the version,
    and comes back as :attr:`Checkpoint.state`. Under ``torchrun`` every rank calls this (AReaL's
    save is collective: rank 0 writes the weights, each rank its optimizer shard); only the rank
    with ``main`` set touches the folders and pointers, and every rank returns once they are in
    place.
    """
    import torch.distributed as dist
    from areal.api.io_struct import SaveLoadMeta

    several = dist.is_initialized() and dist.get_world_size() > 1
    root = out / "checkpoints"
    final = root / f"step_{step}"
    tmp = root / f".step_{step}.tmp"
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
    if several:
        dist.barrier()
    actor.save(
        SaveLoadMeta(
            path=str(tmp),
            weight_format="hf",
            with_optim=True,
            tokenizer=actor.tokenizer,
            processor=actor.processor,
        )
    )
    saved = {**(state or {}), "step": step, "version": actor.get_version()}
    if main:
        (tmp / "state.json").write_text(json.dumps(saved))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        pointer = root / "latest.tmp"
        pointer.write_text(final.name + "\n")
        os.replace(pointer, root / "latest")
        done = sorted(
            (p for p in root.glob("step_*") if p.is_dir()), key=lambda p: int(p.name.split("_")[1])
        )
        for old in done[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    if several:
        dist.barrier()
    return Checkpoint(final, step, saved)


def latest(out: Path) -> Checkpoint | None:
    """The last complete checkpoint under ``out``, or ``None``."""
    pointer = out / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = out / "checkpoints" / pointer.read_text().strip()
    state = json.loads((path / "state.json").read_text())
    return Checkpoint(path, int(state["step"]), state)


OPTIMIZER_SHARD = re.compile(r"optim_world_size_(\d+)_rank_\d+\.pt")
"""AReaL's name for each rank's optimizer shard in a saved folder."""


def saved_world_size(ckpt: Checkpoint) -> int | None:
    """How many processes trained the run that saved ``ckpt`` (from its optimizer shards)."""
    sizes = {int(m[1]) for p in ckpt.path.iterdir() if (m := OPTIMIZER_SHARD.fullmatch(p.name))}
    return sizes.pop() if len(sizes) == 1 else None


def check_world_size(ckpt: Checkpoint, world: int) -> None:
    """Refuse to resume with another number of processes than saved the optimizer state.

    Raises:
        ConfigError: The checkpoint's optimizer shards were written by another world size
            (AReaL keeps one shard per rank; another split cannot load them).
    """
    from vlrollout.errors import ConfigError

    saved = saved_world_size(ckpt)
    if saved is not None and saved != world:
        raise ConfigError(
            f"{ckpt.path} was saved by {saved} training process(es) and this run has {world}: "
            f"its optimizer state is split per process; resume with --nproc {saved} (or start "
            "a new vlrollout.output)"
        )


def load_optimizer(actor: Any, ckpt: Checkpoint) -> None:
    """Restore the optimizer state saved by :func:`save`; the weights come from building the actor
    with ``actor.path = ckpt.path``.

    Why not ``actor.load(SaveLoadMeta(weight_format="hf", with_optim=True))``: AReaL's
    ``FSDPEngine._load_model_from_hf`` reads the safetensors keys raw, but transformers 5 saves
    Qwen2-VL under its checkpoint names (``visual.*``, ``model.layers.*``) while the live model's
    are ``model.visual.*``, ``model.language_model.layers.*``: every key is missing. Building the
    actor from the folder goes through ``from_pretrained``, which converts them; the optimizer
    shard is then loaded with AReaL's own loader (:mod:`vlrollout.compat.areal`). The LR scheduler restarts
    (constant LR in the shipped config).
    """
    from vlrollout.compat.areal import load_optimizer_state

    load_optimizer_state(actor, str(ckpt.path))
