"""``vlrollout train`` side by side with TRL's ``GRPOTrainer`` on a shipped recipe: both held-out
curves by our evaluator, and seconds per step.

Ours is the recipe (``examples/train_grounding.yaml`` or ``examples/train_count.yaml`` plus any
``KEY=VALUE`` overrides) run as a ``vlrollout train`` subprocess (``bench_learning.run_one``),
read back from its ``eval.jsonl`` and ``metrics.jsonl``. The peer is TRL's ``GRPOTrainer`` on
the same model, items, item order, reward object and hyper-parameters as far as TRL allows
(:mod:`trl_peer`, :mod:`trl_settings`), evaluated at the same steps by our held-out greedy evaluation of its saved
weights. For each seed (``--seeds``, default 1 2 3) the two run one after the other, never at
once (they share the cores); the curves are compared as means over the seeds, each seed's value
printed beside them, since one seed's held-out metric moves by about as much as the two differ.
A seed runs the same items on both sides, so with several seeds the per-seed differences are
paired: their standard error is printed per step, and where ours is behind the headline says
whether by more than two of them.

Printed: what was checked equal and what could not be aligned, one table of the held-out metric
per evaluation step for both, one of the sampled reward and seconds per step, each side's seconds
per step by phase, the median and worst seconds per step, and the headline last: is ours at least
TRL's at every evaluation, and are our seconds per step at most TRL's? A JSON record
(:mod:`record`) goes to ``--record-dir`` as ``vs_trl_<recipe>.json``.

Both sides are evaluated on the held-out items of ``--split`` (:mod:`splits`): ``test`` by
default, the seed no recipe was chosen on, which is what the docs cite; ``dev`` for choosing.
The record's numbers say which (``split``, ``eval_seed``).

TRL is an optional benchmark dependency (``pip install -e .[bench]``); without it this prints one
line and exits 2.

    .venv/bin/python bench/bench_vs_trl.py --recipe grounding
    .venv/bin/python bench/bench_vs_trl.py --recipe counting --seeds 2
    .venv/bin/python bench/bench_vs_trl.py --quick    # one seed, 4 steps of 8 items, 32 held out
    .venv/bin/python bench/bench_vs_trl.py --recipe grounding --threads 1   # both sides 1 thread

On a machine shared with other jobs, seconds per step move with the load (each side's load is
printed beside its seconds), and more torch threads than free cores slow both sides' small
kernels: ``--threads`` sets both sides' thread count.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
import splits  # noqa: E402
from bench_learning import (  # noqa: E402
    METRIC,
    RECIPES,
    ROOT,
    fill_unset,
    run_one,
    train_overrides,
)

from vlrollout.train.dynamic_sampling import sampled_reward  # noqa: E402

QUICK = {"steps": 4, "eval_every": 2, "eval_items": 32, "batch_size": 8, "seeds": [1]}
"""``--quick``: a few small steps on a small evaluation (checks the script, measures nothing)."""

OURS_PHASES = ("time/rollout", "time/logp", "time/update", "time/weight_sync")


@dataclass
class Side:
    """One trainer's run as the comparison needs it.

    Attributes:
        evals: Held-out greedy ``eval/mean`` by step (step 0 is before training).
        rewards: Sampled training reward (batch mean) by step.
        step_seconds: Seconds of each training step, evaluations excluded, in step order.
        phases: Mean seconds per step by phase (each side's own phases).
        minutes: Wall minutes of the whole run (start-up and evaluations included).
        load: The machine's 1-minute load average when the run started and when it ended.
        seed_evals: Each seed's ``evals`` when this side pools several seeds (``pooled``).
        seed_step_seconds: Each seed's ``step_seconds`` when it pools several seeds.
    """

    evals: dict[int, float]
    rewards: dict[int, float]
    step_seconds: list[float]
    phases: dict[str, float] = field(default_factory=dict)
    minutes: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)
    seed_evals: list[dict[int, float]] = field(default_factory=list)
    seed_step_seconds: list[list[float]] = field(default_factory=list)

    @property
    def seconds_by_step(self) -> list[float]:
        """Seconds of each training step in step order; the mean over the seeds when pooled (on
        the steps every seed ran)."""
        if not self.seed_step_seconds:
            return self.step_seconds
        n = min(len(x) for x in self.seed_step_seconds)
        return [statistics.fmean(x[k] for x in self.seed_step_seconds) for k in range(n)]

    @property
    def median_s(self) -> float:
        return statistics.median(self.step_seconds)

    @property
    def worst_s(self) -> float:
        return max(self.step_seconds)


def pooled(sides: list[Side]) -> Side:
    """One side's runs over several seeds as one: the held-out metric and the sampled reward are
    means over seeds on the steps every seed has, the seconds per step are every seed's steps
    together (so the median and the worst step are over all of them), phases are means, minutes
    add up, and the load is the first run's start and the last run's end.

    >>> a = Side({0: 0.1, 5: 0.3}, {1: 0.5}, [2.0, 4.0], {"update": 1.0}, 1.0, (1.0, 2.0))
    >>> b = Side({0: 0.1, 5: 0.2, 10: 0.4}, {1: 0.3, 2: 0.1}, [3.0], {"update": 3.0}, 2.0, (2.0, 3.0))
    >>> p = pooled([a, b])
    >>> p.evals == {0: 0.1, 5: 0.25}, p.rewards, p.step_seconds, p.phases, p.minutes, p.load
    (True, {1: 0.4}, [2.0, 4.0, 3.0], {'update': 2.0}, 3.0, (1.0, 3.0))
    """
    if len(sides) == 1:
        return sides[0]

    def mean_by_step(series: list[dict[int, float]]) -> dict[int, float]:
        steps = sorted(set.intersection(*(set(x) for x in series)))
        return {s: statistics.fmean(x[s] for x in series) for s in steps}

    phases = sorted(set.intersection(*(set(side.phases) for side in sides)))
    return Side(
        evals=mean_by_step([side.evals for side in sides]),
        rewards=mean_by_step([side.rewards for side in sides]),
        step_seconds=[t for side in sides for t in side.step_seconds],
        phases={k: statistics.fmean(side.phases[k] for side in sides) for k in phases},
        minutes=sum(side.minutes for side in sides),
        load=(sides[0].load[0], sides[-1].load[1]),
        seed_evals=[dict(side.evals) for side in sides],
        seed_step_seconds=[list(side.step_seconds) for side in sides],
    )


@dataclass
class Comparison:
    """Ours against TRL on the evaluation steps both have.

    Attributes:
        steps: Evaluation steps both sides evaluated, ascending.
        behind: Steps where our held-out metric is below TRL's.
        ratio: Our median seconds per step over TRL's.
        paired: With two or more seeds on both sides (paired by position: the same seed runs
            the same items on both), per step ``(mean, standard error)`` of the per-seed
            differences ours - TRL; empty otherwise.
    """

    steps: list[int]
    behind: list[int]
    ratio: float
    paired: dict[int, tuple[float, float]] = field(default_factory=dict)

    @property
    def behind_beyond_spread(self) -> list[int]:
        """Steps where ours is behind by more than two standard errors of the paired per-seed
        differences (none without :attr:`paired`)."""
        return [s for s, (mean, se) in self.paired.items() if mean + 2 * se < 0]

    @property
    def at_least_every(self) -> bool:
        """Ours is at least TRL's at every common evaluation."""
        return not self.behind

    @property
    def not_slower(self) -> bool:
        """Our median seconds per step is at most TRL's."""
        return self.ratio <= 1.0


def compare(ours: Side, trl: Side) -> Comparison:
    """Compare the curves on the steps both evaluated, and the median seconds per step.

    >>> ours = Side({0: 0.1, 5: 0.2, 10: 0.3}, {}, [2.0, 4.0, 3.0])
    >>> trl = Side({0: 0.1, 5: 0.25, 10: 0.2}, {}, [1.0, 2.0])
    >>> c = compare(ours, trl)
    >>> c.steps, c.behind, c.ratio, c.at_least_every, c.not_slower
    ([0, 5, 10], [5], 2.0, False, False)
    """
    steps = sorted(set(ours.evals) & set(trl.evals))
    if not steps:
        raise ValueError(
            f"no common evaluation step: ours {sorted(ours.evals)}, TRL {sorted(trl.evals)}"
        )
    if not ours.step_seconds or not trl.step_seconds:
        raise ValueError(
            f"seconds per step missing: ours {len(ours.step_seconds)} steps, "
            f"TRL {len(trl.step_seconds)}"
        )
    behind = [s for s in steps if ours.evals[s] < trl.evals[s]]
    return Comparison(steps, behind, ours.median_s / trl.median_s, paired_differences(ours, trl))


def paired_differences(ours: Side, trl: Side) -> dict[int, tuple[float, float]]:
    """Per step both sides' seeds all evaluated, ``(mean, standard error)`` of ours - TRL over
    the seeds, paired by position; empty with fewer than two seeds or unequal seed counts.

    >>> o = Side({}, {}, [1.0], seed_evals=[{5: 0.2}, {5: 0.4}])
    >>> t = Side({}, {}, [1.0], seed_evals=[{5: 0.1}, {5: 0.1}])
    >>> {k: (round(m, 3), round(se, 3)) for k, (m, se) in paired_differences(o, t).items()}
    {5: (0.2, 0.1)}
    """
    n = len(ours.seed_evals)
    if n < 2 or len(trl.seed_evals) != n:
        return {}
    steps = set.intersection(*(set(x) for x in ours.seed_evals + trl.seed_evals))
    out = {}
    for step in sorted(steps):
        diffs = [o[step] - t[step] for o, t in zip(ours.seed_evals, trl.seed_evals, strict=True)]
        out[step] = (statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(n))
    return out


def tables(comp: Comparison, ours: Side, trl: Side, metric: str) -> list[record.Table]:
    """The held-out table, the per-step table (reward, seconds), the phases and the summary.

    With several seeds (``pooled`` sides) the held-out table shows the means and each seed's
    value beside them, and the other tables are over every seed's steps.
    """
    seeds = len(ours.seed_evals)

    def each_seed(side: Side, step: int) -> list[str]:
        if seeds < 2:
            return []
        return [" ".join(f"{x[step]:.3f}" for x in side.seed_evals)]

    held_out = record.Table(
        ["step", f"ours {metric}", f"TRL {metric}", "ours - TRL"]
        + (["standard error"] if comp.paired else [])
        + (["ours per seed", "TRL per seed"] if seeds > 1 else []),
        [
            [
                str(s),
                f"{ours.evals[s]:.3f}",
                f"{trl.evals[s]:.3f}",
                f"{ours.evals[s] - trl.evals[s]:+.3f}",
                *([f"{comp.paired[s][1]:.3f}" if s in comp.paired else "-"] if comp.paired else []),
                *each_seed(ours, s),
                *each_seed(trl, s),
            ]
            for s in comp.steps
        ],
        title=f"{metric} per evaluation step (our evaluator on both"
        + (f"; means over {seeds} seeds" if seeds > 1 else "")
        + (
            "; standard error of the per-seed differences ours - TRL, a seed running the same "
            "items on both)"
            if comp.paired
            else ")"
        ),
    )
    ours_s, trl_s = ours.seconds_by_step, trl.seconds_by_step
    n = min(len(ours_s), len(trl_s))

    def reward(side: Side, step: int) -> str:
        return f"{side.rewards[step]:.3f}" if step in side.rewards else "-"

    per_step = record.Table(
        ["step", "ours sampled reward", "TRL sampled reward", "ours s", "TRL s"],
        [
            [
                str(k + 1),
                reward(ours, k + 1),
                reward(trl, k + 1),
                f"{ours_s[k]:.2f}",
                f"{trl_s[k]:.2f}",
            ]
            for k in range(n)
        ],
        title="sampled training reward and seconds per step (evaluations excluded"
        + (f"; means over {seeds} seeds)" if seeds > 1 else ")"),
    )
    phases = record.Table(
        ["side", "phase", "mean s per step"],
        [["ours", k, f"{v:.2f}"] for k, v in ours.phases.items()]
        + [["TRL", k, f"{v:.2f}"] for k, v in trl.phases.items()],
        title="where a step's time goes, each side's own phases",
    )
    speed = record.Table(
        ["side", "median s/step", "worst s/step", "wall minutes", "load start -> end"],
        [
            [
                name,
                f"{side.median_s:.2f}",
                f"{side.worst_s:.2f}",
                f"{side.minutes:.1f}",
                f"{side.load[0]:.1f} -> {side.load[1]:.1f}",
            ]
            for name, side in (("ours", ours), ("TRL", trl))
        ],
        title="seconds per step (wall minutes include start-up and evaluations; the machine's "
        "1-minute load average beside them)",
    )
    return [held_out, per_step, phases, speed]


def headline(comp: Comparison, ours: Side, trl: Side, recipe: str, split: str | None = None) -> str:
    """One line: ours ≥ TRL at every evaluation?, and ours s/step ≤ TRL's? (Means over the seeds
    when the sides pool several; the held-out items' split last, where given.)"""
    last = comp.steps[-1]
    held = (
        "yes"
        if comp.at_least_every
        else "no, behind at step(s) " + ", ".join(map(str, comp.behind))
    )
    speed = "yes" if comp.not_slower else "no"
    seeds = f" (mean of {len(ours.seed_evals)} seeds)" if len(ours.seed_evals) > 1 else ""
    spread = ""
    if comp.paired and comp.behind:
        beyond = comp.behind_beyond_spread
        spread = " (by more than 2 standard errors of the per-seed difference at: " + (
            ", ".join(map(str, beyond)) + ")" if beyond else "none)"
        )
    return (
        f"headline: {recipe}, {METRIC[recipe]}{seeds} at step {last} ours {ours.evals[last]:.3f} vs TRL "
        f"{trl.evals[last]:.3f}; ours >= TRL at every evaluation: {held}{spread}; ours s/step <= "
        f"TRL's: {speed} (median {ours.median_s:.2f} vs {trl.median_s:.2f} s, ours/TRL "
        f"{comp.ratio:.2f}x)"
        + (f"; on the {split} split (eval_seed {splits.SPLITS[split]})" if split else "")
    )


def read_ours(out: Path, evals: dict[int, float], minutes: float) -> Side:
    """Our side from a finished run folder's ``metrics.jsonl`` (and the evaluations read)."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows.sort(key=lambda r: r["step"])
    return Side(
        evals=evals,
        rewards={int(r["step"]): sampled_reward(r) for r in rows},
        step_seconds=[float(r["time/step"]) for r in rows],
        phases={
            k.removeprefix("time/"): statistics.fmean(float(r[k]) for r in rows)
            for k in OURS_PHASES
        },
        minutes=minutes,
    )


def print_table(table: record.Table) -> None:
    print(f"\n{table.text()}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="grounding")
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="seeds; each runs ours then TRL, the curves compared as means (default 1 2 3)",
    )
    ap.add_argument("--steps", type=int, default=None, help="total_train_steps (recipe's)")
    ap.add_argument("--eval-every", type=int, default=None, help="vlrollout.eval_every")
    ap.add_argument("--eval-items", type=int, default=None, help="vlrollout.eval_items")
    ap.add_argument("--batch-size", type=int, default=None, help="train_dataset.batch_size")
    ap.add_argument(
        "--quick", action="store_true", help="one seed, 4 steps of 8 items, 32 held out"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of both sides (OMP_NUM_THREADS; default: torch's, one per core)",
    )
    splits.add_split(ap)
    record.add_keep(ap)
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE passed to both sides")
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    splits.refuse_eval_seed(ap, args.overrides)
    if any(o.partition("=")[0].lstrip("+") == "seed" for o in args.overrides):
        ap.error("give seeds with --seeds, not a seed=N override")
    if args.quick:
        fill_unset(args, QUICK)
    args.seeds = args.seeds or [1, 2, 3]
    return args


def load() -> float:
    """The machine's 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def run_ours(config: str, seed: int, out: Path, overrides: list[str]) -> Side:
    """Our recipe as a ``vlrollout train`` subprocess (``bench_learning.run_one``)."""
    before = load()
    run = run_one(config, "trained", seed, out, overrides)
    side = read_ours(out, run.evals, run.minutes)
    side.load = (before, load())
    return side


def run_peer(cfg: Any, steps: int, folder: Path) -> tuple[Side, Any]:
    """TRL's side (:func:`trl_peer.run_trl`) and its raw :class:`trl_peer.PeerRun`."""
    import trl_peer

    before, t0 = load(), time.perf_counter()
    peer = trl_peer.run_trl(cfg, steps, folder)
    minutes = (time.perf_counter() - t0) / 60
    side = Side(peer.evals, peer.rewards, peer.step_seconds, peer.phases, minutes)
    side.load = (before, load())
    return side, peer


def merged_checks(per_seed: dict[int, dict[str, str]]) -> dict[str, str]:
    """The seeds' check lines, one line where every seed says the same, else one per seed.

    >>> merged_checks({1: {"a": "equal", "b": "x"}, 2: {"a": "equal", "b": "y"}})
    {'a': 'equal', 'b (seed 1)': 'x', 'b (seed 2)': 'y'}
    """
    out: dict[str, str] = {}
    names = list(dict.fromkeys(k for checks in per_seed.values() for k in checks))
    for name in names:
        lines = {seed: checks.get(name, "not checked") for seed, checks in per_seed.items()}
        if len(set(lines.values())) == 1:
            out[name] = next(iter(lines.values()))
        else:
            out.update({f"{name} (seed {seed})": line for seed, line in lines.items()})
    return out


def checks_of(peer: Any, ours: Side, trl: Side) -> dict[str, str]:
    """What was checked equal between the two runs, one line each (``DIFFERENT`` when not)."""
    checks = dict(peer.alignment)
    checks["item order"] = (
        "equal: every step rewarded the loop's items of that step"
        if peer.order_checked
        else "DIFFERENT: TRL's steps rewarded other items than the loop's"
    )
    if 0 in ours.evals and 0 in trl.evals:
        same = ours.evals[0] == trl.evals[0]
        checks["evaluator"] = (
            f"{'equal' if same else 'DIFFERENT'} at step 0 (same weights): ours "
            f"{ours.evals[0]:.4f}, TRL's saved weights {trl.evals[0]:.4f}"
        )
    if peer.rejected:
        checks["TRL rejected episodes"] = json.dumps(peer.rejected)
    return checks


def print_alignment(checks: dict[str, str], settings: Any) -> None:
    print("\nchecked:")
    for name, line in checks.items():
        print(f"  {name}: {line}")
    print("aligned settings:")
    for line in settings.aligned:
        print(f"  {line}")
    print("not aligned:")
    for line in settings.not_aligned:
        print(f"  - {line}")


def progress(name: str, side: Side) -> None:
    first, last = min(side.evals), max(side.evals)
    print(
        f"{name}: {side.evals[first]:.3f} -> {side.evals[last]:.3f} at step {last} "
        f"({side.minutes:.1f} min, load {side.load[0]:.1f} -> {side.load[1]:.1f})",
        flush=True,
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("trl") is None:
        print(
            "bench_vs_trl: TRL is not installed; install the benchmark extra: "
            ".venv/bin/pip install -e '.[bench]'",
            file=sys.stderr,
        )
        return 2
    if args.threads is not None:  # before torch is imported; the subprocess inherits it
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    import trl_settings

    from vlrollout.train.config import load_config

    if args.threads is not None:
        torch.set_num_threads(args.threads)

    started = record.Run(f"vs_trl_{args.recipe}", argv)
    # The recipe's paths (its YAML, the model) are relative to the repository root, where our
    # runs start too; the output folders were made absolute when parsed.
    args.record_dir = args.record_dir.resolve()
    os.chdir(ROOT)
    config = RECIPES[args.recipe]
    overrides = train_overrides(args) + list(args.overrides)
    ours_runs: list[Side] = []
    trl_runs: list[Side] = []
    per_seed_checks: dict[int, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for seed in args.seeds:
            seeded = [*overrides, f"seed={seed}"]
            cfg = load_config(config, [*seeded, f"vlrollout.output={base / 'trl-config'}"])
            steps = cfg.total_train_steps
            settings = trl_settings.peer_settings(cfg, steps)
            print(
                f"{args.recipe}: {steps} steps of {cfg.train_dataset.batch_size} items x "
                f"{cfg.gconfig.n_samples}, seed {cfg.seed}, {torch.get_num_threads()} torch "
                f"threads, {os.cpu_count()} cores, load {load():.2f}",
                flush=True,
            )
            ours_seed = run_ours(config, seed, base / f"ours-seed{seed}", overrides)
            progress(f"ours seed {seed}", ours_seed)
            trl_seed, peer = run_peer(cfg, steps, base / f"trl-seed{seed}")
            progress(f"TRL seed {seed}", trl_seed)
            ours_runs.append(ours_seed)
            trl_runs.append(trl_seed)
            per_seed_checks[seed] = checks_of(peer, ours_seed, trl_seed)

    ours, trl = pooled(ours_runs), pooled(trl_runs)
    checks = merged_checks(per_seed_checks)
    print_alignment(checks, settings)
    comp = compare(ours, trl)
    out = tables(comp, ours, trl, METRIC[args.recipe])
    for table in out:
        print_table(table)
    line = headline(comp, ours, trl, args.recipe, args.split)
    print(line)
    mode = "default"
    if args.quick:
        mode = "quick: " + ", ".join(f"{k} {v}" for k, v in QUICK.items())
    elif args.seeds != [1, 2, 3] or any(
        [
            args.split != splits.DEFAULT,
            args.steps,
            args.eval_every,
            args.eval_items,
            args.batch_size,
            args.overrides,
            args.threads,
        ]
    ):
        mode = "changed: " + " ".join(argv)
    numbers = {
        "recipe": args.recipe,
        "split": args.split,
        "eval_seed": splits.SPLITS[args.split],
        "threads": torch.get_num_threads(),
        "config": config,
        "overrides": overrides,
        "seeds": args.seeds,
        "ours": asdict(ours),
        "trl": asdict(trl),
        "ours_per_seed": [asdict(side) for side in ours_runs],
        "trl_per_seed": [asdict(side) for side in trl_runs],
        "trl_settings": settings.kwargs,
        "checks": checks,
        "behind_at": comp.behind,
        "behind_beyond_spread": comp.behind_beyond_spread,
        "paired_differences": {str(k): list(v) for k, v in comp.paired.items()},
        "ratio_median_s": comp.ratio,
    }
    notes = [f"checked {k}: {v}" for k, v in checks.items()]
    notes += [f"not aligned: {x}" for x in settings.not_aligned]
    record.write(started.record(out, line, numbers, mode=mode, notes=notes), args.record_dir)
    return 0


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
