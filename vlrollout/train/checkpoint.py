"""Resumable checkpoints: AReaL's own ``actor.save`` (HF folder, safetensors + optimizer state).

Layout under ``OUTPUT/checkpoints``: ``step_N/`` (model ``*.safetensors``, config, processor,
optimizer shards, ``state.json``) and ``latest`` (a one-line pointer, replaced atomically after
the folder is complete, so a crash mid-save leaves the previous checkpoint as ``latest``).

A save writes ``.step_N.tmp/`` and moves it in with renames only, so ``step_N/`` is never half
written: a ``step_N/`` already there (a resumed run saving a step again) is first renamed aside to
``.step_N.old/``, the new folder renamed in, then the old one deleted. A crash between the two
renames leaves no ``step_N/`` but a whole ``.step_N.old/``, which :func:`latest` and the next save
rename back.
``state.json`` holds the step, the weight version, the learning-rate scheduler's state (AReaL
saves the optimizer's but not its scheduler's, which rebuilt from the config would start its
schedule over) and what else the loop needs to resume (the asynchronous rollouts' dataloader
position, :mod:`vlrollout.train.asynchronous`; a deterministic engine's draw counts).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrollout.logs import get_logger

logger = get_logger(__name__)


@dataclass
class Checkpoint:
    path: Path
    step: int  # steps completed; training resumes at this step index
    state: dict[str, Any] = field(default_factory=dict)  # the rest of state.json


SCHEDULER = "lr_scheduler"
"""The ``state.json`` key of the learning-rate scheduler's ``state_dict`` (numbers only: AReaL's
schedules are functions, which ``LambdaLR`` leaves out)."""


SAMPLING = "sampling"
"""The ``state.json`` key of each rank's deterministic engine draw counts
(:meth:`~vlrollout.engine.local.LocalInferenceEngine.sampling_state`), in rank order."""


def save(
    actor: Any,
    out: Path,
    step: int,
    keep: int = 2,
    state: dict[str, Any] | None = None,
    main: bool = True,
) -> Checkpoint:
    """Save the actor (weights + optimizer) after ``step`` completed steps; keep the last ``keep``
    (0: every one).

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
        _tidy(root)
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
    saved = {
        **(state or {}),
        "step": step,
        "version": actor.get_version(),
        SCHEDULER: actor.lr_scheduler.state_dict(),
    }
    if main:
        (tmp / "state.json").write_text(json.dumps(saved))
        _swap_in(tmp, final)
        pointer = root / "latest.tmp"
        pointer.write_text(final.name + "\n")
        os.replace(pointer, root / "latest")
        done = sorted(
            (p for p in root.glob("step_*") if p.is_dir()), key=lambda p: int(p.name.split("_")[1])
        )
        for old in done[:-keep] if keep else []:
            shutil.rmtree(old, ignore_errors=True)
    if several:
        dist.barrier()
    return Checkpoint(final, step, saved)


def _aside(final: Path) -> Path:
    """Where a checkpoint folder waits while its replacement is renamed in."""
    return final.with_name(f".{final.name}.old")


def _restore_aside(final: Path) -> None:
    """Rename a whole checkpoint left aside by a crash back to ``final`` (when ``final`` is gone).

    Several ranks may find it at once: the one that loses the rename finds ``final`` in place.
    """
    aside = _aside(final)
    if not final.exists() and aside.is_dir():
        try:
            os.rename(aside, final)
        except OSError:
            if not final.exists():
                raise


def _tidy(root: Path) -> None:
    """Clear what crashed saves left under ``root``: partial ``.step_N.tmp/`` folders are deleted,
    a ``.step_N.old/`` is renamed back where ``step_N/`` is missing and deleted where it is not."""
    for tmp in root.glob(".step_*.tmp"):
        shutil.rmtree(tmp, ignore_errors=True)
    for aside in root.glob(".step_*.old"):
        final = root / aside.name[1 : -len(".old")]
        _restore_aside(final)
        shutil.rmtree(aside, ignore_errors=True)


def _swap_in(tmp: Path, final: Path) -> None:
    """Replace ``final`` by the complete folder ``tmp`` with renames only (see the module doc):
    at every instant ``final`` or ``.final.old`` is a whole checkpoint. Run after :func:`_tidy`,
    so no ``.final.old`` is in the way."""
    aside = _aside(final)
    if final.exists():
        os.rename(final, aside)
    os.rename(tmp, final)
    shutil.rmtree(aside, ignore_errors=True)


def latest(out: Path) -> Checkpoint | None:
    """The last complete checkpoint under ``out``, or ``None``.

    A checkpoint a crashed save left renamed aside is renamed back first.
    """
    pointer = out / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = out / "checkpoints" / pointer.read_text().strip()
    _restore_aside(path)
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
    shard is then loaded with AReaL's own loader (:mod:`vlrollout.compat.areal`), and the
    learning-rate schedule continued (:func:`restore_scheduler`).
    """
    from vlrollout.compat.areal import load_optimizer_state

    load_optimizer_state(actor, str(ckpt.path))
    restore_scheduler(actor, ckpt)


def restore_scheduler(actor: Any, ckpt: Checkpoint) -> None:
    """Continue ``actor``'s learning-rate schedule at the step ``ckpt`` saved (its scheduler is
    built anew from the config, at step 0). A checkpoint without the scheduler's state (saved by
    an older vlrollout) restarts the schedule, with a warning: exact for a constant one.
    """
    saved = ckpt.state.get(SCHEDULER)
    if saved is None:
        logger.warning(
            "%s holds no learning-rate scheduler state: the schedule restarts at step 0 (the "
            "same for a constant learning rate; a decay or warm-up repeats)",
            ckpt.path,
        )
        return
    actor.lr_scheduler.load_state_dict({**actor.lr_scheduler.state_dict(), **saved})
