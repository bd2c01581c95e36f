"""``vlrollout serve``'s memory per decoded image and video pixel, and its bound on the pixels
decoded at once against requests whose media compress far better than photos (flat PNGs and
clips: a few hundred KB that decode to GBs).

First, one request at a time against a fresh server with no queue bound: its growth in resident
memory at its peak (``VmHWM`` over idle) per pixel of its images (or of its video's sampled
frames), which must stay under the rate the bound counts (``RESIDENT_PER_PIXEL`` times the mode's
or video's weight). Then bursts of such requests with no bound (every request decoded at once),
and the same bursts against the defaults, where the peak must stay under idle plus the default
share of the machine with every request answered (each waits for room to decode its media).

    .venv/bin/python bench/bench_serve_decoded.py
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import sys
import time
import urllib.request
from dataclasses import dataclass

import aiohttp
import record
from PIL import Image
from scaling_trainer import high_water_mark
from served import Served

from vlrollout.processors.decode_room import MODE_WEIGHTS, RESIDENT_PER_PIXEL, VIDEO_PIXEL_WEIGHT
from vlrollout.serve.limits import QUEUE_MEMORY_SHARE
from vlrollout.serve.main import machine_memory_bytes
from vlrollout.tiny.synthetic_video import encode_mp4

MODEL = record.REPO / "assets" / "tiny-qwen2vl"
SINGLE = (
    (1, 8000, "RGB"),
    (4, 4000, "RGB"),
    (4, 8000, "RGB"),
    (1, 8000, "RGBA"),
    (1, 8000, "I;16"),
    (1, 8000, "CMYK"),
    (1, 6000, "F"),
)
"""One request at a time: (images per request, side of each flat square image, its mode)."""
BURST = (6, 3, 6000)
"""(requests at once, images per request, side) of RGB PNGs against the default bound."""
FORMATS = {
    "CMYK": ("JPEG", "image/jpeg", {}),
    "F": ("TIFF", "image/tiff", {"compression": "tiff_deflate"}),
}
"""How each mode is stored when not as PNG."""
NO_BOUND = ("--max-queued-requests", "0", "--max-queued-mb", "0")
VIDEO = (14, 4096)
"""(frames, side) of the flat MPEG-4 clip, each frame sampled (2 fps, as Qwen2-VL samples)."""
VIDEO_BURST = 3
"""Requests of the clip at once."""
VIDEO_FLAGS = ("--video-min-pixels", "3136", "--video-max-pixels", "3136")
"""Each sampled frame resized to 56x56, so the clip's tokens fit the tiny model's context."""


def flat_image_url(side: int, mode: str) -> str:
    """A one-colour ``side``-square image of ``mode`` as a data URL (PNG, or :data:`FORMATS`)."""
    fmt, mime, options = FORMATS.get(mode, ("PNG", "image/png", {}))
    colour = (120, 30, 200, 255)[: len(Image.new(mode, (1, 1)).getbands())]
    buf = io.BytesIO()
    Image.new(mode, (side, side), colour if len(colour) > 1 else colour[0]).save(
        buf, fmt, **options
    )
    return f"data:{mime};base64," + base64.b64encode(buf.getvalue()).decode()


def flat_clip_url(frames: int, side: int) -> str:
    """A clip of ``frames`` one-colour ``side``-square frames at 2 fps, as a data URL."""
    clip = encode_mp4([Image.new("RGB", (side, side), (120, 30, 200))] * frames, fps=2)
    return "data:video/mp4;base64," + base64.b64encode(clip).decode()


def chat_body(parts: list[dict]) -> dict:
    content = [*parts, {"type": "text", "text": "What colour is it?"}]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2}


@dataclass(frozen=True)
class Media:
    """What each request of a point sends: its body, how a table names it, its pixels and the
    resident bytes the decode room counts for each of them."""

    body: dict
    label: str
    pixels: int
    counted: float

    @classmethod
    def images(cls, images: int, side: int, mode: str = "RGB") -> Media:
        part = {"type": "image_url", "image_url": {"url": flat_image_url(side, mode)}}
        counted = RESIDENT_PER_PIXEL * MODE_WEIGHTS.get(mode, 1.0)
        label = f"{images} x {side}x{side} {mode} image"
        return cls(chat_body([part] * images), label, images * side * side, counted)

    @classmethod
    def video(cls, frames: int, side: int) -> Media:
        part = {"type": "video_url", "video_url": {"url": flat_clip_url(frames, side)}}
        counted = RESIDENT_PER_PIXEL * VIDEO_PIXEL_WEIGHT
        label = f"{frames} x {side}x{side} video frames"
        return cls(chat_body([part]), label, frames * side * side, counted)


async def send(url: str, body: dict, n: int) -> list[int]:
    timeout = aiohttp.ClientTimeout(total=1800)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one() -> int:
            async with session.post(url + "/v1/chat/completions", json=body) as r:
                await r.read()
                return r.status

        return list(await asyncio.gather(*(one() for _ in range(n))))


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=30) as r:
        return json.loads(r.read())


def point(n: int, media: Media, flags: tuple[str, ...]) -> dict:
    """``n`` requests of ``media`` at once against a fresh server."""
    serve = ("--protocol", "vllm", "--threads", "1", *VIDEO_FLAGS, *flags)
    with Served(MODEL, *serve) as server:
        idle = health(server.url)["rss_bytes"]
        start = time.perf_counter()
        statuses = asyncio.run(send(server.url, media.body, n))
        wall = time.perf_counter() - start
        peak = high_water_mark(server.proc.pid)
        queue = health(server.url)["queue"]
    pixels = media.pixels
    return {
        "requests": n,
        "media": media.label,
        "counted": media.counted,
        "body_bytes": len(json.dumps(media.body)),
        "pixels_per_request": pixels,
        "statuses": statuses,
        "idle_rss": idle,
        "peak_rss": peak,
        "wall_s": wall,
        "max_bytes": queue["max_bytes"],
        "per_pixel": (peak - idle) / pixels,
    }


def row(p: dict, bound: str) -> list[str]:
    counts = {s: p["statuses"].count(s) for s in sorted(set(p["statuses"]))}
    return [
        str(p["requests"]),
        p["media"],
        str(p["body_bytes"] // 1024),
        bound,
        " ".join(f"{s}:{c}" for s, c in counts.items()),
        f"{p['idle_rss'] / 2**20:.0f}",
        f"{p['peak_rss'] / 2**20:.0f}",
        f"{p['per_pixel']:.1f}" if p["requests"] == 1 else "-",
        f"{p['counted']:g}",
    ]


COLUMNS = [
    "requests",
    "media each",
    "body KB",
    "bound",
    "answers",
    "idle MB",
    "peak MB",
    "B/px",
    "counted",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    record.add_record_dir(parser)
    args = parser.parse_args()
    started = record.Run("serve_decoded")
    singles = []
    for images, side, mode in SINGLE:
        singles.append(point(1, Media.images(images, side, mode), NO_BOUND))
        print("  ".join(row(singles[-1], "off")), flush=True)
    clip = Media.video(*VIDEO)
    singles.append(point(1, clip, NO_BOUND))
    print("  ".join(row(singles[-1], "off")), flush=True)
    n, images, side = BURST
    bursts = []
    for media, requests in ((Media.images(images, side), n), (clip, VIDEO_BURST)):
        for bound, flags in (("off", NO_BOUND), ("on", ())):
            bursts.append((bound, point(requests, media, flags)))
            print("  ".join(row(bursts[-1][1], bound)), flush=True)
    unbounded, burst = bursts[0][1], bursts[1][1]
    video_unbounded, video_burst = bursts[2][1], bursts[3][1]
    share = QUEUE_MEMORY_SHARE * machine_memory_bytes()
    worst = max(singles, key=lambda p: p["per_pixel"] / p["counted"])
    ratio = worst["per_pixel"] / worst["counted"]
    failures = [f"{worst['media']}: more than counted"] if ratio > 1 else []
    for bounded in (burst, video_burst):
        if bounded["peak_rss"] > bounded["idle_rss"] + share:
            failures.append(f"{bounded['media']}: the burst's peak is over idle + share")
        if bounded["statuses"] != [200] * bounded["requests"]:
            failures.append(f"{bounded['media']}: burst answers {bounded['statuses']}")
    headline = (
        f"headline: resident bytes per decoded pixel of one request at most {ratio:.2f} of "
        f"those counted (worst {worst['media']}: {worst['per_pixel']:.1f} of "
        f"{worst['counted']:g}); against the defaults, {n} requests of {images} {side}x{side} "
        f"flat PNGs peak at {burst['peak_rss'] / 2**20:.0f} MB and {VIDEO_BURST} of a "
        f"{clip.label} clip at {video_burst['peak_rss'] / 2**20:.0f} MB (bound idle + "
        f"{share / 2**30:.1f} GiB), all answered; without a bound "
        f"{unbounded['peak_rss'] / 2**20:.0f} MB and {video_unbounded['peak_rss'] / 2**20:.0f} MB"
        + (f"; FAILED: {'; '.join(failures)}" if failures else "")
    )
    print(headline)
    table = record.Table(
        COLUMNS,
        [row(p, "off") for p in singles] + [row(p, bound) for bound, p in bursts],
        title="Chat requests of flat (one-colour) images or clips, 2 new tokens, tiny model, one "
        "torch thread; a fresh server per row; B/px = peak over idle per pixel of the request's "
        "images or sampled frames; counted = the bytes per pixel the decode room counts for "
        "the mode or for video",
    )
    notes = [
        "bound on = the defaults; off = --max-queued-requests 0 --max-queued-mb 0",
        "every server: --video-min-pixels 3136 --video-max-pixels 3136 (a clip's tokens fit "
        "the tiny model's context)",
    ]
    numbers = {
        "singles": singles,
        "unbounded": unbounded,
        "burst": burst,
        "video_unbounded": video_unbounded,
        "video_burst": video_burst,
        "share_bytes": share,
    }
    record.write(
        started.record([table], headline, numbers, mode="default", notes=notes), args.record_dir
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
