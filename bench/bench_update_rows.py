"""Seconds of AReaL's update per step: whole GRPO groups per micro-batch with each image encoded
once, at several packed row sizes, against AReaL's packing by length with every copy encoded.

AReaL packs a step's sequences into rows of at most ``max_tokens_per_mb`` tokens, by length, and
pads each row to a multiple of 256 tokens. A group's n samples share one image, so packing by
length puts n copies of it in n rows and the vision tower encodes each. With
``vlrollout.encode_images_once`` (the recipes' setting) each row holds whole groups and encodes a
group's image once (:mod:`vlrollout.train.grouping`, :mod:`vlrollout.image_sharing`); the trainer
attends within each packed sequence (:mod:`vlrollout.train.packed_attention`) in every setting, so
long rows cost no quadratic attention and mostly save per-row overheads and padding.

Each setting runs the shipped counting recipe for a few on-policy steps
(``bench_train_step.run_loop``, one process each); the settings take turns round after round, so a
change of machine load falls on all of them. Printed per setting: the update's median and worst
seconds over the steps after each run's first, and their ratios to the reference's (the headline
is the recipe's setting, worst case against worst case).

    .venv/bin/python bench/bench_update_rows.py
    .venv/bin/python bench/bench_update_rows.py --sizes 1024 2048 --rounds 3 --threads 1
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
REFERENCE = ("each copy encoded, rows by length, 512", 512, False)
"""The reference: AReaL's packing by length with every copy of an image encoded, at 512 tokens per
row (the recipes' setting before whole-group rows)."""


def recipe_setting(config: str) -> tuple[int, bool]:
    """``(max_tokens_per_mb, encode_images_once)`` of a recipe file, read from the repository
    root (where the runs start; the recipes' paths are relative to it) wherever this runs."""
    import contextlib

    from vlrollout.train.config import load_config

    config = str(Path(config).resolve())
    with contextlib.chdir(ROOT):
        cfg = load_config(config, [])
    return int(cfg.actor.mb_spec.max_tokens_per_mb), bool(cfg.vlrollout.encode_images_once)


def update_times(runs: list[list[dict]]) -> list[float]:
    """``time/update`` of every step but each run's first (warm-up)."""
    return [r["time/update"] for rows in runs for r in rows[1:]]


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--rounds", type=int, default=2, help="runs per setting, taking turns")
    ap.add_argument("--steps", type=int, default=4, help="steps per run; the first is left out")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the runs")
    ap.add_argument("--config", default=str(ROOT / "examples" / "train_count.yaml"))
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    shipped = recipe_setting(args.config)
    settings = [REFERENCE] + [
        (f"whole groups, each image once, {m}", m, True) for m in sorted(set(args.sizes))
    ]
    if shipped not in [(m, once) for _, m, once in settings]:
        settings.append((f"the recipe's setting, {shipped[0]}", *shipped))
    started = record.Run("update_rows", argv)
    runs: dict[str, list[list[dict]]] = {label: [] for label, _, _ in settings}
    for round_ in range(args.rounds):
        for label, m, once in settings:
            rows = run_loop(
                args.config,
                0,
                args.steps,
                16,
                8,
                args.threads,
                (
                    f"actor.mb_spec.max_tokens_per_mb={m}",
                    f"vlrollout.encode_images_once={str(once).lower()}",
                ),
            )
            runs[label].append(rows)
            print(f"round {round_ + 1}, {label}: {update_times([rows])}", flush=True)
    times = {label: update_times(r) for label, r in runs.items()}
    ref = REFERENCE[0]
    ref_median, ref_worst = statistics.median(times[ref]), max(times[ref])
    table = record.Table(
        ["setting", "update s median", "worst", "median / reference", "worst / reference"],
        [
            [
                label,
                f"{statistics.median(t):.2f}",
                f"{max(t):.2f}",
                f"{statistics.median(t) / ref_median:.2f}",
                f"{max(t) / ref_worst:.2f}",
            ]
            for label, t in times.items()
        ],
        title=f"16 items x 8 samples per step, {args.steps - 1} steps x {args.rounds} runs per "
        f"setting, {args.threads} thread(s); reference: {ref}",
    )
    print(f"\n{table.text()}")
    label = next(lbl for lbl, m, once in settings if (m, once) == shipped)
    line = (
        f"headline: the recipe's setting ({label}) worst-case update {max(times[label]):.2f} s vs "
        f"{ref_worst:.2f} s for the reference ({max(times[label]) / ref_worst:.2f}x; medians "
        f"{statistics.median(times[label]):.2f} vs {ref_median:.2f} s)"
    )
    print(line)
    numbers = {"times": times, "config": args.config, "recipe": list(shipped)}
    default = argv == []
    mode = "default" if default else "changed: " + " ".join(argv)
    record.write(started.record([table], line, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
