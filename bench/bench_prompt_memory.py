"""Memory a long rollout run holds in prepared prompts: peak of the cache vs the sum of all entries.

Run: ``.venv/bin/python bench/bench_prompt_memory.py`` (1,000 items of distinct 640x480 JPEG photos,
GRPO groups of 8 through AReaL's ``GroupedRolloutWorkflow``, 16 groups in flight as AReaL's
executor keeps them, Qwen2.5-VL processor at its default pixel budget, zero-latency engine);
``--quick``: 60 items. Prints the prepared-prompt cache's peak bytes and entries, what keeping every
entry would cost (the old 1,024-entry LRU kept all of them), and the process's peak RSS. The headline
is printed last.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import record  # noqa: E402
from areal.api.cli_args import GenerationHyperparameters  # noqa: E402
from areal.infra.remote_inf_engine import GroupedRolloutWorkflow  # noqa: E402
from images import synthetic_photo  # noqa: E402

from vlrollout.processors.cache import prepared_nbytes  # noqa: E402
from vlrollout.testing.offline_processors import build_qwen2_5_vl  # noqa: E402
from vlrollout.testing.scripted_engine import ScriptedEngine  # noqa: E402
from vlrollout.workflows import VisionRLVRWorkflow  # noqa: E402

MIN_PIXELS, MAX_PIXELS = 3136, 12845056


def zero_reward(prompt, completions, prompt_ids, completion_ids, **task_data) -> float:
    return 0.0


def item(k: int, size: tuple[int, int]) -> dict:
    buf = io.BytesIO()
    synthetic_photo(*size, seed=k).save(buf, format="JPEG", quality=90)
    return {
        "id": k,
        "messages": [{"role": "user", "content": f"<image>Describe picture {k}."}],
        "images": [buf.getvalue()],
    }


async def run_items(n_items: int, size: tuple[int, int], group: int, in_flight: int) -> dict:
    proc = build_qwen2_5_vl(MIN_PIXELS, MAX_PIXELS)
    tok = proc.tokenizer
    engine = ScriptedEngine([[tok.eos_token_id]])
    wf = VisionRLVRWorkflow(zero_reward, GenerationHyperparameters(max_new_tokens=4), tok, proc)
    grouped = GroupedRolloutWorkflow(wf, group, logging.getLogger("bench"))
    cache = wf.ctx.prompts
    sizes: list[int] = []
    peak_entries = 0
    sem = asyncio.Semaphore(in_flight)

    async def one(k: int) -> None:
        nonlocal peak_entries
        async with sem:
            data = item(k, size)
            out = await grouped.arun_episode(engine, data)
            peak_entries = max(peak_entries, len(cache))
            if out is not None:
                sizes.append(prepared_nbytes(cache.preprocessor.prepare(data)) if k < 3 else 0)
            engine.requests.clear()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(k) for k in range(n_items)))
    stats = cache.stats()
    # Episodes finish in any order, so the measured sizes (items 0-2) can be anywhere in the list.
    per_entry = max(sizes, default=0)
    return {
        "seconds": time.perf_counter() - t0,
        "accepted_episodes": wf.ledger.accepted,
        "preparations": stats["misses"],
        "peak_bytes": stats["peak_bytes"],
        "peak_entries": peak_entries,
        "held_at_end": stats["bytes"],
        "entry_bytes": per_entry,
        "keep_all_bytes": per_entry * n_items,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--size", default="640x480")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=16)
    record.add_record_dir(parser)
    args = parser.parse_args(argv)
    started = record.Run("prompt_memory", argv)
    torch.set_num_threads(1)
    n = 60 if args.quick else args.items
    size = tuple(int(v) for v in args.size.split("x"))
    r = asyncio.run(run_items(n, size, args.group_size, args.in_flight))
    mib = 1 / (1 << 20)
    print(
        f"{n} items of {args.size} JPEG, groups of {args.group_size}, {args.in_flight} groups in "
        f"flight, Qwen2.5-VL default pixel budget: {r['accepted_episodes']} episodes, "
        f"{r['preparations']} preparations, {r['seconds']:.0f} s"
    )
    print(f"one prepared entry: {r['entry_bytes'] * mib:.1f} MiB")
    print(f"cache at the end: {r['held_at_end'] * mib:.1f} MiB; peak entries {r['peak_entries']}")
    print(f"process peak RSS: {r['max_rss_mib']:.0f} MiB")
    headline = (
        f"headline: prepared prompts peak {r['peak_bytes'] * mib:.0f} MiB "
        f"(keeping every entry, as a 1,024-entry LRU did: {r['keep_all_bytes'] * mib:.0f} MiB)"
    )
    print(headline)
    table = record.Table(
        ["items", "prepared-prompt peak MiB", "held at the end MiB",
         "keeping every entry MiB", "one entry MiB", "process peak RSS MiB"],
        [[f"{n:,}", f"{r['peak_bytes'] * mib:.0f}", f"{r['held_at_end'] * mib:.0f}",
          f"{r['keep_all_bytes'] * mib:,.0f}", f"{r['entry_bytes'] * mib:.1f}",
          f"{r['max_rss_mib']:,.0f}"]],
        title=f"{args.size} JPEG, groups of {args.group_size}, {args.in_flight} groups in flight",
    )  # fmt: skip
    mode = f"quick: {n} items" if args.quick else "default"
    record.write(started.record([table], headline, r, mode=mode), args.record_dir)
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
