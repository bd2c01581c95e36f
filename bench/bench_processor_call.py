"""One transformers processor call, plain against :func:`with_merged_kwargs_cache`'s copy.

transformers 5.3 re-validates a processor's keyword arguments on every call (a fresh ``TypedDict``
per call defeats huggingface_hub's cached strict-dataclass builder); our preprocessor calls the
processor through a copy that validates them once. Same inputs, one run, interleaved, the outputs
checked equal: Qwen2.5-VL processor built offline (fast and slow image processor, Qwen2.5-VL's
default pixel budget), one prompt with one decoded RGB image per size (different subjects).

    .venv/bin/python bench/bench_processor_call.py           # ~20 s
    .venv/bin/python bench/bench_processor_call.py --quick   # fewer repetitions

The last line is the headline (the smallest saving, in ms and as a ratio).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from bench_workflow_overhead import MAX_PIXELS, MIN_PIXELS, build_processor, our_messages  # noqa: E402
from images import subject_photo  # noqa: E402

from vlrollout.processors.merge_kwargs_cache import with_merged_kwargs_cache  # noqa: E402

SIZES = (("texture", 336, 252), ("portrait", 800, 600), ("city", 1411, 1411))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    record.add_record_dir(parser)
    args = parser.parse_args(argv)
    started = record.Run("processor_call", argv)
    torch.set_num_threads(1)
    reps = 5 if args.quick else 21
    rows = []
    for kind in ("fast", "slow"):
        plain = build_processor(kind == "fast")
        cached = with_merged_kwargs_cache(plain)
        text = plain.apply_chat_template(our_messages(), tokenize=False, add_generation_prompt=True)
        for subject, w, h in SIZES:
            image = subject_photo(subject, w, h)
            kwargs = {"text": [text], "images": [[image]], "return_tensors": "pt"}
            want, got = plain(**kwargs), cached(**kwargs)
            same = all(torch.equal(want[k], got[k]) for k in want)
            times = {"plain": [], "cached": []}
            for r in range(reps):
                for name in ("plain", "cached") if r % 2 else ("cached", "plain"):
                    proc = plain if name == "plain" else cached
                    t0 = time.perf_counter()
                    proc(**kwargs)
                    times[name].append(time.perf_counter() - t0)
            p, c = (statistics.median(times[k]) * 1e3 for k in ("plain", "cached"))
            rows.append((f"{w}x{h} {subject} ({kind})", p, c, same))
    print(
        f"Qwen2.5-VL processor (min_pixels={MIN_PIXELS}, max_pixels={MAX_PIXELS}); torch threads=1;"
        f" medians of {reps} interleaved calls"
    )
    print(
        f"{'image (image processor)':<30}{'plain ms':>9}{'cached ms':>10}{'saved ms':>9}{'ratio':>7}  same"
    )
    for label, p, c, same in rows:
        print(f"{label:<30}{p:>9.2f}{c:>10.2f}{p - c:>9.2f}{p / c:>6.2f}x  {same}")
    worst = min(rows, key=lambda r: r[1] - r[2])
    headline = (
        f"headline: the smallest saving is {worst[1] - worst[2]:.2f} ms per call "
        f"({worst[1] / worst[2]:.2f}x) [{worst[0]}]; outputs identical: {all(r[3] for r in rows)}"
    )
    print(headline)
    table = record.Table(
        ["image (image processor)", "plain ms", "validated once ms", "saved ms", "plain/once",
         "outputs identical"],
        [[label, f"{p:.2f}", f"{c:.2f}", f"{p - c:.2f}", f"{p / c:.2f}x", str(same)]
         for label, p, c, same in rows],
        title=f"medians of {reps} interleaved calls; torch threads=1",
    )  # fmt: skip
    numbers = {label: {"plain_ms": p, "cached_ms": c, "same": same} for label, p, c, same in rows}
    mode = f"quick: {reps} calls per side" if args.quick else "default"
    record.write(started.record([table], headline, numbers, mode=mode), args.record_dir)
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
