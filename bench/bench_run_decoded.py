"""``vlrollout run``'s peak memory on prompts of very large images or videos, one item at a time
and several at once: items prepared at once wait until their media's pixels fit beside those being
decoded (``vlrollout.processors.decode_room``), so preparing them concurrently must not multiply
the peak.

Each row runs ``vlrollout run`` on the tiny model with ``--group-size 2`` over items of four
one-colour PNGs (a few hundred KB each, 64 M pixels decoded), or of one clip of 16 one-colour
4096x4096 frames (268 M pixels sampled), and reads the command's peak resident memory; the
headline is the worst, over the two, of the peak at ``--concurrency 3`` over the peak at 1.

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

from vlrollout.tiny.synthetic_video import encode_mp4

MODEL = record.REPO / "assets" / "tiny-qwen2vl"
ITEMS, IMAGES, SIDE = 3, 4, 8000
FRAMES, FRAME_SIDE = 16, 4096
CONCURRENCY = (1, 3)
MAX_PIXELS = 50000
FLAGS = {
    "images": ("--max-pixels", str(MAX_PIXELS)),
    "videos": (
        "--video-max-frames",
        "16",
        "--video-min-pixels",
        "3136",
        "--video-max-pixels",
        "3136",
    ),
}
"""Each media's resize budget: a few tokens per image or frame, so prompts fit the context."""
TARGET = 1.5
"""Largest peak at ``--concurrency 3`` over the peak at 1 that counts as not multiplied."""


def write_data(folder: Path, media: str) -> Path:
    """``ITEMS`` items of ``IMAGES`` flat PNGs each, or of one flat clip each (``media``)."""
    data = folder / f"{media}.jsonl"
    with data.open("w") as f:
        for k in range(ITEMS):
            if media == "images":
                files = [
                    flat_png(folder / f"{k}_{j}.png", (40 * k, 50 * j, 100)) for j in range(IMAGES)
                ]
                text, field = "<image>" * IMAGES, "images"
            else:
                files, text, field = [flat_clip(folder / f"{k}.mp4", 40 * k)], "<video>", "videos"
            messages = [{"role": "user", "content": text + "How many shapes?"}]
            row = {"id": f"i{k}", "messages": messages, field: files, "answer": "1"}
            f.write(json.dumps(row) + "\n")
    return data


def flat_png(path: Path, colour: tuple[int, int, int]) -> str:
    Image.new("RGB", (SIDE, SIDE), colour).save(path)
    return path.name


def flat_clip(path: Path, shade: int) -> str:
    """``FRAMES`` one-colour frames at 2 fps (all sampled at Qwen2-VL's 2 fps)."""
    frame = Image.new("RGB", (FRAME_SIDE, FRAME_SIDE), (shade,) * 3)
    path.write_bytes(encode_mp4([frame] * FRAMES, fps=2))
    return path.name


PEAK_OF_CHILD = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)
"""A wrapper printing its one child's peak RSS in KiB (``RUSAGE_CHILDREN`` holds the largest of
all children waited for, so each run gets a fresh wrapper)."""


def run(data: Path, media: str, concurrency: int, out: Path) -> dict:
    """One ``vlrollout run`` in a child; its peak RSS from the child's resource usage."""
    cmd = [sys.executable, "-c", PEAK_OF_CHILD, sys.executable, "-m", "vlrollout.cli", "run"]
    cmd += ["--model", str(MODEL)]
    cmd += ["--data", str(data), "--output", str(out), "--reward", "count"]
    cmd += ["--group-size", "2", "--concurrency", str(concurrency), *FLAGS[media]]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=record.REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_kb = int(done.stdout.split()[-1])
    summary = json.loads((out / "summary.json").read_text())
    return {
        "media": media,
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
    points = []
    for media in FLAGS:
        with tempfile.TemporaryDirectory() as tmp:
            data = write_data(Path(tmp), media)
            for c in CONCURRENCY:
                points.append(run(data, media, c, Path(tmp, f"out{c}")))
                p = points[-1]
                print(
                    f"{media}  {c}  {p['peak_rss'] / 2**20:.0f} MB  {p['wall_s']:.1f} s", flush=True
                )
    ratios = {
        media: [p for p in points if p["media"] == media][-1]["peak_rss"]
        / [p for p in points if p["media"] == media][0]["peak_rss"]
        for media in FLAGS
    }
    worst = max(ratios, key=ratios.get)
    ratio = ratios[worst]
    failures = [f"{m}: {r:.2f}x over {TARGET}x" for m, r in ratios.items() if r > TARGET]
    failures += [
        f"{p['media']} at concurrency {p['concurrency']}: {p['prepared']} items"
        for p in points
        if p["prepared"] != ITEMS
    ]
    shown = "; ".join(f"{m} {r:.2f}x" for m, r in ratios.items())
    headline = (
        f"headline: peak RSS at --concurrency {CONCURRENCY[-1]} at most {ratio:.2f}x the peak at "
        f"1 (worst {worst}; {shown}; target at most {TARGET}x)"
        + (f"; FAILED: {'; '.join(failures)}" if failures else "")
    )
    print(headline)
    rows = [
        [p["media"], str(p["concurrency"]), f"{p['peak_rss'] / 2**20:.0f}", f"{p['wall_s']:.1f}"]
        for p in points
    ]
    table = record.Table(
        ["media", "--concurrency", "peak MB", "wall s"],
        rows,
        title=f"vlrollout run, tiny model, {ITEMS} items of {IMAGES} one-colour {SIDE}x{SIDE} PNGs "
        f"(--max-pixels {MAX_PIXELS}) or of one clip of {FRAMES} one-colour {FRAME_SIDE}x"
        f"{FRAME_SIDE} frames (--video-min-pixels/--video-max-pixels 3136), --group-size 2; one "
        "child process per row",
    )
    numbers = {"points": points, "ratios": ratios, "ratio": ratio}
    record.write(started.record([table], headline, numbers, mode="default"), args.record_dir)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
