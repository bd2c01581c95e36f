"""Seconds per GRPO step of ``vlrollout train``, split into rollout / logp / update / weight sync.

Runs the real loop (AReaL's ``FSDPPPOActor`` + the embedded engine, ``examples/train_grounding.yaml``)
for a few steps in a temporary folder, with ``actor.recompute_logprob=true`` so the trainer's
``compute_logp`` pass is part of the step (AReaL's decoupled/off-policy setting; the shipped
on-policy config skips it). The loop is synchronous (``rollout_batch``), so the trainer waits for
the whole rollout; the last line is that fraction of the step (the headline: what an
asynchronous ``prepare_batch`` loop could hide).

    .venv/bin/python bench/bench_train_step.py                 # ~2-3 min on 2 shared CPU cores
    .venv/bin/python bench/bench_train_step.py --steps 6 --batch 16 --group 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("rollout", "logp", "update", "weight_sync")
KEPT = ("step", "tokens_per_s")
DEFAULT_STEPS, DEFAULT_BATCH, DEFAULT_GROUP = 4, 8, 8


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help="steps; the first is reported apart"
    )
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="items per step")
    ap.add_argument(
        "--group", type=int, default=DEFAULT_GROUP, help="episodes per item (GRPO group)"
    )
    ap.add_argument("--config", default=str(ROOT / "examples" / "train_grounding.yaml"))
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    started = record.Run("train_step", argv)

    import logging

    logging.basicConfig(level=logging.ERROR)
    from vlrollout.train.config import load_config
    from vlrollout.train.loop import train
    from vlrollout.train.report import read_jsonl

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            args.config,
            [
                f"vlrollout.output={tmp}",
                f"total_train_steps={args.steps}",
                f"train_dataset.batch_size={args.batch}",
                f"gconfig.n_samples={args.group}",
                "actor.recompute_logprob=true",
                "vlrollout.eval_items=1",
                "vlrollout.eval_every=0",
                f"vlrollout.save_every={args.steps + 1}",
                "vlrollout.progress=false",
            ],
        )
        train(cfg)
        rows = read_jsonl(Path(tmp) / "metrics.jsonl")

    print(f"\n{args.batch} items x {args.group} episodes per step, {len(rows)} steps")
    header = f"{'step':>6} " + " ".join(f"{p:>12}" for p in PARTS) + f" {'total s':>9} {'tok/s':>8}"
    print(header)
    for r in rows:
        parts = " ".join(f"{r[f'time/{p}']:12.2f}" for p in PARTS)
        print(f"{r['step']:>6} {parts} {r['time/step']:9.2f} {r['tokens_per_s']:8.0f}")
    steady = rows[1:] or rows
    mean = {p: statistics.fmean(r[f"time/{p}"] for r in steady) for p in PARTS}
    step = statistics.fmean(r["time/step"] for r in steady)
    print(f"{'mean*':>6} " + " ".join(f"{mean[p]:12.2f}" for p in PARTS) + f" {step:9.2f}")
    print("* steps after the first (the first includes warm-up)")
    for p in PARTS:
        print(f"share of step in {p:<12} {mean[p] / step:6.1%}")
    headline = f"fraction of the step the trainer waits on rollouts: {mean['rollout'] / step:.3f}"
    print(headline)
    table = record.Table(
        ["", "step", *PARTS],
        [
            ["seconds (mean of the steps after the first)", f"{step:.2f}"]
            + [f"{mean[p]:.2f}" for p in PARTS],
            ["share of the step", "100%"] + [f"{mean[p] / step:.0%}" for p in PARTS],
        ],
        title=f"{args.batch} items x {args.group} episodes per step, {len(rows)} steps "
        "(the first, with warm-up, left out)",
    )
    kept = [{k: v for k, v in r.items() if k.startswith("time/") or k in KEPT} for r in rows]
    numbers = {"steps": kept, "mean_s": mean, "step_s": step}
    settings = (args.steps, args.batch, args.group)
    mode = (
        "default"
        if settings == (DEFAULT_STEPS, DEFAULT_BATCH, DEFAULT_GROUP)
        else f"shortened: {args.steps} steps of {args.batch} items x {args.group} episodes"
    )
    record.write(started.record([table], headline, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
