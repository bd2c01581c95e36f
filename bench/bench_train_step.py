"""Seconds per GRPO step of ``vlrollout train`` and the trainer's wait on rollouts, on-policy and
asynchronous (``rollout.max_head_offpolicyness`` k = 0, 1, 2).

Runs the real loop (``vlrollout train``: AReaL's ``FSDPPPOActor`` + the embedded engine,
``examples/train_grounding.yaml``) once per k, each in its own process and temporary folder, and
reads its ``metrics.jsonl``. Every run computes the trainer's proximal logprobs
(``actor.recompute_logprob=true`` for k = 0; ``actor.use_decoupled_loss=true``, AReaL's
asynchronous recipe, for k > 0), so the trainer's work per step is the same.

``tok/s`` is trained (generated) tokens per second of the trainer's step. ``rollout`` is the
trainer's wait for its batch: with k = 0 the whole rollout, with k > 0 what the rollouts running
during the previous update had not finished. Here the engine and the trainer share the machine's
cores, so rollouts running during an update slow it down. How the wait would look with the rollouts
on a machine of their own is projected from the k = 0 run, whose phases are timed apart (neither
side runs while the other does): with ``R`` its rollout, ``S`` its weight sync (the engine
generates nothing meanwhile) and ``T`` the trainer's whole step without the wait (logp + update +
weight sync), k = 0 waits ``R`` per step of ``R + T``; k >= 1 rolls the next batch out during the
update, so a step lasts ``max(T, R + S)`` of which ``max(0, R + S - T)`` is waiting (the steady
state, ignoring the one second AReaL's ``prepare_batch`` waits before it submits the next batch).

    .venv/bin/python bench/bench_train_step.py
    .venv/bin/python bench/bench_train_step.py --steps 6 --batch 16 --group 8 --offpolicy 0 1
    .venv/bin/python bench/bench_train_step.py --steps 3 --offpolicy 0 1 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("rollout", "logp", "update", "weight_sync")
KEPT = ("step", "gen_tokens", "staleness_max")
DEFAULT_STEPS, DEFAULT_BATCH, DEFAULT_GROUP, DEFAULT_OFFPOLICY = 4, 8, 8, (0, 1, 2)


def run_loop(
    config: str,
    k: int,
    steps: int,
    batch: int,
    group: int,
    threads: int | None,
    overrides: tuple[str, ...] = (),
) -> list[dict]:
    """``metrics.jsonl`` of a ``vlrollout train`` run of ``steps`` steps with k = ``k``
    (``threads``: ``OMP_NUM_THREADS``, torch's threads per calling thread; ``None``: torch's
    default, one per core; ``overrides``: further ``KEY=VALUE`` settings)."""
    proximal = ["actor.use_decoupled_loss=true"] if k else ["actor.recompute_logprob=true"]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "vlrollout.cli", "train", "--config", config]
        cmd += [
            f"vlrollout.output={tmp}",
            f"total_train_steps={steps}",
            f"train_dataset.batch_size={batch}",
            f"gconfig.n_samples={group}",
            f"rollout.max_head_offpolicyness={k}",
            *proximal,
            "vlrollout.eval_items=1",
            "vlrollout.eval_every=0",
            f"vlrollout.save_every={steps + 1}",
            "vlrollout.progress=false",
            *overrides,
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"k={k}: vlrollout train failed:\n{proc.stderr[-3000:]}")
        text = (Path(tmp) / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def summary(rows: list[dict]) -> dict[str, float]:
    """Means over the steps after the first (which includes warm-up)."""
    steady = rows[1:] or rows
    out = {p: statistics.fmean(r[f"time/{p}"] for r in steady) for p in PARTS}
    out["step"] = statistics.fmean(r["time/step"] for r in steady)
    out["wait_share"] = out["rollout"] / out["step"]
    out["tokens_per_s"] = statistics.fmean(r["gen_tokens"] / r["time/step"] for r in steady)
    out["staleness_max"] = max(r.get("staleness_max", 0) for r in rows)
    return out


def projection(on_policy: dict[str, float]) -> dict[str, float]:
    """Wait shares with the rollouts on a machine of their own, from the k = 0 phases."""
    rollout, sync = on_policy["rollout"], on_policy["weight_sync"]
    trainer = on_policy["logp"] + on_policy["update"] + sync
    step = max(trainer, rollout + sync)
    return {
        "k0_wait_share": rollout / (rollout + trainer),
        "async_wait_share": max(0.0, rollout + sync - trainer) / step,
        "async_step_s": step,
        "k0_step_s": rollout + trainer,
    }


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help="steps; the first is reported apart"
    )
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="items per step")
    ap.add_argument(
        "--group", type=int, default=DEFAULT_GROUP, help="episodes per item (GRPO group)"
    )
    ap.add_argument(
        "--offpolicy",
        type=int,
        nargs="+",
        default=list(DEFAULT_OFFPOLICY),
        help="values of rollout.max_head_offpolicyness to run (0 first: the projection uses it)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="OMP_NUM_THREADS of the runs: torch's threads for the trainer and for the engine "
        "each (default: one per core, so with k > 0 both sides start that many during updates)",
    )
    ap.add_argument("--config", default=str(ROOT / "examples" / "train_grounding.yaml"))
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    started = record.Run("train_step", argv)

    runs: dict[int, list[dict]] = {}
    for k in args.offpolicy:
        runs[k] = run_loop(args.config, k, args.steps, args.batch, args.group, args.threads)
        rows = runs[k]
        print(f"\nk={k}: {args.batch} items x {args.group} episodes per step, {len(rows)} steps")
        header = f"{'step':>6} " + " ".join(f"{p:>12}" for p in PARTS)
        print(header + f" {'total s':>9} {'tok/s':>8} {'stale':>6}")
        for r in rows:
            parts = " ".join(f"{r[f'time/{p}']:12.2f}" for p in PARTS)
            print(
                f"{r['step']:>6} {parts} {r['time/step']:9.2f} "
                f"{r['gen_tokens'] / r['time/step']:8.0f} {r.get('staleness_max', 0):>6}"
            )
    means = {k: summary(rows) for k, rows in runs.items()}

    columns = ["k", "s/step", "tok/s", "wait s", "wait share", *PARTS[1:], "staleness max"]
    print("\nmeans of the steps after the first (the first includes warm-up)")
    print("  ".join(f"{c:>13}" for c in columns))
    body = []
    for k, m in means.items():
        row = [str(k), f"{m['step']:.2f}", f"{m['tokens_per_s']:.0f}", f"{m['rollout']:.2f}"]
        row.append(f"{m['wait_share']:.0%}")
        row += [f"{m[p]:.2f}" for p in PARTS[1:]] + [str(m["staleness_max"])]
        body.append(row)
        print("  ".join(f"{c:>13}" for c in row))
    tables = [
        record.Table(
            columns,
            body,
            title=f"{args.batch} items x {args.group} episodes per step, {args.steps} steps "
            "(means of the steps after the first); engine and trainer share the cores",
        )
    ]

    shares = ", ".join(f"k={k} {m['wait_share']:.0%}" for k, m in means.items())
    numbers: dict = {
        "runs": {
            str(k): {
                "steps": [
                    {c: v for c, v in r.items() if c.startswith("time/") or c in KEPT} for r in rows
                ],
                "means": means[k],
            }
            for k, rows in runs.items()
        }
    }
    headline = f"trainer's wait share here: {shares}"
    if 0 in means:
        p = projection(means[0])
        numbers["projection"] = p
        print(
            "\nrollouts on a machine of their own (projected from the k=0 phases): "
            f"k=0 waits {p['k0_wait_share']:.0%} of a {p['k0_step_s']:.2f} s step, "
            f"k>=1 {p['async_wait_share']:.0%} of a {p['async_step_s']:.2f} s step"
        )
        tables.append(
            record.Table(
                ["k", "s/step", "wait share"],
                [
                    ["0", f"{p['k0_step_s']:.2f}", f"{p['k0_wait_share']:.0%}"],
                    [">= 1", f"{p['async_step_s']:.2f}", f"{p['async_wait_share']:.0%}"],
                ],
                title="projected with the rollouts on a machine of their own, from the k=0 "
                "phases timed apart",
            )
        )
        headline += (
            f"; rollouts on their own machine (projected): k=0 {p['k0_wait_share']:.0%}, "
            f"k>=1 {p['async_wait_share']:.0%}"
        )
    print(headline)
    settings = (args.steps, args.batch, args.group, tuple(args.offpolicy), args.threads)
    mode = (
        "default"
        if settings == (DEFAULT_STEPS, DEFAULT_BATCH, DEFAULT_GROUP, DEFAULT_OFFPOLICY, None)
        else f"changed: {args.steps} steps of {args.batch} items x {args.group} episodes, "
        f"k in {list(args.offpolicy)}, threads {args.threads or 'default'}"
    )
    record.write(started.record(tables, headline, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
