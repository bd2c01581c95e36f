"""Tokens/s of the local engine: one request at a time vs concurrent (batched) requests.

Uses ``assets/tiny-qwen2vl`` when it exists, else the random tiny Qwen2-VL of
``vlrollout.testing.tiny_model``. Every request is a vision prompt (one 112×84 image) and generates
exactly ``--new-tokens`` tokens, so both modes do the same work. The last line is the ratio.

    .venv/bin/python bench/bench_engine.py            # ~20 s on 2 shared CPU cores
    .venv/bin/python bench/bench_engine.py --device cuda --requests 64 --batch 32
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import numpy as np
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest
from PIL import Image

from vlrollout.engine import LocalInferenceEngine
from vlrollout.testing.tiny_model import tiny_qwen2vl

ASSET = Path(__file__).resolve().parent.parent / "assets" / "tiny-qwen2vl"


def build_requests(processor, n: int, new_tokens: int) -> list[ModelRequest]:
    rng = np.random.default_rng(0)
    reqs = []
    for i in range(n):
        image = Image.fromarray(rng.integers(0, 256, (84, 112, 3), dtype=np.uint8))
        question = "How many shapes are there?" + " Answer with a number." * (i % 3)
        content = [{"type": "image"}, {"type": "text", "text": question}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
        out = processor(text=[text], images=[image], return_tensors="pt")
        mm = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
        reqs.append(
            ModelRequest(
                input_ids=out["input_ids"][0].tolist(),
                metadata={"multi_modal_input": mm, "seed": i},
                gconfig=GenerationHyperparameters(
                    max_new_tokens=new_tokens, min_new_tokens=new_tokens
                ),
            )
        )
    return reqs


async def run_sequential(engine, reqs):
    return [await engine.agenerate(r) for r in reqs]


async def run_concurrent(engine, reqs):
    return await asyncio.gather(*(engine.agenerate(r) for r in reqs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8, help="max_batch_size when concurrent")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    if ASSET.exists():
        engine = LocalInferenceEngine.from_pretrained(str(ASSET), device=args.device)
        model, processor, source = engine.model, engine.processor, str(ASSET)
    else:
        model, processor = tiny_qwen2vl(seed=0)
        source = "random tiny Qwen2-VL (vlrollout.testing.tiny_model)"
    reqs = build_requests(processor, args.requests, args.new_tokens)

    rows = []
    for name, batch, runner in [
        ("one at a time", 1, run_sequential),
        (f"concurrent, batch {args.batch}", args.batch, run_concurrent),
    ]:
        with LocalInferenceEngine(
            model, processor, device=args.device, max_batch_size=batch
        ) as engine:
            asyncio.run(runner(engine, reqs[:2]))  # warm-up
            warm = engine.stats()
            start = time.perf_counter()
            resps = asyncio.run(runner(engine, reqs))
            seconds = time.perf_counter() - start
            stats = {k: v - warm.get(k, 0) for k, v in engine.stats().items()}
        tokens = sum(r.output_len for r in resps)
        mean_rows = stats["decode_rows"] / max(1, stats["decode_steps"])
        rows.append((name, len(resps), tokens, seconds, tokens / seconds, mean_rows))

    print(f"model: {source}; device {args.device}; torch threads {args.threads}")
    print(
        f"{'mode':<24}{'requests':>9}{'tokens':>8}{'seconds':>9}{'tokens/s':>10}{'rows/step':>10}"
    )
    for name, n, tokens, seconds, tps, mean_rows in rows:
        print(f"{name:<24}{n:>9}{tokens:>8}{seconds:>9.2f}{tps:>10.1f}{mean_rows:>10.2f}")
    print(f"ratio concurrent/one-at-a-time tokens/s: {rows[1][4] / rows[0][4]:.2f}x")


if __name__ == "__main__":
    main()
