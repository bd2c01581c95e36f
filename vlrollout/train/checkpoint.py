"""Resumable checkpoints: AReaL's own ``actor.save`` (HF folder, safetensors + optimizer state).

Layout under ``OUTPUT/checkpoints``: ``step_N/`` (model ``*.safetensors``, config, processor,
optimizer shards, ``state.json``) and ``latest`` (a one-line pointer, replaced atomically after
the folder is complete, so a crash mid-save leaves the previous checkpoint as ``latest``).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Checkpoint:
    path: Path
    step: int  # steps completed; training resumes at this step index


def save(actor: Any, out: Path, step: int, keep: int = 2) -> Checkpoint:
    """Save the actor (weights + optimizer) after ``step`` completed steps; keep the last ``keep``."""
    from areal.api.io_struct import SaveLoadMeta

    root = out / "checkpoints"
    final = root / f"step_{step}"
    tmp = root / f".step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    actor.save(
        SaveLoadMeta(
            path=str(tmp),
            weight_format="hf",
            with_optim=True,
            tokenizer=actor.tokenizer,
            processor=actor.processor,
        )
    )
    (tmp / "state.json").write_text(json.dumps({"step": step, "version": actor.get_version()}))
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
    return Checkpoint(final, step)


def latest(out: Path) -> Checkpoint | None:
    """The last complete checkpoint under ``out``, or ``None``."""
    pointer = out / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = out / "checkpoints" / pointer.read_text().strip()
    state = json.loads((path / "state.json").read_text())
    return Checkpoint(path, int(state["step"]))


def load(actor: Any, ckpt: Checkpoint) -> None:
    """Restore weights and optimizer state saved by :func:`save`."""
    from areal.api.io_struct import SaveLoadMeta

    actor.load(SaveLoadMeta(path=str(ckpt.path), weight_format="hf", with_optim=True))
