"""Cost as the work grows: engine, ``generate``, prepared prompts, ``vlrollout serve`` and the
trainer, from the tiny model to a Qwen2-VL-2B shape, 64 to 4,096 image tokens, groups of 1 to 16
and 1 to 4 images per prompt.

Shapes (``scaling_shapes.py``): random weights in real transformers configurations: the tiny
model, about 20 M and 100 M parameters (Qwen2-VL class), a SmolVLM-256M shape (Idefics3 class)
and a Qwen2-VL-2B shape in bfloat16 (engine and ``generate`` on one point: as much as 2 shared
cores allow). Each is saved once under ``/tmp/vlrollout-scaling-models`` (keyed by its config).

Each shape is swept along three axes (``PLANS``): image tokens per image (group 1, one image),
the group size, and images per prompt; every shape at ``SIZE_POINT`` (64 tokens, a group of 4,
one image) makes the model-size axis. Per point (``scaling_points.py``: one process per shape
and side, so each side's peak memory is its own, both loaded at once and driven side by side):
engine and ``generate`` tokens/s, prefill and decode time (the median of ``repeats`` timed runs
a side, the sides taking turns), peak resident memory and images the vision tower encoded (an
untimed run after a peak reset); the prompt prepared for the group (seconds, preparations,
bytes); ``vlrollout serve`` latency (``scaling_serve.py``); and the trainer's GRPO
step by phase and its peak memory with ``encode_images_once`` against the per-copy reference
(``scaling_trainer.py``). ``scaling_growth.py`` fits the growth exponent of every cost against
every axis and flags those above their expected order.

Goals (worst case first in the headline): engine/``generate`` tokens/s >= 1.0 at every point;
engine peak memory <= ``generate``'s + 10 %; one preparation and one image encoding per group;
the trainer's peak memory with ``encode_images_once`` below the per-copy reference at every
group size.

    .venv/bin/python bench/bench_scaling.py             # ~45 min on 2 shared CPU cores
    .venv/bin/python bench/bench_scaling.py --quick     # the tiny model, a few points, for tests
    .venv/bin/python bench/bench_scaling.py --device cuda --record-dir bench/results/cuda  # a GPU
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from pathlib import Path
from typing import Any

import record
import scaling_growth as growth
import scaling_report as report
import torch
from scaling_shapes import DEFAULT_CACHE, SHAPES, build_model, parameter_count, shape
from scaling_trainer import trainer_points

from vlrollout.engine.checks import check_device
from vlrollout.errors import ConfigError

MAX_BATCH = 16
AXES = ("tokens", "group", "images")
PATHS = ("engine", "generate", "serve", "train")
"""What ``--paths`` picks: the engine, ``generate``, ``vlrollout serve`` and the trainer."""

SIZE_POINT = {"tokens": 64, "group": 4, "images": 1}
"""The model-size axis: every shape at this point."""


def plan(
    tokens, group, images, new_tokens: int, paths: list[str], at=None, repeats: int = 3
) -> dict[str, Any]:
    """A shape's sweeps: image tokens at group 1 and one image (the vision tower's cost shows,
    not copies of it), the group at ``at["tokens"]`` tokens, images per prompt at that many
    tokens each in a group of ``at["group"]``. ``repeats``: timed runs a side at each point
    (their median is recorded; fewer where each run takes long, to keep the benchmark's wall
    time near 45 minutes on 2 cores)."""
    at = {"tokens": 256, "group": 4, **(at or {})}
    return {
        "tokens": {"values": tokens, "at": {"group": 1, "images": 1}},
        "group": {"values": group, "at": {"tokens": at["tokens"], "images": 1}},
        "images": {"values": images, "at": {"tokens": at["tokens"], "group": at["group"]}},
        "new_tokens": new_tokens,
        "paths": paths,
        "repeats": repeats,
    }


ALL = ["engine", "generate", "serve"]
SIDES = ("engine", "generate")
"""The paths ``scaling_points.run_sides`` measures side by side."""
PLANS: dict[str, dict[str, Any]] = {
    "tiny": plan([64, 256, 1024, 4096], [1, 2, 4, 8, 16], [1, 2, 4], 8, ALL),
    "20m": plan([64, 256, 1024], [1, 4, 16], [1, 2, 4], 8, ALL),
    "100m": plan([64, 256, 1024], [1, 4, 16], [1, 2, 4], 4, ALL, at={"tokens": 64}),
    "smolvlm-256m": plan(
        [64, 320],
        [1, 4],
        [1, 2],
        4,
        ["engine", "generate"],
        at={"tokens": 64, "group": 1},
        repeats=2,
    ),
    "qwen2vl-2b": plan([], [], [], 4, ["engine", "generate"]),
}
QUICK: dict[str, dict[str, Any]] = {
    "tiny": plan([64, 256], [1, 2], [1, 2], 4, ALL, at={"tokens": 64, "group": 2}),
}
SERVE_NOTE = (
    "vlrollout serve runs its folder's processor on the images it receives, so Idefics3 token "
    "counts other than the folder's (320 a square image) cannot be sent to it; smolvlm-256m and "
    "the 2B shape have no serve points."
)


def timing_note(plans: dict[str, Any]) -> str:
    """How the engine and ``generate`` times were taken, with the timed runs of each shape."""
    runs = ", ".join(f"{n} {p['repeats']}" for n, p in plans.items())
    return (
        "Engine and generate times are medians of timed runs a side (" + runs + "), the "
        "sides' processes loaded at once and taking turns, who goes first swapping every "
        "round; peak memory and images encoded come from one untimed run before them, after "
        "a peak reset."
    )


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def specs(shape_plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The points of one shape: each axis swept (small to large) with the others at its ``at``
    values, then the size-axis point (:data:`SIZE_POINT`)."""
    new = shape_plan["new_tokens"]
    out = []
    for axis in AXES:
        sweep = shape_plan[axis]
        for x in sweep["values"]:
            out.append({**sweep["at"], axis: x, "axis": axis, "new_tokens": new})
    out.append({**SIZE_POINT, "axis": "size", "new_tokens": new})
    return out


def job(name: str, side: str, folder: Path, params: int, shape_plan: dict, args) -> dict:
    return {
        "side": side,
        "shape": name,
        "folder": str(folder),
        "dtype": shape(name).dtype,
        "device": args.device,
        "threads": args.threads,
        "max_batch": MAX_BATCH,
        "params": params,
        "points": specs(shape_plan),
    }


def run_shape(name: str, shape_plan: dict, args, failures: list[str]) -> list[dict[str, Any]]:
    """Every path of one shape: engine and ``generate`` side by side (``run_sides``), then
    ``vlrollout serve`` (at the same time with ``--quick``)."""
    from scaling_points import run_sides  # these import torch: only when a shape runs (tests
    from scaling_serve import serve_points  # and the README renderer import this module for
    # PLANS and specs)

    start = time.perf_counter()
    folder = build_model(shape(name), args.cache)
    params = parameter_count(folder)
    log(
        f"{name}: {params / 1e6:.1f} M parameters in {folder} ({time.perf_counter() - start:.0f} s)"
    )
    paths = [p for p in shape_plan["paths"] if p in args.paths]
    jobs = {p: job(name, p, folder, params, shape_plan, args) for p in paths}
    sides = {p: j for p, j in jobs.items() if p in SIDES}

    def one(group: str) -> list[dict[str, Any]]:
        try:
            if group == "serve":
                return serve_points(jobs["serve"], failures, log=log)
            return run_sides(sides, shape_plan["repeats"], failures, log=log)
        except (RuntimeError, TimeoutError, OSError) as e:
            failures.append(f"{group} on {name}: {e}")
            log(f"FAILED {group} on {name}: {e}")
            return []

    groups = (["sides"] if sides else []) + (["serve"] if "serve" in jobs else [])
    if args.quick:
        with concurrent.futures.ThreadPoolExecutor(max(1, len(groups))) as pool:
            results = list(pool.map(one, groups))
    else:
        results = [one(g) for g in groups]
    log(f"{name}: done in {time.perf_counter() - start:.0f} s")
    return [p for r in results for p in r]


def trainer(args, failures: list[str]) -> list[dict[str, Any]]:
    """The trainer points (``scaling_trainer.trainer_points``), or none with the reason noted."""
    plans = QUICK if args.quick else PLANS
    shapes = [s for s in SHAPES if s.name in plans and s.name in args.shapes and s.trainable]
    groups = sorted({g for n in plans if n in args.shapes for g in plans[n]["group"]["values"]})
    start = time.perf_counter()
    try:
        points = list(trainer_points(shapes, groups, quick=args.quick, device=args.device))
    except Exception as e:  # noqa: BLE001  (the other paths' record is kept; the reason is noted)
        failures.append(f"trainer points failed: {type(e).__name__}: {e}")
        return []
    log(f"trainer: {len(points)} points in {time.perf_counter() - start:.0f} s")
    return points


CLASSES = {
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "idefics3": "Idefics3ForConditionalGeneration",
}


def shapes_table(args, plans: dict[str, Any], params: dict[str, int]) -> record.Table:
    """The shapes measured: class, dtype, parameters, the paths run and each axis' values."""
    rows = []
    for name in args.shapes:
        s, p = shape(name), plans[name]
        count = params.get(name)
        rows.append(
            [
                name,
                CLASSES[s.family],
                s.dtype,
                "n/a" if count is None else f"{count / 1e6:,.1f} M",
                " ".join(x for x in p["paths"] if x in args.paths),
                *(",".join(map(str, p[axis]["values"])) or "-" for axis in AXES),
                str(p["new_tokens"]),
                str(p["repeats"]),
            ]
        )
    columns = ["shape", "class", "dtype", "parameters", "paths", "image tokens", "groups"]
    columns += ["images", "new tokens", "timed runs"]
    return record.Table(columns, rows, title="Shapes and sweeps")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the tiny model, a few points (< 1 min)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads per process (default 1 on the CPU: on cores shared with other "
        "processes more threads wait on each other; the device's default on a GPU)",
    )
    p.add_argument("--shapes", nargs="*", default=None, help="shape names (default: all)")
    p.add_argument(
        "--paths",
        nargs="+",
        choices=PATHS,
        default=list(PATHS),
        help=f"paths to measure (default: {' '.join(PATHS)})",
    )
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where shapes are saved")
    record.add_record_dir(p)
    args = p.parse_args(argv)
    plans = QUICK if args.quick else PLANS
    args.shapes = args.shapes or list(plans)
    unknown = [n for n in args.shapes if n not in plans]
    if unknown:
        p.error(f"no plan for shape(s) {unknown}; known: {list(plans)}")
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    if args.threads is None and args.device == "cpu":
        args.threads = 1
    try:
        check_device(args.device)
    except ConfigError as e:
        p.error(str(e))
    return args


def run_mode(args: argparse.Namespace) -> str:
    """The record's ``mode``: ``default`` for the whole benchmark, else what the run left out."""
    parts = ["quick: the tiny model, 2 values an axis, sides at once"] if args.quick else []
    if args.device != "cpu":
        parts.append(f"on {args.device}, {torch.cuda.get_device_name(args.device)}")
    if args.quick:
        return "; ".join(parts)
    if args.shapes != list(PLANS):
        parts.append(f"shapes {' '.join(args.shapes)} only")
    if list(args.paths) != list(PATHS):
        parts.append(f"paths {' '.join(args.paths)} only")
    return "; ".join(parts) or "default"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    run = record.Run("scaling", argv)
    plans = QUICK if args.quick else PLANS
    failures: list[str] = []
    points: list[dict[str, Any]] = []
    for name in args.shapes:  # small to large: the 2B shape runs last, alone
        points += run_shape(name, plans[name], args, failures)
    if "train" in args.paths:
        points += trainer(args, failures)
    fits = growth.fits(points)
    params = {p["shape"]: p["x"] for p in points if p["axis"] == "size"}
    tables, headline, numbers, notes = report.summarise(points, fits, failures, params)
    tables.insert(0, shapes_table(args, plans, params))
    notes.append(SERVE_NOTE)
    notes.append(timing_note({n: plans[n] for n in args.shapes}))
    numbers["plans"] = {n: plans[n] for n in args.shapes}
    numbers["device"] = args.device
    for table in tables:
        print(table.text(), end="\n\n")
    for note in notes:
        print(note)
    print(headline)
    rec = run.record(tables, headline, numbers, mode=run_mode(args), notes=notes)
    record.write(rec, args.record_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
