"""``vlrollout train`` with the embedded engine watched at each checkpoint; run as a subprocess.

    python tests/train/family_train_run.py --config examples/train_grounding.yaml [key=value ...]
    python tests/train/family_train_run.py --each ROOT FAMILY [FAMILY ...] -- [--config ...]

With ``--each``, one run per family in this one process (the imports paid once), on the model at
``ROOT/FAMILY/model`` into ``ROOT/FAMILY/run``; a family whose run fails does not stop the next,
and one JSON line per family (``family``, ``rc``, ``seconds``, ``error``) goes to stdout.

Runs the command line's own ``vlrollout train`` with the given arguments. Each time the loop
saves a checkpoint (after that step's weight update reached the engine), the engine's live
parameters are compared with the checkpoint as transformers loads it
(``AutoModelForImageTextToText``), and one JSON line is appended to
``OUTPUT/engine_vs_checkpoint.jsonl``: ``step``, ``max_abs_diff`` over all tensors, and
``same_keys`` (both state dicts name the same tensors). The loop itself is unchanged: only
``build_rollout_engine`` (to keep a handle on the engine) and ``checkpoint.save`` are wrapped.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RECORD = "engine_vs_checkpoint.jsonl"


def engine_vs_checkpoint(engine, path: Path) -> dict:
    """Largest |engine − checkpoint| over every tensor of the checkpoint at ``path``."""
    import torch
    from transformers import AutoModelForImageTextToText

    saved = AutoModelForImageTextToText.from_pretrained(
        path, dtype=torch.float32, local_files_only=True
    ).state_dict()
    live = engine.model.state_dict()
    diff = max((live[k].float() - v).abs().max().item() for k, v in saved.items() if k in live)
    return {"max_abs_diff": diff, "same_keys": set(saved) == set(live)}


def main(argv: list[str]) -> int:
    from vlrollout import cli
    from vlrollout.train import checkpoint, session

    engines = []
    build, save = session.build_rollout_engine, checkpoint.save

    def watched_build(*args, **kwargs):
        engine, processor = build(*args, **kwargs)
        engines.append(engine)
        return engine, processor

    def watched_save(actor, out, step, *args, **kwargs):
        ckpt = save(actor, out, step, *args, **kwargs)
        record = {"step": step, **engine_vs_checkpoint(engines[-1], ckpt.path)}
        with open(Path(out) / RECORD, "a") as f:
            f.write(json.dumps(record) + "\n")
        return ckpt

    session.build_rollout_engine, checkpoint.save = watched_build, watched_save
    try:
        return cli.main(["train", *argv])
    finally:  # the next run in this process watches the originals, not this run's wrappers
        session.build_rollout_engine, checkpoint.save = build, save


def each(root: Path, families: list[str], argv: list[str]) -> int:
    """:func:`main` for each family in turn (see the module docstring); 0 if every run did."""
    failed = 0
    for family in families:
        args = [
            *argv,
            f"actor.path={root / family / 'model'}",
            f"vlrollout.output={root / family / 'run'}",
        ]
        t, error = time.perf_counter(), None
        try:
            rc = main(args)
        except BaseException as e:  # noqa: BLE001  (SystemExit too: reported, next family runs)
            traceback.print_exc()
            rc, error = 1, f"{type(e).__name__}: {e}"
        failed += rc != 0
        line = {"family": family, "rc": rc, "seconds": time.perf_counter() - t, "error": error}
        print(json.dumps(line), flush=True)
    return int(failed > 0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--each"]:
        split = sys.argv.index("--")
        sys.exit(each(Path(sys.argv[2]), sys.argv[3:split], sys.argv[split + 1 :]))
    sys.exit(main(sys.argv[1:]))
