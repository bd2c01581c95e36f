"""``vlrollout run``'s peak memory on prompts of very large images, one item at a time and several
at once: items prepared at once wait until their images' pixels fit beside those being decoded
(``vlrollout.processors.decode_room``), so preparing them concurrently must not multiply the peak.

Each row runs ``vlrollout run`` on the tiny model over items of four one-colour PNGs (a few
hundred KB each, 64 M pixels decoded) with ``--group-size 2`` and reads the command's peak
resident memory; the headline is the peak at ``--concurrency 3`` over the peak at 1.

    .venv/bin/python bench/bench_run_decoded.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record
from PIL import Image

MODEL = record.REPO / "assets" / "tiny-qwen2vl"
ITEMS, IMAGES, SIDE = 3, 4, 8000
CONCURRENCY = (1, 3)
MAX_PIXELS = 50000
TARGET = 1.5
"""Largest peak at ``--concurrency 3`` over the peak at 1 that counts as not multiplied."""


def write_data(folder: Path) -> Path:
    for k in range(ITEMS):
        for j in range(IMAGES):
            Image.new("RGB", (SIDE, SIDE), (40 * k, 50 * j, 100)).save(folder / f"{k}_{j}.png")
    data = folder / "data.jsonl"
    with data.open("w") as f:
        for k in range(ITEMS):
            messages = [{"role": "user", "content": "<image>" * IMAGES + "How many shapes?"}]
            images = [f"{k}_{j}.png" for j in range(IMAGES)]
            row = {"id": f"i{k}", "messages": messages, "images": images, "answer": "1"}
            f.write(json.dumps(row) + "\n")
    return data


PEAK_OF_CHILD = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)
"""A wrapper printing its one child's peak RSS in KiB (``RUSAGE_CHILDREN`` holds the largest of
all children waited for, so each run gets a fresh wrapper)."""


def run(data: Path, concurrency: int, out: Path) -> dict:
    """One ``vlrollout run`` in a child; its peak RSS from the child's resource usage."""
    cmd = [sys.executable, "-c", PEAK_OF_CHILD, sys.executable, "-m", "vlrollout.cli", "run"]
    cmd += ["--model", str(MODEL)]
    cmd += ["--data", str(data), "--output", str(out), "--reward", "count"]
    cmd += ["--group-size", "2", "--concurrency", str(concurrency), "--max-pixels", str(MAX_PIXELS)]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=record.REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_kb = int(done.stdout.split()[-1])
    summary = json.loads((out / "summary.json").read_text())
    return {
        "concurrency": concurrency,
        "peak_rss": peak_kb * 1024,
        "wall_s": wall,
        "returncode": done.returncode,
        "prepared": summary["items"]["done"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    record.add_record_dir(parser)
    args = parser.parse_args()
    started = record.Run("run_decoded")
    with tempfile.TemporaryDirectory() as tmp:
        data = write_data(Path(tmp))
        points = [run(data, c, Path(tmp, f"out{c}")) for c in CONCURRENCY]
    for p in points:
        print(
            f"{p['concurrency']}  {p['peak_rss'] / 2**20:.0f} MB  {p['wall_s']:.1f} s", flush=True
        )
    ratio = points[-1]["peak_rss"] / points[0]["peak_rss"]
    failures = [f"{ratio:.2f}x over {TARGET}x"] if ratio > TARGET else []
    failures += [
        f"concurrency {p['concurrency']}: {p['prepared']} items"
        for p in points
        if p["prepared"] != ITEMS
    ]
    headline = (
        f"headline: peak RSS at --concurrency {CONCURRENCY[-1]} {ratio:.2f}x the peak at 1 "
        f"({points[-1]['peak_rss'] / 2**20:.0f} MB against {points[0]['peak_rss'] / 2**20:.0f} MB; "
        f"target at most {TARGET}x)" + (f"; FAILED: {'; '.join(failures)}" if failures else "")
    )
    print(headline)
    rows = [
        [str(p["concurrency"]), f"{p['peak_rss'] / 2**20:.0f}", f"{p['wall_s']:.1f}"]
        for p in points
    ]
    table = record.Table(
        ["--concurrency", "peak MB", "wall s"],
        rows,
        title=f"vlrollout run, tiny model, {ITEMS} items of {IMAGES} one-colour {SIDE}x{SIDE} PNGs, "
        f"--group-size 2 --max-pixels {MAX_PIXELS}; one child process per row",
    )
    numbers = {"points": points, "ratio": ratio}
    record.write(started.record([table], headline, numbers, mode="default"), args.record_dir)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
