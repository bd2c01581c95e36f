"""Does asynchronous training learn as much as on-policy training at equal steps?

A shipped recipe run over seeds at ``rollout.max_head_offpolicyness`` k = 0 (on-policy, the
recipe as shipped) and at each asked k > 0 (each step's items submitted k steps ahead through
AReaL's executor, with its decoupled PPO loss and recomputed proximal logprobs, as AReaL runs
asynchronous GRPO). Each (k, seed) is one
``vlrollout train`` subprocess (:func:`bench_learning.run_one`); the same seeds, items and
evaluation in every arm, so the difference between arms is what off-policy rollouts cost.

Printed: the held-out greedy metric per evaluation step, mean ± sd over seeds per k; each k's
last-evaluation gap to k = 0 against the larger of the two arms' seed sd; training minutes. A
JSON record goes to ``--record-dir`` as ``offpolicy_learning_<recipe>.json``.

    .venv/bin/python bench/bench_offpolicy_learning.py --recipe counting        # k = 0, 1; 3 seeds
    .venv/bin/python bench/bench_offpolicy_learning.py --ks 0 1 2 --seeds 1 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from bench_learning import METRIC, RECIPES, RunResult, run_one  # noqa: E402

ASYNC_KEYS = ("actor.use_decoupled_loss=true", "actor.recompute_logprob=true")
"""What AReaL's asynchronous GRPO sets with k > 0 (the decoupled loss needs pi_prox)."""


def arm_overrides(k: int) -> list[str]:
    """The settings of the k-versions-stale arm (nothing for k = 0: the recipe as shipped).

    >>> arm_overrides(0), arm_overrides(2)[0]
    ([], 'rollout.max_head_offpolicyness=2')
    """
    return [] if k == 0 else [f"rollout.max_head_offpolicyness={k}", *ASYNC_KEYS]


def per_step(runs: list[RunResult]) -> dict[int, tuple[float, float]]:
    """Held-out mean and sd over the runs (seeds) per evaluation step all of them have.

    >>> mean, sd = per_step([RunResult("k0", 1, {0: 0.5, 4: 0.6}, {}, 1.0),
    ...                      RunResult("k0", 2, {0: 0.5, 4: 0.8}, {}, 1.0)])[4]
    >>> round(mean, 3), round(sd, 3)
    (0.7, 0.141)
    """
    steps = sorted(set.intersection(*(set(r.evals) for r in runs)))
    out = {}
    for s in steps:
        values = [r.evals[s] for r in runs]
        out[s] = (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)
    return out


def verdict(base: dict[int, tuple[float, float]], other: dict[int, tuple[float, float]]) -> str:
    """Whether ``other``'s last evaluation is within the seed spread of ``base``'s (k = 0).

    >>> verdict({8: (0.80, 0.02)}, {8: (0.79, 0.01)})
    'gap -0.010, seed sd 0.020: within the spread'
    >>> verdict({8: (0.80, 0.02)}, {8: (0.70, 0.01)})
    'gap -0.100, seed sd 0.020: outside the spread'
    """
    step = max(set(base) & set(other))
    gap = other[step][0] - base[step][0]
    spread = max(base[step][1], other[step][1])
    where = "within" if abs(gap) <= spread else "outside"
    return f"gap {gap:+.3f}, seed sd {spread:.3f}: {where} the spread"


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="counting")
    ap.add_argument("--ks", type=int, nargs="+", default=[0, 1], help="0 is always run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--eval-items", type=int, default=None, help="vlrollout.eval_items")
    record.add_keep(ap)
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE passed to every run")
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    ks = sorted({0, *args.ks})
    started = record.Run(f"offpolicy_learning_{args.recipe}", argv)
    common = ["vlrollout.progress=false", "vlrollout.log_rollouts=0", *args.overrides]
    if args.eval_items is not None:
        common.append(f"vlrollout.eval_items={args.eval_items}")
    runs: dict[int, list[RunResult]] = {k: [] for k in ks}
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for seed in args.seeds:
            for k in ks:
                out = base / f"k{k}-seed{seed}"
                res = run_one(RECIPES[args.recipe], f"k{k}", seed, out, common + arm_overrides(k))
                runs[k].append(res)
                print(f"k={k} seed {seed}: {res.evals} ({res.train_minutes:.1f} min)", flush=True)
    curves = {k: per_step(r) for k, r in runs.items()}
    steps = sorted(set.intersection(*(set(c) for c in curves.values())))
    metric = METRIC[args.recipe]
    held_out = record.Table(
        ["step", *(f"k={k} {metric}" for k in ks)],
        [[str(s), *(f"{curves[k][s][0]:.3f} ± {curves[k][s][1]:.3f}" for k in ks)] for s in steps],
        title=f"{metric}, mean ± sd over seeds {args.seeds}",
    )
    minutes = record.Table(
        ["k", "training minutes per run"],
        [[str(k), ", ".join(f"{r.train_minutes:.1f}" for r in runs[k])] for k in ks],
        title="minutes per run, in seed order",
    )
    for table in (held_out, minutes):
        print(f"\n{table.text()}")
    verdicts = {k: verdict(curves[0], curves[k]) for k in ks if k}
    line = f"headline: at step {steps[-1]}, " + "; ".join(
        f"k={k} vs k=0 {v}" for k, v in verdicts.items()
    )
    print(line)
    numbers = {
        "recipe": args.recipe,
        "ks": ks,
        "runs": {k: [vars(r) for r in rs] for k, rs in runs.items()},
        "curves": {k: {s: list(v) for s, v in c.items()} for k, c in curves.items()},
        "verdicts": verdicts,
    }
    changed = args.ks != [0, 1] or args.seeds != [1, 2, 3] or args.overrides or args.eval_items
    mode = "changed: " + " ".join(argv) if changed else "default"
    record.write(started.record([held_out, minutes], line, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
