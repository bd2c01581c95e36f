"""Seconds per GRPO step of ``vlrollout train``, the trainer's wait on rollouts and the staleness
of every step, on-policy and asynchronous (``rollout.max_head_offpolicyness`` k = 0, 1, 2), with
the rollouts on the embedded engine and on a ``vlrollout serve`` process.

Runs the real loop (``vlrollout train``: AReaL's ``FSDPPPOActor``, ``examples/train_grounding.yaml``)
once per placement and k, each in its own process and temporary folder, and reads its
``metrics.jsonl``. ``embedded``: the engine runs in the trainer's process; ``served``: a fresh
``vlrollout serve`` (SGLang protocol, one thread) per run, reached through AReaL's own
``RemoteSGLangEngine``, weights updated over HTTP from disk. Every run computes the trainer's
proximal logprobs (``actor.recompute_logprob=true`` for k = 0; ``actor.use_decoupled_loss=true``,
AReaL's asynchronous recipe, for k > 0), so the trainer's work per step is the same.

``wait`` is the trainer's wait for its batch (``time/rollout``): with k = 0 the whole rollout,
with k > 0 what the rollouts running during the previous update had not finished. The wait share
is the wait over the step, averaged over the steps after the first. With k >= 1 the items of the
next k steps are submitted before each update, so every step after the first trains tokens at
least 1 and at most ``min(s - 1, k)`` weight versions old (step 2 cannot be older than version 0 =
1 behind): with k = 1 exactly 1. With k = 2 a step's tokens are 2 versions old only if its
rollouts started before the weights moved on twice; an engine still busy with the step before
starts them one version later (the step before's wait shows it). ``setup`` is the
trainer's one-time set-up done at the start of the run (``time/setup``: a first logprob pass,
backward pass and optimizer step at learning rate 0, :mod:`vlrollout.train.warmup`), and
``first/later`` the first step's update (and logprob pass) over the mean of the later ones';
the set-up is not in either. With k = 0 no rollout runs during any update, and with k = 1 every
step's logprob pass and update overlap one batch of rollouts (the next step's items are
submitted when a step's batch arrives), the first included: the comparison is like for like.
With k = 2 the first step's overlap two batches (steps 2 and 3 are submitted then) and later
ones' one, so its ratio also holds that extra rollout: the headline's first/later is the worst
run with k <= 1, and k >= 2's is given apart. Engine and trainer share the machine's cores, so
rollouts during an update slow it, and on a loaded machine one step's update moves by tenths of a
second from the next's.

    .venv/bin/python bench/bench_train_step.py
    .venv/bin/python bench/bench_train_step.py --steps 6 --batch 16 --group 8 --placements embedded
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import record
import yaml
from served import Served

from vlrollout.argtypes import whole_number

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("rollout", "logp", "update", "weight_sync")
KEPT = ("step", "gen_tokens", "staleness_max")
PLACEMENTS = ("embedded", "served")
DEFAULT_STEPS, DEFAULT_BATCH, DEFAULT_GROUP, DEFAULT_OFFPOLICY = 4, 8, 4, (0, 1, 2)
TARGET_SHARE = 1 / 3
"""The asynchronous run's wait share, at most this share of the on-policy one's."""


def run_loop(config: str, placement: str, k: int, args: argparse.Namespace) -> list[dict]:
    """``metrics.jsonl`` of a ``vlrollout train`` run of ``args.steps`` steps with k = ``k``,
    its rollouts ``placement``d."""
    proximal = ["actor.use_decoupled_loss=true"] if k else ["actor.recompute_logprob=true"]
    with contextlib.ExitStack() as stack:
        overrides = []
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        if placement == "served":  # the trainer saves its weight updates under the output
            flags = ("--protocol", "sglang", "--threads", "1", "--weights-root", tmp)
            server = stack.enter_context(
                Served(actor_path(config), *flags, env={"OMP_NUM_THREADS": "1"}, startup_s=180)
            )
            overrides = [
                "vlrollout.engine.kind=sglang",
                f"vlrollout.engine.addresses=[127.0.0.1:{server.port}]",
            ]
        cmd = [sys.executable, "-m", "vlrollout.cli", "train", "--config", config]
        cmd += [
            f"vlrollout.output={tmp}",
            f"total_train_steps={args.steps}",
            f"train_dataset.batch_size={args.batch}",
            f"gconfig.n_samples={args.group}",
            f"rollout.max_head_offpolicyness={k}",
            *proximal,
            "vlrollout.eval_items=1",
            "vlrollout.eval_every=0",
            f"vlrollout.save_every={args.steps + 1}",
            "vlrollout.progress=false",
            *overrides,
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{placement} k={k}: vlrollout train failed:\n{proc.stderr[-3000:]}")
        text = (Path(tmp) / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def actor_path(config: str) -> str:
    """The starting checkpoint ``config`` trains (``actor.path``), which the server serves."""
    path = yaml.safe_load(Path(config).read_text())["actor"]["path"]
    return str(ROOT / path) if not Path(path).is_absolute() else path


def summary(rows: list[dict], k: int) -> dict:
    """Means over the steps after the first, the staleness of every step, and the first update
    against the later ones."""
    steady = rows[1:] or rows
    out: dict = {p: statistics.fmean(r[f"time/{p}"] for r in steady) for p in PARTS}
    out["step"] = statistics.fmean(r["time/step"] for r in steady)
    out["wait_share"] = statistics.fmean(r["time/rollout"] / r["time/step"] for r in steady)
    out["tokens_per_s"] = statistics.fmean(r["gen_tokens"] / r["time/step"] for r in steady)
    out["staleness"] = [r.get("staleness_max", 0) for r in rows]
    out["staleness_expected"] = [min(r["step"] - 1, k) for r in rows]
    out["staleness_ok"] = staleness_ok(out["staleness"], out["staleness_expected"])
    out["setup"] = rows[0].get("time/setup", 0.0)
    out["first_update_ratio"] = rows[0]["time/update"] / out["update"]
    out["first_logp_ratio"] = rows[0]["time/logp"] / out["logp"]
    return out


def staleness_ok(staleness: list[int], most: list[int]) -> bool:
    """Every step trains tokens at most ``most`` versions old, and (the rollouts overlapping the
    update) every asynchronous step after the first at least 1.

    >>> staleness_ok([0, 1, 2, 1], [0, 1, 2, 2]), staleness_ok([0, 1, 0, 1], [0, 1, 1, 1])
    (True, False)
    >>> staleness_ok([0, 0, 0], [0, 0, 0]), staleness_ok([0, 1, 3], [0, 1, 2])
    (True, False)
    """
    return all(
        (1 if bound > 0 else 0) <= got <= bound for got, bound in zip(staleness, most, strict=True)
    )


def first_update_verdict(means: dict[tuple[str, int], dict]) -> str:
    """The worst first/later update ratio over the runs whose first update overlaps what a later
    one does (k <= 1: no rollout, or one batch), and apart from them the worst of the runs with
    k >= 2, whose first update overlaps k batches of rollouts on the shared cores."""
    like = [m["first_update_ratio"] for (_, k), m in means.items() if k <= 1]
    more = [m["first_update_ratio"] for (_, k), m in means.items() if k >= 2]
    text = "first update over the later ones' mean, worst run with k <= 1: "
    text += f"{max(like):.2f}" if like else "none run"
    if more:
        text += (
            "; k >= 2 (the first update overlaps k batches of rollouts, a later one 1): "
            f"{max(more):.2f}"
        )
    return text + " (one-time set-up reported apart)"


def step_table(placement: str, k: int, rows: list[dict], args: argparse.Namespace) -> record.Table:
    """Every step of one run."""
    body = []
    for r in rows:
        body.append(
            [str(r["step"])]
            + [f"{r[f'time/{p}']:.2f}" for p in PARTS]
            + [f"{r['time/step']:.2f}", f"{r['time/rollout'] / r['time/step']:.0%}"]
            + [str(r.get("staleness_max", 0)), f"{r.get('time/setup', 0.0):.2f}"]
        )
    columns = ["step", *PARTS, "total s", "wait share", "staleness", "setup s"]
    title = f"{placement}, k={k}: {args.batch} items x {args.group} episodes per step"
    return record.Table(columns, body, title=title)


def parse(argv: list[str]) -> argparse.Namespace:
    """The benchmark's flags; k = 0, the reference every other k is judged against, always runs."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--steps", type=whole_number(2), default=DEFAULT_STEPS, help="steps; the first apart"
    )
    ap.add_argument("--batch", type=whole_number(1), default=DEFAULT_BATCH, help="items per step")
    ap.add_argument(
        "--group", type=whole_number(1), default=DEFAULT_GROUP, help="episodes per item"
    )
    ap.add_argument(
        "--offpolicy",
        type=whole_number(0),
        nargs="+",
        default=list(DEFAULT_OFFPOLICY),
        help="values of rollout.max_head_offpolicyness to run (0, the reference, always runs)",
    )
    ap.add_argument("--placements", nargs="+", choices=PLACEMENTS, default=list(PLACEMENTS))
    ap.add_argument("--config", default=str(ROOT / "examples" / "train_grounding.yaml"))
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    args.offpolicy = sorted({0, *args.offpolicy})
    return args


def main(argv: list[str]) -> None:
    args = parse(argv)
    started = record.Run("train_step", argv)

    tables, runs, means = [], {}, {}
    for placement in args.placements:
        for k in args.offpolicy:
            rows = run_loop(args.config, placement, k, args)
            runs[f"{placement} k={k}"], means[(placement, k)] = rows, summary(rows, k)
            tables.append(step_table(placement, k, rows, args))
            print("\n" + tables[-1].text(), flush=True)

    columns = ["placement", "k", "s/step", "tok/s", "wait s", "wait share", "vs k=0"]
    columns += ["staleness", "setup s", "first/later update", "first/later logp"]
    body, verdicts = [], []
    for (placement, k), m in means.items():
        reference = means.get((placement, 0))
        ratio = m["wait_share"] / reference["wait_share"] if reference else float("nan")
        body.append(
            [placement, str(k), f"{m['step']:.2f}", f"{m['tokens_per_s']:.0f}"]
            + [f"{m['rollout']:.2f}", f"{m['wait_share']:.0%}", f"{ratio:.2f}"]
            + [" ".join(map(str, m["staleness"])), f"{m['setup']:.2f}"]
            + [f"{m['first_update_ratio']:.2f}", f"{m['first_logp_ratio']:.2f}"]
        )
        m["wait_share_vs_k0"] = ratio
        if k == 1 and reference:
            verdicts.append(f"{placement} {ratio:.2f}")
    summary_table = record.Table(
        columns,
        body,
        title=f"{args.batch} items x {args.group} episodes per step, {args.steps} steps (means "
        "of the steps after the first); engine and trainer share the cores",
    )
    tables.insert(0, summary_table)
    print("\n" + summary_table.text())

    stale_ok = all(m["staleness_ok"] for m in means.values())
    headline = (
        f"wait share at k=1 over k=0's: {', '.join(verdicts)} (target <= {TARGET_SHARE:.2f}); "
        "staleness from 1 to min(step - 1, k) at every step after the first of every run "
        f"(k = 0: 0): {'yes' if stale_ok else 'no'}; "
        f"{first_update_verdict(means)}"
    )
    print(headline)
    numbers = {
        "runs": {
            name: {
                "steps": [
                    {c: v for c, v in r.items() if c.startswith("time/") or c in KEPT} for r in rows
                ],
            }
            for name, rows in runs.items()
        },
        "means": {f"{p} k={k}": m for (p, k), m in means.items()},
        "staleness_as_expected": stale_ok,
        "worst_first_update_ratio_k_le_1": max(
            (m["first_update_ratio"] for (_, k), m in means.items() if k <= 1), default=None
        ),
    }
    settings = (args.steps, args.batch, args.group, tuple(args.offpolicy), tuple(args.placements))
    default = (DEFAULT_STEPS, DEFAULT_BATCH, DEFAULT_GROUP, DEFAULT_OFFPOLICY, PLACEMENTS)
    mode = (
        "default"
        if settings == default
        else f"changed: {args.steps} steps of {args.batch} items x {args.group} episodes, "
        f"k in {list(args.offpolicy)}, placements {list(args.placements)}"
    )
    record.write(started.record(tables, headline, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
