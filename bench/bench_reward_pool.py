"""CIDEr-D reward cost through the path workflows use (``RewardCaller`` -> vlrollout's reward pool)
as the reference corpus grows: 12, 5,000, 20,000 and 118,000 reference sets (COCO train ~118k).

Run: ``.venv/bin/python bench/bench_reward_pool.py`` (a few minutes on 2 CPU cores; ``--sizes``
to choose, ``--quick`` for a smoke run). Per size it prints: building the reward in the caller, one call through AReaL's
``AsyncRewardWrapper`` given the reward itself (the old path: the reward is pickled into the
pool on every call), the first call through ``RewardCaller`` (the worker loads the reward file
once) and the mean of later calls through ``RewardCaller`` (only a recipe crosses), and a direct
in-process call for reference. The old path is measured up to 20,000 sets (it grows to seconds
per call). Headline (last): per-call cost at the largest corpus relative to the smallest.

Captions are synthetic (seeded, Zipf-distributed 3,000-word vocabulary, 8-14 words, 5 per image).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import record  # noqa: E402
from areal.api.reward_api import AsyncRewardWrapper  # noqa: E402

from vlrollout.rewards.caller import RewardCaller  # noqa: E402
from vlrollout.rewards.caption import CaptionReward, CiderD  # noqa: E402

OLD_PATH_MAX = 20_000


def corpus(n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]

    def caption() -> str:
        return " ".join(rng.choices(vocab, weights, k=rng.randint(8, 14)))

    return [[caption() for _ in range(5)] for _ in range(n)]


async def _mean_ms(call, k: int) -> float:
    t0 = time.perf_counter()
    for _ in range(k):
        await call()
    return (time.perf_counter() - t0) / k * 1000


def measure(n: int) -> dict[str, float]:
    refs = corpus(n)
    t0 = time.perf_counter()
    reward = CaptionReward("cider_d", corpus=CiderD.from_references(refs))
    build_s = time.perf_counter() - t0
    candidate, captions = refs[0][0], refs[0][1:]
    out: dict[str, float] = {"build_s": build_s}
    t0 = time.perf_counter()
    for _ in range(20):
        reward("p", candidate, [], [], captions=captions)
    out["direct_ms"] = (time.perf_counter() - t0) / 20 * 1000

    async def main() -> None:
        if n <= OLD_PATH_MAX:
            old = AsyncRewardWrapper(reward, timeout_seconds=600, max_retries=0)
            await old("p", candidate, [], [], captions=captions)  # warm the pool's processes
            out["old_ms"] = await _mean_ms(
                lambda: old("p", candidate, [], [], captions=captions), 3
            )
        t1 = time.perf_counter()
        caller = RewardCaller(reward, timeout_s=600)
        out["recipe_s"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        await caller("p", candidate, [], [], {"captions": captions})
        out["first_ms"] = (time.perf_counter() - t1) * 1000
        out["pool_ms"] = await _mean_ms(
            lambda: caller("p", candidate, [], [], {"captions": captions}), 30
        )

    asyncio.run(main())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[12, 5_000, 20_000, 118_000])
    parser.add_argument("--quick", action="store_true", help="sizes 12 and 500 (a smoke run)")
    record.add_record_dir(parser)
    args = parser.parse_args()
    started = record.Run("reward_pool")
    if args.quick:
        args.sizes = [12, 500]
    print(
        f"{'ref sets':>9s} {'build':>8s} {'recipe':>8s} {'old path/call':>14s} "
        f"{'1st call':>9s} {'RewardCaller/call':>18s} {'direct/call':>12s}"
    )
    results = {}
    for n in args.sizes:
        r = results[n] = measure(n)
        old = f"{r['old_ms']:12.1f}ms" if "old_ms" in r else f"{'not run':>14s}"
        print(
            f"{n:9d} {r['build_s']:7.1f}s {r['recipe_s']:7.2f}s {old} {r['first_ms']:7.0f}ms "
            f"{r['pool_ms']:16.2f}ms {r['direct_ms']:10.3f}ms",
            flush=True,
        )
    small, large = results[min(results)], results[max(results)]
    olds = [(n, r["old_ms"]) for n, r in results.items() if "old_ms" in r]
    if olds:
        n_old, old_ms = max(olds)
        print(
            f"old path at {n_old} sets: {old_ms:.0f} ms/call = "
            f"{old_ms / results[n_old]['pool_ms']:.0f}x RewardCaller"
        )
    headline = (
        f"headline: RewardCaller per call {small['pool_ms']:.2f} ms at {min(results)} sets, "
        f"{large['pool_ms']:.2f} ms at {max(results)} sets "
        f"(ratio {large['pool_ms'] / small['pool_ms']:.2f}x; the corpus does not cross per call)"
    )
    print(headline)
    table = record.Table(
        ["reference sets", "build s", "RewardCaller first call ms", "RewardCaller ms/call",
         "the reward itself passed, ms/call", "in process ms/call"],
        [[f"{n:,}", f"{r['build_s']:.1f}", f"{r['first_ms']:.0f}", f"{r['pool_ms']:.2f}",
          f"{r['old_ms']:.1f}" if "old_ms" in r else "not run", f"{r['direct_ms']:.3f}"]
         for n, r in results.items()],
        title="one call at a time; the old path is AReaL's AsyncRewardWrapper given the reward",
    )  # fmt: skip
    mode = f"quick: sizes {args.sizes}" if args.quick else "default"
    record.write(
        started.record([table], headline, {str(n): r for n, r in results.items()}, mode=mode),
        args.record_dir,
    )
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
