"""Seconds of AReaL's update per step against the packed row size
(``actor.mb_spec.max_tokens_per_mb``).

AReaL packs a step's sequences into rows of at most ``max_tokens_per_mb`` tokens. Without
flash-attn (the CPU) sdpa attends over a whole row with a block-diagonal mask, so attention costs
grow with the row, while each extra row pays the per-micro-batch overheads again: the best size
sits between. Each size runs the shipped counting recipe for a few on-policy steps
(``bench_train_step.run_loop``, one process each); the sizes take turns round after round, so a
change of machine load falls on all of them. Printed per size: the update's median and worst
seconds over the steps after each run's first, and the ratio of each to the reference size's
median and worst (the headline is the worst-case ratio).

    .venv/bin/python bench/bench_update_rows.py
    .venv/bin/python bench/bench_update_rows.py --sizes 512 2048 --rounds 3 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from bench_train_step import run_loop  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = 2048
"""The reference row size, the longest tried: the ratios are against it."""


def update_times(runs: list[list[dict]]) -> list[float]:
    """``time/update`` of every step but each run's first (warm-up)."""
    return [r["time/update"] for rows in runs for r in rows[1:]]


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, REFERENCE])
    ap.add_argument("--rounds", type=int, default=2, help="runs per size, taking turns")
    ap.add_argument("--steps", type=int, default=4, help="steps per run; the first is left out")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the runs")
    ap.add_argument("--config", default=str(ROOT / "examples" / "train_count.yaml"))
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    sizes = sorted({*args.sizes, REFERENCE})
    started = record.Run("update_rows", argv)
    runs: dict[int, list[list[dict]]] = {m: [] for m in sizes}
    for round_ in range(args.rounds):
        for m in sizes:
            rows = run_loop(
                args.config,
                0,
                args.steps,
                16,
                8,
                args.threads,
                (f"actor.mb_spec.max_tokens_per_mb={m}",),
            )
            runs[m].append(rows)
            print(f"round {round_ + 1}, {m} tokens per row: {update_times([rows])}", flush=True)
    times = {m: update_times(r) for m, r in runs.items()}
    ref_median, ref_worst = statistics.median(times[REFERENCE]), max(times[REFERENCE])
    table = record.Table(
        [
            "max_tokens_per_mb",
            "update s median",
            "worst",
            "median / reference",
            "worst / reference",
        ],
        [
            [
                str(m),
                f"{statistics.median(t):.2f}",
                f"{max(t):.2f}",
                f"{statistics.median(t) / ref_median:.2f}",
                f"{max(t) / ref_worst:.2f}",
            ]
            for m, t in times.items()
        ],
        title=f"16 items x 8 samples per step, {args.steps - 1} steps x {args.rounds} runs per size, "
        f"{args.threads} thread(s); reference {REFERENCE}",
    )
    print(f"\n{table.text()}")
    best = min(sizes, key=lambda m: max(times[m]))
    line = (
        f"headline: worst-case update {max(times[best]):.2f} s at {best} tokens per row vs "
        f"{ref_worst:.2f} s at {REFERENCE} ({max(times[best]) / ref_worst:.2f}x)"
    )
    print(line)
    numbers = {"times": {str(m): t for m, t in times.items()}, "config": args.config}
    default = argv == []
    mode = "default" if default else "changed: " + " ".join(argv)
    record.write(started.record([table], line, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
