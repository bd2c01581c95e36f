"""``vlrollout serve`` under a burst of concurrent image requests: throughput, latency and the
server's memory with the queue bound on (the defaults) and off.

Each point starts a fresh server (``bench/served.py``) so its peak resident memory (``VmHWM``)
is that burst's alone, sends ``N`` chat requests at once (each a 2048x1536 JPEG as a ``data:``
URL, 4 new tokens), polls ``/health`` throughout, and reads the server's memory idle, at its
peak and a few seconds after the burst (when the queue has drained and freed memory was handed
back). The bound holds when the peak stays under idle + the default share of the machine and the
excess is answered 503; every request must get exactly one answer.

    .venv/bin/python bench/bench_serve_load.py                 # 10, 100, 1000 x bound on/off
    .venv/bin/python bench/bench_serve_load.py --burst 1500     # adds 1500 against the defaults
    .venv/bin/python bench/bench_serve_load.py --quick          # 10 and 100 only
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import record
from images import bench_photos
from scaling_trainer import high_water_mark
from served import Served

from vlrollout.serve.limits import QUEUE_MEMORY_SHARE
from vlrollout.serve.main import machine_memory_bytes

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "assets" / "tiny-qwen2vl"
CONCURRENCY = (10, 100, 1000)
QUICK_CONCURRENCY = (10, 100)
PHOTO_SIZE = (2048, 1536)
NEW_TOKENS = 4
SETTLE_S = 4.0
"""Seconds after a burst before the memory is read again (the queue drains, memory is trimmed)."""
BOUNDS = {"on": (), "off": ("--max-queued-requests", "0", "--max-queued-mb", "0")}
"""Server flags per setting: the defaults, or no bound."""


def chat_body(image_url: str) -> dict:
    content = [
        {"type": "image_url", "image_url": {"url": image_url}},
        {"type": "text", "text": "How many shapes are there?"},
    ]
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": NEW_TOKENS,
        "ignore_eos": True,
    }


async def burst(url: str, body: dict, n: int) -> dict:
    """Send ``n`` copies of ``body`` at once and poll ``/health`` until they are answered."""
    timeout = aiohttp.ClientTimeout(total=3600)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one() -> tuple[int, float]:
            start = time.perf_counter()
            async with session.post(url + "/v1/chat/completions", json=body) as r:
                await r.read()
                return r.status, time.perf_counter() - start

        health_s: list[float] = []
        queued: list[int] = []

        async def poll(done: asyncio.Event) -> None:
            while not done.is_set():
                start = time.perf_counter()
                async with session.get(url + "/health") as r:
                    queued.append((await r.json())["queue"]["requests"])
                health_s.append(time.perf_counter() - start)
                await asyncio.sleep(0.1)

        done = asyncio.Event()
        poller = asyncio.create_task(poll(done))
        start = time.perf_counter()
        answers = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
        wall = time.perf_counter() - start
        done.set()
        await poller
    errors = [a for a in answers if isinstance(a, BaseException)]
    answered = [a for a in answers if not isinstance(a, BaseException)]
    ok = sorted(s for status, s in answered if status == 200)
    return {
        "sent": n,
        "ok": len(ok),
        "refused": sum(status == 503 for status, _ in answered),
        "other": len(answered) - len(ok) - sum(status == 503 for status, _ in answered),
        "errors": len(errors),
        "wall_s": wall,
        "throughput_per_s": len(ok) / wall,
        "p50_s": statistics.median(ok) if ok else None,
        "p99_s": ok[min(len(ok) - 1, round(0.99 * (len(ok) - 1)))] if ok else None,
        "health_max_s": max(health_s) if health_s else None,
        "health_answers": len(health_s),
        "max_queued_seen": max(queued) if queued else 0,
    }


def run_point(n: int, bound: str, body: dict) -> dict:
    """One burst of ``n`` against a fresh server with the bound ``on`` or ``off``."""
    flags = ("--protocol", "vllm", "--threads", "1", *BOUNDS[bound])
    with Served(MODEL, *flags, env={"OMP_NUM_THREADS": "1"}, startup_s=300) as server:
        idle = get_json(server.url + "/health")["rss_bytes"]
        result = asyncio.run(burst(server.url, body, n))
        peak = high_water_mark(server.proc.pid)
        time.sleep(SETTLE_S)
        health = get_json(server.url + "/health")
        after, queue = health["rss_bytes"], health["queue"]
    result.update(
        concurrency=n,
        bound=bound,
        idle_rss=idle,
        peak_rss=peak,
        after_rss=after,
        max_requests=queue["max_requests"],
        max_bytes=queue["max_bytes"],
        admitted=queue["admitted"],
        server_refused=queue["refused"],
    )
    return result


def get_json(url: str) -> dict:
    """One GET's JSON answer (urllib: no event loop needed)."""
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def row(p: dict) -> list[str]:
    mb = 2**20

    def sec(v):
        return "-" if v is None else f"{v:.2f}"

    return [
        str(p["concurrency"]),
        p["bound"],
        f"{p['ok']}/{p['refused']}/{p['other'] + p['errors']}",
        f"{p['throughput_per_s']:.1f}",
        sec(p["p50_s"]),
        sec(p["p99_s"]),
        f"{p['idle_rss'] / mb:.0f}",
        f"{p['peak_rss'] / mb:.0f}",
        f"{p['after_rss'] / mb:.0f}",
        sec(p["health_max_s"]),
    ]


COLUMNS = [
    "concurrent",
    "bound",
    "200/503/other",
    "answers/s",
    "p50 s",
    "p99 s",
    "idle MB",
    "peak MB",
    "after MB",
    "slowest /health s",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 and 100 concurrent only")
    parser.add_argument(
        "--burst", type=int, help="also send this many at once against the default bound"
    )
    record.add_record_dir(parser)
    args = parser.parse_args()
    started = record.Run("serve_load")
    photo = bench_photos(tempfile.mkdtemp(), sizes=[PHOTO_SIZE], include_samples=False)[0]
    jpeg = photo.path.read_bytes()
    body = chat_body("data:image/jpeg;base64," + base64.b64encode(jpeg).decode())
    points = [(n, b) for n in (QUICK_CONCURRENCY if args.quick else CONCURRENCY) for b in BOUNDS]
    if args.burst:
        points.append((args.burst, "on"))
    results = []
    for n, bound in points:
        p = run_point(n, bound, body)
        results.append(p)
        print("  ".join(row(p)), flush=True)
    limit = QUEUE_MEMORY_SHARE * machine_memory_bytes()
    bounded = [p for p in results if p["bound"] == "on"]
    failures = [
        f"{p['concurrency']} {p['bound']}: {p['ok'] + p['refused']} of {p['sent']} answered"
        for p in results
        if p["other"] or p["errors"] or p["ok"] + p["refused"] != p["sent"]
    ]
    failures += [
        f"{p['concurrency']} on: peak {p['peak_rss'] / 2**20:.0f} MB over idle + share"
        for p in bounded
        if p["peak_rss"] > p["idle_rss"] + limit
    ]
    worst = max(bounded, key=lambda p: p["peak_rss"] - p["idle_rss"])
    unbounded = max(
        (p for p in results if p["bound"] == "off"), key=lambda p: p["peak_rss"] - p["idle_rss"]
    )
    headline = (
        f"headline: bound on, worst burst {worst['concurrency']}: peak RSS "
        f"{worst['peak_rss'] / 2**20:.0f} MB (idle {worst['idle_rss'] / 2**20:.0f} MB, bound idle + "
        f"{limit / 2**30:.1f} GiB = 1/{round(1 / QUEUE_MEMORY_SHARE)} of the machine), "
        f"{worst['ok']} answered, {worst['refused']} refused with 503; bound off at "
        f"{unbounded['concurrency']}: peak {unbounded['peak_rss'] / 2**20:.0f} MB"
        + (f"; FAILED: {'; '.join(failures)}" if failures else "")
    )
    print(headline)
    table = record.Table(
        COLUMNS,
        [row(p) for p in results],
        title=f"{photo.width}x{photo.height} JPEG ({len(jpeg) // 1024} KB) chat requests, "
        f"{NEW_TOKENS} new tokens, tiny model, one torch thread; a fresh server per row",
    )
    notes = [
        "bound on = the defaults (--max-queued-requests "
        f"{bounded[0]['max_requests']}, --max-queued-mb {bounded[0]['max_bytes'] // 2**20} "
        "on this machine); off = --max-queued-requests 0 --max-queued-mb 0",
        f"after = resident memory {SETTLE_S:.0f} s after the burst (queue drained, freed memory "
        "handed back with malloc_trim)",
    ]
    mode = "quick: 10 and 100 concurrent" if args.quick else "default"
    if args.burst:
        mode += f", plus {args.burst} against the defaults"
    numbers = {"points": results, "photo_bytes": len(jpeg), "share_bytes": limit}
    record.write(
        started.record([table], headline, numbers, mode=mode, notes=notes), args.record_dir
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
