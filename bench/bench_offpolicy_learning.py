"""Does asynchronous training learn as much as on-policy training at equal steps?

A shipped recipe run over seeds at ``rollout.max_head_offpolicyness`` k = 0 (on-policy, the
recipe as shipped) and at each asked k > 0 (each step's items submitted k steps ahead through
AReaL's executor, with its decoupled PPO loss and recomputed proximal logprobs, as AReaL runs
asynchronous GRPO). Each (k, seed) is one
``vlrollout train`` subprocess (:func:`bench_learning.run_one`); the same seeds, items and
evaluation in every arm, so the difference between arms is what off-policy rollouts cost.

Each k > 0 runs twice: at the recipe's learning rate, and at that rate divided by k + 1, the
staleness-scaled step of asynchronous SGD (Zhang et al. 2016, "Staleness-aware Async-SGD"): a
gradient computed on samples k versions old is a delayed correction, and a step that moves the
policy far between versions overshoots on it. ``--no-scaled-lr`` leaves that arm out.
``--behave-clip`` adds a third form of each k > 0: AReaL's standard PPO loss with its ratio taken
against the logprobs of the policy that sampled each token (``actor.use_decoupled_loss=false``,
``actor.recompute_logprob=false``). With one minibatch per step the decoupled loss's ratio
against the recomputed proximal policy is 1 at every token, so nothing clips; this ratio is the
stale token's importance weight, and PPO's clip bounds how far an update follows it.

Printed: the held-out greedy metric per evaluation step, mean ± sd over seeds per arm; each arm's
last-evaluation gap to k = 0 against k = 0's seed sd; training minutes. Every run is evaluated on
the held-out items of ``--split`` (:mod:`splits`: ``test`` by default, ``dev`` for choosing). A
JSON record goes to ``--record-dir`` as ``offpolicy_learning_<recipe>.json``.

    .venv/bin/python bench/bench_offpolicy_learning.py --recipe counting   # k = 0, 1, 1 at lr/2
    .venv/bin/python bench/bench_offpolicy_learning.py --ks 0 1 2 --seeds 1 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
import splits  # noqa: E402
from bench_learning import METRIC, RECIPES, ROOT, RunResult, run_one  # noqa: E402

from vlrollout.argtypes import whole_number  # noqa: E402
from vlrollout.train.config import load_config  # noqa: E402

ASYNC_KEYS = ("actor.use_decoupled_loss=true", "actor.recompute_logprob=true")
"""What AReaL's asynchronous GRPO sets with k > 0 (the decoupled loss needs pi_prox)."""

BEHAVE_CLIP_KEYS = ("actor.use_decoupled_loss=false", "actor.recompute_logprob=false")
"""AReaL's standard PPO loss with its ratio against the sampling policy's logprobs."""


@dataclass(frozen=True)
class Arm:
    """One arm: ``k`` versions stale, at the recipe's learning rate or at it over ``k + 1``, with
    AReaL's decoupled loss or (``behave_clip``) PPO's ratio against the sampling policy."""

    k: int
    scaled_lr: bool = False
    behave_clip: bool = False

    @property
    def name(self) -> str:
        """``k0``, ``k1``, ``k1-lr/2``, ``k1-clip``: the arm's label in tables and the record."""
        if self.behave_clip:
            return f"k{self.k}-clip"
        return f"k{self.k}-lr/{self.k + 1}" if self.scaled_lr else f"k{self.k}"

    def overrides(self, recipe_lr: float) -> list[str]:
        """The arm's settings (nothing for k = 0: the recipe as shipped).

        >>> Arm(0).overrides(2e-4), Arm(2).overrides(2e-4)[0]
        ([], 'rollout.max_head_offpolicyness=2')
        >>> Arm(1, scaled_lr=True).overrides(2e-4)[-1]
        'actor.optimizer.lr=0.0001'
        >>> Arm(1, behave_clip=True).overrides(2e-4)[1:]
        ['actor.use_decoupled_loss=false', 'actor.recompute_logprob=false']
        """
        if self.k == 0:
            return []
        loss_keys = BEHAVE_CLIP_KEYS if self.behave_clip else ASYNC_KEYS
        keys = [f"rollout.max_head_offpolicyness={self.k}", *loss_keys]
        if self.scaled_lr:
            keys.append(f"actor.optimizer.lr={recipe_lr / (self.k + 1):g}")
        return keys


def arms(ks: list[int], scaled_lr: bool, behave_clip: bool = False) -> list[Arm]:
    """k = 0 first, then each k > 0 at the recipe's rate, with ``scaled_lr`` at rate/(k+1), and
    with ``behave_clip`` with PPO's ratio against the sampling policy.

    >>> [a.name for a in arms([1, 0], scaled_lr=True, behave_clip=True)]
    ['k0', 'k1', 'k1-lr/2', 'k1-clip']
    """
    out = [Arm(0)]
    for k in sorted(set(ks) - {0}):
        out.append(Arm(k))
        if scaled_lr:
            out.append(Arm(k, scaled_lr=True))
        if behave_clip:
            out.append(Arm(k, behave_clip=True))
    return out


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
    """Whether ``other``'s last evaluation is within the seed spread of ``base``'s (k = 0): its
    mean no further from k = 0's mean than k = 0's seed sd. (The other arm's own sd does not
    widen it: an arm whose seeds scatter is not thereby as good as k = 0.)

    >>> verdict({8: (0.80, 0.02)}, {8: (0.79, 0.01)})
    'gap -0.010, k0 seed sd 0.020: within the spread'
    >>> verdict({8: (0.80, 0.02)}, {8: (0.75, 0.09)})
    'gap -0.050, k0 seed sd 0.020: outside the spread'
    """
    step = max(set(base) & set(other))
    gap = other[step][0] - base[step][0]
    spread = base[step][1]
    where = "within" if abs(gap) <= spread else "outside"
    return f"gap {gap:+.3f}, k0 seed sd {spread:.3f}: {where} the spread"


def run_arms(
    config: str, arm_list: list[Arm], args: argparse.Namespace, base: Path
) -> dict[str, list[RunResult]]:
    """Every (arm, seed) run, ``args.jobs`` at a time, each with cores/jobs torch threads."""
    common = [
        splits.eval_override(args.split),
        "vlrollout.progress=false",
        "vlrollout.log_rollouts=0",
        *args.overrides,
    ]
    if args.eval_items is not None:
        common.append(f"vlrollout.eval_items={args.eval_items}")
    recipe_lr = load_config(str(ROOT / config)).actor.optimizer.lr
    threads = max(1, (os.cpu_count() or 1) // args.jobs) if args.jobs > 1 else None
    jobs = [(arm, seed) for seed in args.seeds for arm in arm_list]

    def one(job: tuple[Arm, int]) -> RunResult:
        arm, seed = job
        out = base / f"{arm.name.replace('/', '_')}-seed{seed}"
        res = run_one(config, arm.name, seed, out, common + arm.overrides(recipe_lr), threads)
        print(f"{arm.name} seed {seed}: {res.evals} ({res.train_minutes:.1f} min)", flush=True)
        return res

    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one, jobs))
    runs: dict[str, list[RunResult]] = {arm.name: [] for arm in arm_list}
    for (arm, _), res in zip(jobs, results, strict=True):
        runs[arm.name].append(res)
    return runs


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="counting")
    ap.add_argument("--ks", type=int, nargs="+", default=[0, 1], help="0 is always run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--eval-items", type=int, default=None, help="vlrollout.eval_items")
    ap.add_argument(
        "--no-scaled-lr", action="store_true", help="no k > 0 arm at the recipe's lr / (k + 1)"
    )
    ap.add_argument(
        "--behave-clip",
        action="store_true",
        help="add each k > 0 with PPO's ratio against the sampling policy, no decoupled loss",
    )
    ap.add_argument("--jobs", type=whole_number(1), default=1, help="runs at a time (cores shared)")
    record.add_keep(ap)
    splits.add_split(ap)
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE passed to every run")
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    splits.refuse_eval_seed(ap, args.overrides)
    arm_list = arms(args.ks, scaled_lr=not args.no_scaled_lr, behave_clip=args.behave_clip)
    started = record.Run(f"offpolicy_learning_{args.recipe}", argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = run_arms(RECIPES[args.recipe], arm_list, args, args.keep or Path(tmp))
    names = [arm.name for arm in arm_list]
    curves = {name: per_step(r) for name, r in runs.items()}
    steps = sorted(set.intersection(*(set(c) for c in curves.values())))
    metric = METRIC[args.recipe]
    held_out = record.Table(
        ["step", *(f"{n} {metric}" for n in names)],
        [
            [str(s), *(f"{curves[n][s][0]:.3f} ± {curves[n][s][1]:.3f}" for n in names)]
            for s in steps
        ],
        title=f"{metric} on the {args.split} split, mean ± sd over seeds {args.seeds}",
    )
    minutes = record.Table(
        ["arm", "training minutes per run"],
        [[n, ", ".join(f"{r.train_minutes:.1f}" for r in runs[n])] for n in names],
        title="minutes per run, in seed order",
    )
    for table in (held_out, minutes):
        print(f"\n{table.text()}")
    verdicts = {n: verdict(curves["k0"], curves[n]) for n in names[1:]}
    line = f"headline: at step {steps[-1]}, " + "; ".join(
        f"{n} vs k0 {v}" for n, v in verdicts.items()
    )
    print(line)
    numbers = {
        "recipe": args.recipe,
        "arms": names,
        "runs": {n: [vars(r) for r in rs] for n, rs in runs.items()},
        "curves": {n: {s: list(v) for s, v in c.items()} for n, c in curves.items()},
        "verdicts": verdicts,
        "split": args.split,
        "eval_seed": splits.SPLITS[args.split],
    }
    changed = args.ks != [0, 1] or args.seeds != [1, 2, 3] or args.overrides or args.eval_items
    changed = changed or args.no_scaled_lr or args.behave_clip or args.split != splits.DEFAULT
    mode = "changed: " + " ".join(argv) if changed else "default"
    record.write(started.record([held_out, minutes], line, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
