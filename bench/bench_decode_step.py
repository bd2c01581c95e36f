"""The pieces of one engine decode step: the forward (the model's own vs the direct decoder + LM
head path) and the sampling step (greedy and sampled), on the shipped tiny model.

The forward: one decode step of a batch of ``--rows`` vision prompts (prefilled together), its
cache cropped back after every call so each call sees the same cache; both paths in turn, many
times; the table shows the median and 10th percentile, and whether the logits are bit-identical.
Sampling: ``sample_batch`` on those logits right after a forward (as in the engine, with the
forward's data in the caches) and called again at once.

    .venv/bin/python bench/bench_decode_step.py              # ~20 s
    .venv/bin/python bench/bench_decode_step.py --rows 8
    .venv/bin/python bench/bench_decode_step.py --quick      # for the test suite
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import record
import torch
from bench_engine import build_cases, generate_batches
from entry import positive_int

from vlrollout.engine import LocalInferenceEngine
from vlrollout.engine.sampling import SamplingParams, sample_batch
from vlrollout.engine.step_forward import DirectStep, FullStep, choose_step

ASSET = Path(__file__).resolve().parent.parent / "assets" / "tiny-qwen2vl"


def quantiles(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p10 = ordered[len(ordered) // 10]
    return f"median {statistics.median(ordered) * 1e6:7.1f} us  p10 {p10 * 1e6:7.1f} us"


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=positive_int, default=16)
    parser.add_argument("--calls", type=positive_int, default=300, help="calls per path")
    parser.add_argument("--quick", action="store_true", help="4 rows, 20 calls (the test suite)")
    record.add_record_dir(parser)
    args = parser.parse_args()
    started = record.Run("decode_step")
    if args.quick:
        args.rows, args.calls = 4, 20
    torch.set_num_threads(1)

    engine = LocalInferenceEngine.from_pretrained(str(ASSET), dtype=torch.float32)
    model, processor = engine.model, engine.processor
    batch = generate_batches(processor, build_cases(args.rows, 64, mixed=True), args.rows)[0][1]
    out = model(**batch, use_cache=True, logits_to_keep=1)
    cache, (rows, length) = out.past_key_values, batch["input_ids"].shape
    mask = torch.ones(rows, 1, 1, length + 1, dtype=torch.bool)
    mask[:, 0, 0, :length] = batch["attention_mask"].bool()
    ids = out.logits[:, -1].argmax(-1, keepdim=True)
    positions = torch.full((3, rows, 1), length, dtype=torch.long)

    direct = choose_step(model, torch.device("cpu"), mrope=True, prepared_mask=True)
    assert isinstance(direct, DirectStep), "the probe kept the full forward for this model"
    paths = {"model forward (FullStep)": FullStep(model), "decoder + head (DirectStep)": direct}
    times: dict[str, list[float]] = {name: [] for name in paths}
    logits = {}
    for _ in range(args.calls):
        for name, step in paths.items():
            start = time.perf_counter()
            logits[name], _ = step(ids, mask, positions, cache)
            times[name].append(time.perf_counter() - start)
            cache.crop(length)
    same = torch.equal(*logits.values())

    greedy = [SamplingParams(64, min_new_tokens=64, greedy=True, stop_token_ids=frozenset({2}))]
    sampled = [SamplingParams(64, temperature=1.0, stop_token_ids=frozenset({2}))]
    banned = frozenset(engine.banned_token_ids)
    generator = torch.Generator().manual_seed(0)
    sampling: dict[str, list[float]] = {}
    for kind, params in (("greedy", greedy * rows), ("sampled", sampled * rows)):
        for when in ("right after a forward", "called again at once"):
            sampling[f"{kind}, {when}"] = []
        for _ in range(args.calls // 2):
            step_logits, _ = direct(ids, mask, positions, cache)
            cache.crop(length)
            for when in ("right after a forward", "called again at once"):
                start = time.perf_counter()
                sample_batch(step_logits, params, banned, [3] * rows, None, None, generator)
                sampling[f"{kind}, {when}"].append(time.perf_counter() - start)

    print(f"model: {ASSET}; {rows} rows, {length} cached columns; torch threads 1")
    for name, seconds in times.items():
        print(f"decode step, {name:<28} {quantiles(seconds)}")
    full, fast = (statistics.median(t) for t in times.values())
    saved = (
        f"decode step saved by the direct path: {(full - fast) * 1e6:.1f} us per step "
        f"({(full - fast) / full:.1%}); logits bit-identical: {same}"
    )
    for name, seconds in sampling.items():
        print(f"sample_batch, {name:<34} {quantiles(seconds)}")
    print(saved)  # the headline, last

    def row(what: str, seconds: list[float]) -> list[str]:
        ordered = sorted(seconds)
        return [what, f"{statistics.median(ordered) * 1e6:.1f}", f"{ordered[len(ordered) // 10] * 1e6:.1f}"]  # fmt: skip

    table = record.Table(
        ["step", "median us", "p10 us"],
        [row(f"decode step, {name}", s) for name, s in times.items()]
        + [row(f"sample_batch, {name}", s) for name, s in sampling.items()],
        title=f"{rows} rows, {length} cached columns; torch threads 1; {args.calls} calls per path",
    )
    numbers = {
        "saved_us": (full - fast) * 1e6,
        "saved_fraction": (full - fast) / full,
        "bit_identical": same,
        "median_us": {k: statistics.median(v) * 1e6 for k, v in {**times, **sampling}.items()},
    }
    mode = f"quick: {rows} rows, {args.calls} calls" if args.quick else "default"
    record.write(started.record([table], saved, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(main)
