"""Does a shipped ``vlrollout train`` recipe learn? Its held-out metric against an lr = 0 control,
over seeds.

Each (arm, seed) is one ``vlrollout train`` subprocess with its own output folder: ``trained``
is the recipe as shipped (``examples/train_grounding.yaml`` or ``examples/train_count.yaml``,
plus any ``KEY=VALUE`` overrides given here), ``control`` the same with
``actor.optimizer.lr=0``, so everything but the weight update (data order, sampling seed,
evaluation) is the same. Whatever the control's held-out metric does is noise of the sampling
and evaluation; only the difference between the arms is learning.

Printed: the held-out greedy metric (``eval.jsonl``'s ``eval/mean``: mean IoU for grounding,
accuracy for counting) per evaluation step as mean ± sd over seeds for both arms, the sampled
training reward per step (mean over seeds), and each run's wall minutes. The last line is the
headline. A JSON record (:mod:`record`) goes to ``--record-dir`` as ``learning_<recipe>.json``.

Every run is evaluated on the held-out items of ``--split`` (:mod:`splits`): ``test`` by default,
the seed no recipe was chosen on, which is what the docs cite; ``dev`` for choosing recipes and
levers. The record's numbers say which (``split``, ``eval_seed``).

    .venv/bin/python bench/bench_learning.py --recipe grounding            # 3 seeds, as shipped
    .venv/bin/python bench/bench_learning.py --recipe grounding --split dev  # for choosing
    .venv/bin/python bench/bench_learning.py --recipe counting --seeds 1 2
    .venv/bin/python bench/bench_learning.py --quick                       # 6 steps, 2 seeds
    .venv/bin/python bench/bench_learning.py --recipe grounding --jobs 2   # two runs at a time
    .venv/bin/python bench/bench_learning.py --recipe grounding vlrollout.ground_metric=iou
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
import splits  # noqa: E402

from vlrollout.argtypes import whole_number  # noqa: E402
from vlrollout.train.dynamic_sampling import sampled_reward  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {"grounding": "examples/train_grounding.yaml", "counting": "examples/train_count.yaml"}
METRIC = {"grounding": "held-out greedy mean IoU", "counting": "held-out greedy accuracy"}
ARMS = ("trained", "control")
QUICK = {"steps": 6, "eval_every": 3, "eval_items": 32, "batch_size": 8, "seeds": [1, 2]}
"""``--quick``: a few small steps on a small evaluation (checks the script, measures nothing)."""


@dataclass
class RunResult:
    """One ``vlrollout train`` run as the summary needs it.

    Attributes:
        arm: ``trained`` or ``control`` (lr = 0).
        seed: The run's ``seed``.
        evals: Held-out ``eval/mean`` by step (step 0 is before training).
        rewards: Sampled training ``reward_mean`` by step.
        minutes: Wall minutes of the subprocess (start-up, training and evaluations).
        train_minutes: Minutes of the training steps alone (``metrics.jsonl``'s ``time/step``).
    """

    arm: str
    seed: int
    evals: dict[int, float]
    rewards: dict[int, float]
    minutes: float
    train_minutes: float = 0.0


@dataclass
class Summary:
    """Per-step means and standard deviations over seeds, per arm."""

    eval_steps: list[int]
    eval_mean: dict[str, dict[int, float]] = field(default_factory=dict)
    eval_sd: dict[str, dict[int, float]] = field(default_factory=dict)
    reward_steps: list[int] = field(default_factory=list)
    reward_mean: dict[str, dict[int, float]] = field(default_factory=dict)
    minutes: dict[str, list[float]] = field(default_factory=dict)
    train_minutes: dict[str, list[float]] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)

    def final(self, arm: str) -> tuple[float, float]:
        """The last evaluation's mean and sd for ``arm``."""
        step = self.eval_steps[-1]
        return self.eval_mean[arm][step], self.eval_sd[arm][step]


def _sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(runs: list[RunResult]) -> Summary:
    """Mean ± sd over seeds per step and arm, on the steps every run of both arms has.

    >>> runs = [RunResult("trained", s, {0: 0.1, 5: 0.1 + s / 10}, {1: 0.2}, 1.0) for s in (1, 2)]
    >>> runs += [RunResult("control", s, {0: 0.1, 5: 0.1}, {1: 0.2}, 1.0) for s in (1, 2)]
    >>> s = summarize(runs)
    >>> s.eval_steps, [round(v, 3) for v in s.final("trained")], s.final("control")
    ([0, 5], [0.25, 0.071], (0.1, 0.0))
    """
    if not runs:
        raise ValueError("no runs to summarize")
    eval_steps = sorted(set.intersection(*(set(r.evals) for r in runs)))
    reward_steps = sorted(set.intersection(*(set(r.rewards) for r in runs)))
    out = Summary(eval_steps, reward_steps=reward_steps, seeds=sorted({r.seed for r in runs}))
    for arm in ARMS:
        mine = [r for r in runs if r.arm == arm]
        if not mine:
            continue
        out.eval_mean[arm] = {s: statistics.fmean(r.evals[s] for r in mine) for s in eval_steps}
        out.eval_sd[arm] = {s: _sd([r.evals[s] for r in mine]) for s in eval_steps}
        out.reward_mean[arm] = {
            s: statistics.fmean(r.rewards[s] for r in mine) for s in reward_steps
        }
        out.minutes[arm] = [r.minutes for r in mine]
        out.train_minutes[arm] = [r.train_minutes for r in mine]
    return out


def tables(summary: Summary, metric: str) -> list[record.Table]:
    """The held-out table (mean ± sd per evaluation step), the reward table and the minutes."""
    arms = [a for a in ARMS if a in summary.eval_mean]
    both = len(arms) == 2

    def held_out_row(step: int) -> list[str]:
        row = [str(step)]
        row += [f"{summary.eval_mean[a][step]:.3f} ± {summary.eval_sd[a][step]:.3f}" for a in arms]
        if both:
            diff = summary.eval_mean["trained"][step] - summary.eval_mean["control"][step]
            row.append(f"{diff:+.3f}")
        return row

    held_out = record.Table(
        ["step", *(f"{a} {metric}" for a in arms), *(["trained - control"] if both else [])],
        [held_out_row(s) for s in summary.eval_steps],
        title=f"{metric}, mean ± sd over seeds {summary.seeds}",
    )
    reward = record.Table(
        ["step", *(f"{a} sampled reward" for a in arms)],
        [
            [str(s), *(f"{summary.reward_mean[a][s]:.3f}" for a in arms)]
            for s in summary.reward_steps
        ],
        title="sampled training reward per step, mean over seeds",
    )
    minutes = record.Table(
        ["arm", "training minutes per run", "wall minutes per run"],
        [
            [
                a,
                ", ".join(f"{m:.1f}" for m in summary.train_minutes[a]),
                ", ".join(f"{m:.1f}" for m in summary.minutes[a]),
            ]
            for a in arms
        ],
        title="minutes per run, in seed order (wall: with start-up and evaluations)",
    )
    return [held_out, reward, minutes]


def headline(summary: Summary, recipe: str, split: str | None = None) -> str:
    """One line: the final held-out metric of both arms and their difference (on ``split``'s
    items, where given)."""
    step = summary.eval_steps[-1]
    parts = [f"{METRIC[recipe]} at step {step}"]
    for arm in ARMS:
        if arm in summary.eval_mean:
            m, sd = summary.final(arm)
            parts.append(f"{arm} {m:.3f} ± {sd:.3f}")
    if len(summary.eval_mean) == 2:
        diff = summary.final("trained")[0] - summary.final("control")[0]
        parts.append(f"difference {diff:+.3f}")
    start = summary.eval_mean.get("trained", {}).get(summary.eval_steps[0])
    if start is not None and summary.eval_steps[0] == 0:
        parts[-1] += f" (start {start:.3f})"
    on = f" on the {split} split (eval_seed {splits.SPLITS[split]})" if split else ""
    return "headline: " + ", ".join(parts) + f" over seeds {summary.seeds}{on}"


def train_overrides(args: argparse.Namespace) -> list[str]:
    """The ``KEY=VALUE`` settings every run gets from the options (before the user's own),
    the split's ``vlrollout.eval_seed`` first."""
    out = [splits.eval_override(args.split), "vlrollout.progress=false", "vlrollout.log_rollouts=0"]
    if args.steps is not None:
        out += [f"total_train_steps={args.steps}", f"vlrollout.save_every={args.steps}"]
    if args.eval_every is not None:
        out.append(f"vlrollout.eval_every={args.eval_every}")
    if args.eval_items is not None:
        out.append(f"vlrollout.eval_items={args.eval_items}")
    if args.batch_size is not None:
        out.append(f"train_dataset.batch_size={args.batch_size}")
    return out


def run_one(
    config: str, arm: str, seed: int, out: Path, overrides: list[str], threads: int | None = None
) -> RunResult:
    """One ``vlrollout train`` subprocess; its ``eval.jsonl`` and ``metrics.jsonl`` read back.
    ``threads`` sets its ``OMP_NUM_THREADS`` where the environment does not already."""
    cmd = [sys.executable, "-m", "vlrollout.cli", "train", "--config", config]
    cmd += [f"vlrollout.output={out}", f"seed={seed}", *overrides]
    if arm == "control":
        cmd.append("actor.optimizer.lr=0")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if threads is not None:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    minutes = (time.perf_counter() - t0) / 60
    if proc.returncode != 0:
        raise SystemExit(f"{arm} seed {seed}: vlrollout train failed:\n{proc.stderr[-3000:]}")
    evals = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return RunResult(
        arm,
        seed,
        {int(r["step"]): float(r["eval/mean"]) for r in evals},
        {int(r["step"]): sampled_reward(r) for r in rows},
        minutes,
        sum(float(r["time/step"]) for r in rows) / 60,
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="grounding")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="default 1 2 3")
    ap.add_argument("--steps", type=int, default=None, help="total_train_steps (recipe's)")
    ap.add_argument("--eval-every", type=int, default=None, help="vlrollout.eval_every")
    ap.add_argument("--eval-items", type=int, default=None, help="vlrollout.eval_items")
    ap.add_argument("--batch-size", type=int, default=None, help="train_dataset.batch_size")
    ap.add_argument("--quick", action="store_true", help="6 steps of 8 items, 2 seeds, 32 items")
    ap.add_argument("--no-control", action="store_true", help="skip the lr = 0 runs")
    splits.add_split(ap)
    ap.add_argument(
        "--jobs",
        type=whole_number(1),
        default=1,
        help="runs at a time, each with cores/jobs torch threads (OMP_NUM_THREADS unless set)",
    )
    record.add_keep(ap)
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE passed to every run")
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    splits.refuse_eval_seed(ap, args.overrides)
    if args.quick:
        fill_unset(args, QUICK)
    args.seeds = args.seeds or [1, 2, 3]
    return args


def fill_unset(args: argparse.Namespace, defaults: dict[str, object]) -> None:
    """Set each of ``defaults`` on ``args`` where the command line left it ``None`` (a
    ``--quick`` mode that options given explicitly still override)."""
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    started = record.Run(f"learning_{args.recipe}", argv)
    config = RECIPES[args.recipe]
    overrides = train_overrides(args) + list(args.overrides)
    arms = ARMS[:1] if args.no_control else ARMS
    threads = max(1, (os.cpu_count() or 1) // args.jobs) if args.jobs > 1 else None
    plan = [(arm, seed) for seed in args.seeds for arm in arms]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        base = args.keep or Path(tmp)
        futures = [
            pool.submit(run_one, config, arm, seed, base / f"{arm}-seed{seed}", overrides, threads)
            for arm, seed in plan
        ]
        runs: list[RunResult] = []
        for future in futures:
            res = future.result()
            runs.append(res)
            last = max(res.evals)
            print(
                f"{res.arm} seed {res.seed}: {res.evals[min(res.evals)]:.3f} -> "
                f"{res.evals[last]:.3f} at step {last} ({res.minutes:.1f} min)",
                flush=True,
            )
    summary = summarize(runs)
    metric = METRIC[args.recipe]
    out = tables(summary, metric)
    for table in out:
        print(f"\n{table.text()}")
    line = headline(summary, args.recipe, args.split)
    print(line)
    changed = [args.steps, args.eval_every, args.eval_items, args.batch_size, args.overrides]
    mode = "default"
    if args.quick:
        mode = "quick: " + ", ".join(f"{k} {v}" for k, v in QUICK.items())
    elif any(changed) or args.seeds != [1, 2, 3] or args.no_control or args.split != splits.DEFAULT:
        mode = "changed: " + " ".join(argv)
    numbers = {
        "recipe": args.recipe,
        "split": args.split,
        "eval_seed": splits.SPLITS[args.split],
        "config": config,
        "overrides": overrides,
        "runs": [vars(r) for r in runs],
        "eval_mean": summary.eval_mean,
        "eval_sd": summary.eval_sd,
        "reward_mean": summary.reward_mean,
    }
    record.write(started.record(out, line, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
