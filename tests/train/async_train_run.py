"""``vlrollout train`` with each training batch examined as it arrives; run as a subprocess.

    python tests/train/async_train_run.py SLEEP_S --config examples/train_grounding.yaml [k=v ...]

Runs the command line's own ``vlrollout train`` with the given arguments. The embedded engine's
LM head sleeps ``SLEEP_S`` before each call, once per prefill and per decode step (0: as fast as
the tiny model goes): with a sleep, episodes outlast an update, so their tokens carry two weight
versions. Each batch that
``AsyncRollouts.next_batch`` or ``OneProcessRollout.rollout_batch`` returns is examined before the trainer touches
it, and one JSON line is appended to ``OUTPUT/batches.jsonl``:

- ``step`` (the first is 1) and ``version``: the trainer's weight version, about to be updated;
- ``versions``: per sequence, the weight version of each generated token;
- ``gap``: per weight version, the largest |rollout logprob − teacher-forced logprob| over the
  tokens stamped with it, the teacher forcing done by transformers with that version's weights
  (the starting model for version 0, ``checkpoints/step_V`` after; so run with
  ``vlrollout.save_every=1`` and k = 1: the loop keeps two checkpoints);
- ``gap_to_start``: the same with the starting weights (how far training moved them).

The loop itself is unchanged: only ``build_rollout_engine``, ``build_actor``,
``AsyncRollouts.next_batch`` and ``OneProcessRollout.rollout_batch`` are wrapped.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RECORD = "batches.jsonl"


def teacher_forced_gaps(batch: list[dict], model_for, same: bool = True) -> dict[int, float]:
    """Per weight version, the largest |rollout − teacher-forced| logprob of its tokens, forced
    with that version's weights (``same``) or with the starting ones."""
    from tests.engine.conftest import teacher_forced_logprobs
    from tests.train.conftest import TEMPERATURE

    gaps: dict[int, float] = {}
    for traj in batch:
        for row in range(traj["input_ids"].shape[0]):
            n = int(traj["attention_mask"][row].sum())
            ids = traj["input_ids"][row, :n].tolist()
            generated = traj["loss_mask"][row, :n].bool()
            first = int(generated.nonzero()[0])
            assert bool(generated[first:].all()), "one generated turn per sequence"
            versions = traj["versions"][row, first:n]
            mm = dict(traj["multi_modal_input"][row])
            types = traj["mm_token_type_ids"][row, :first].tolist()
            for v in sorted(set(versions.tolist())):
                ref = teacher_forced_logprobs(
                    model_for(v if same else 0), ids[:first], ids[first:], TEMPERATURE, mm, types
                )
                at = versions == v
                gap = (traj["logprobs"][row, first:n][at] - ref[at]).abs().max().item()
                gaps[v] = max(gaps.get(v, 0.0), gap)
    return gaps


def main(sleep_s: float, argv: list[str]) -> int:
    import torch
    from transformers import AutoModelForImageTextToText

    from vlrollout import cli
    from vlrollout.train import asynchronous, session

    out = Path(next(a.split("=", 1)[1] for a in argv if a.startswith("vlrollout.output=")))
    start_path: list[str] = []
    build_engine, build_actor = session.build_rollout_engine, session.build_actor

    def slow_engine(cfg, model_path, dtype, *rest):
        engine, processor = build_engine(cfg, model_path, dtype, *rest)
        start_path.append(model_path)
        head = engine.model.get_output_embeddings()
        head.register_forward_pre_hook(lambda *a: time.sleep(sleep_s))
        return engine, processor

    models: dict[int, torch.nn.Module] = {}

    def model_for(version: int):
        if version not in models:
            path = start_path[0] if version == 0 else out / "checkpoints" / f"step_{version}"
            models[version] = AutoModelForImageTextToText.from_pretrained(
                path, dtype=torch.float32, local_files_only=True
            ).eval()
        return models[version]

    def examine(batch, actor) -> None:
        version = actor.get_version()
        record = {
            "step": version + 1,
            "version": version,
            "versions": [
                t["versions"][row][t["loss_mask"][row].bool()].tolist()
                for t in batch
                for row in range(t["versions"].shape[0])
            ],
            "gap": {str(v): g for v, g in teacher_forced_gaps(batch, model_for).items()},
            "gap_to_start": {
                str(v): g for v, g in teacher_forced_gaps(batch, model_for, False).items()
            },
        }
        with open(out / RECORD, "a") as f:
            f.write(json.dumps(record) + "\n")

    actors = []

    def watched_rollout_batch(method):
        def wrapper(*args, **kwargs):
            batch = method(*args, **kwargs)
            examine(batch, actors[0])
            return batch

        return wrapper

    def watched_actor(*args, **kwargs):
        actor = build_actor(*args, **kwargs)
        actors.append(actor)
        return actor

    session.OneProcessRollout.rollout_batch = watched_rollout_batch(
        session.OneProcessRollout.rollout_batch
    )

    async_batch = asynchronous.AsyncRollouts.next_batch

    def watched_next_batch(self, step):
        batch, outcome = async_batch(self, step)
        examine(batch, actors[0])
        return batch, outcome

    session.build_rollout_engine, session.build_actor = slow_engine, watched_actor
    asynchronous.AsyncRollouts.next_batch = watched_next_batch
    return cli.main(["train", *argv])


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]), sys.argv[2:]))
