"""``vlrollout serve``'s memory per decoded image pixel, and its bound on the pixels decoded at once
against requests whose images compress far better than photos (flat PNGs: a few hundred KB that
decode to GBs).

First, one request at a time against a fresh server with no queue bound: its growth in resident
memory at its peak (``VmHWM`` over idle) per pixel of its images, which must stay under the rate
the bound counts (``RESIDENT_PER_PIXEL``). Then a burst of such requests with no bound (every
request decoded at once), and the same burst against the defaults, where the peak must stay under
idle plus the default share of the machine with every request answered (each waits for room to
decode its images).

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

import aiohttp
import record
from PIL import Image
from scaling_trainer import high_water_mark
from served import Served

from vlrollout.processors.decode_room import MODE_WEIGHTS, RESIDENT_PER_PIXEL
from vlrollout.serve.limits import QUEUE_MEMORY_SHARE
from vlrollout.serve.main import machine_memory_bytes

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


def flat_image_url(side: int, mode: str) -> str:
    """A one-colour ``side``-square image of ``mode`` as a data URL (PNG, or :data:`FORMATS`)."""
    fmt, mime, options = FORMATS.get(mode, ("PNG", "image/png", {}))
    colour = (120, 30, 200, 255)[: len(Image.new(mode, (1, 1)).getbands())]
    buf = io.BytesIO()
    Image.new(mode, (side, side), colour if len(colour) > 1 else colour[0]).save(
        buf, fmt, **options
    )
    return f"data:{mime};base64," + base64.b64encode(buf.getvalue()).decode()


def chat_body(images: int, side: int, mode: str = "RGB") -> dict:
    content = [{"type": "image_url", "image_url": {"url": flat_image_url(side, mode)}}] * images
    content.append({"type": "text", "text": "What colour is it?"})
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2}


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


def point(n: int, images: int, side: int, flags: tuple[str, ...], mode: str = "RGB") -> dict:
    """``n`` requests of ``images`` flat ``side``-square images of ``mode`` at once against a
    fresh server."""
    body = chat_body(images, side, mode)
    with Served(MODEL, "--protocol", "vllm", "--threads", "1", *flags) as server:
        idle = health(server.url)["rss_bytes"]
        start = time.perf_counter()
        statuses = asyncio.run(send(server.url, body, n))
        wall = time.perf_counter() - start
        peak = high_water_mark(server.proc.pid)
        queue = health(server.url)["queue"]
    pixels = images * side * side
    return {
        "requests": n,
        "images": images,
        "side": side,
        "mode": mode,
        "counted": RESIDENT_PER_PIXEL * MODE_WEIGHTS.get(mode, 1.0),
        "body_bytes": len(json.dumps(body)),
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
        f"{p['images']} x {p['side']}x{p['side']} {p['mode']}",
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
    "images each",
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
        singles.append(point(1, images, side, NO_BOUND, mode))
        print("  ".join(row(singles[-1], "off")), flush=True)
    n, images, side = BURST
    unbounded = point(n, images, side, NO_BOUND)
    print("  ".join(row(unbounded, "off")), flush=True)
    burst = point(n, images, side, ())
    print("  ".join(row(burst, "on")), flush=True)
    share = QUEUE_MEMORY_SHARE * machine_memory_bytes()
    worst = max(singles, key=lambda p: p["per_pixel"] / p["counted"])
    ratio = worst["per_pixel"] / worst["counted"]
    failures = [f"{worst['mode']}: more than counted"] if ratio > 1 else []
    if burst["peak_rss"] > burst["idle_rss"] + share:
        failures.append("the burst's peak is over idle + share")
    if burst["statuses"] != [200] * n:
        failures.append(f"burst answers {burst['statuses']}")
    headline = (
        f"headline: resident bytes per decoded pixel of one request at most {ratio:.2f} of "
        f"those counted (worst {worst['mode']}: {worst['per_pixel']:.1f} of "
        f"{worst['counted']:g}); {n} requests of {images} {side}x{side} flat PNGs "
        f"against the defaults: peak {burst['peak_rss'] / 2**20:.0f} MB (bound idle + "
        f"{share / 2**30:.1f} GiB), {burst['statuses'].count(200)} answered; without a bound "
        f"{unbounded['peak_rss'] / 2**20:.0f} MB"
        + (f"; FAILED: {'; '.join(failures)}" if failures else "")
    )
    print(headline)
    table = record.Table(
        COLUMNS,
        [row(p, "off") for p in singles] + [row(unbounded, "off"), row(burst, "on")],
        title="Chat requests of flat (one-colour) images, 2 new tokens, tiny model, one torch "
        "thread; a fresh server per row; B/px = peak over idle per pixel of the request's "
        "images; counted = the bytes per pixel the decode room counts for the mode",
    )
    notes = ["bound on = the defaults; off = --max-queued-requests 0 --max-queued-mb 0"]
    numbers = {"singles": singles, "unbounded": unbounded, "burst": burst, "share_bytes": share}
    record.write(
        started.record([table], headline, numbers, mode="default", notes=notes), args.record_dir
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
