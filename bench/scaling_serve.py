"""Request latency of a ``vlrollout serve`` process, for the scaling benchmark.

One server per shape (``python -m vlrollout.cli serve --model FOLDER``, SGLang protocol, its own
process); the client prepares each point's prompt with the folder's processor and sends what
AReaL's SGLang client sends (``input_ids`` and base64 PNG ``image_data``, which the server decodes
and runs through its processor). Per point: one warm-up request, then ``REPEATS`` rounds of the
group's requests sent at once, each round's pictures marked in one pixel so the server has
encoded none of them before (:func:`marked`); ``serve/latency`` is the median round's wall
time (the group's last response), ``serve/latency_per_request`` that over the group size.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import statistics
import time
from pathlib import Path
from typing import Any

import requests as http
from served import Served

REPO = Path(__file__).resolve().parents[1]
REPEATS = 2
STARTUP_S = 300


def server(job: dict[str, Any]) -> Served:
    """``vlrollout serve`` of the point's model folder, device, batch size and threads."""
    flags = ["--device", job["device"], "--max-batch-size", str(job["max_batch"])]
    if job["threads"]:
        flags += ["--threads", str(job["threads"])]
    return Served(Path(job["folder"]), *flags, startup_s=STARTUP_S)


def payload(prepared: Any, new_tokens: int) -> dict[str, Any]:
    return {
        "input_ids": list(prepared.input_ids),
        "image_data": list(prepared.image_data),
        "sampling_params": {
            "max_new_tokens": new_tokens,
            "temperature": 1.0,
            "ignore_eos": True,
        },
        "return_logprob": True,
        "stream": False,
    }


def marked(data: dict[str, Any], n: int) -> dict[str, Any]:
    """A copy of ``data`` whose pictures carry ``n`` (``0 <= n < 2**24``) in their top-left
    pixel: the server's engine keeps the features it encoded, and a round trip that sent an
    earlier one's pictures would skip the encoding a new request pays."""
    images = []
    for image in data["images"]:
        image = image.convert("RGB")  # a copy, also of an RGB picture
        image.putpixel((0, 0), (n & 255, (n >> 8) & 255, (n >> 16) & 255))
        images.append(image)
    return {**data, "images": images}


class RequestRefused(RuntimeError):
    """The server answered a request with an error status (the body says why)."""


def round_trip(url: str, body: dict[str, Any], group: int) -> float:
    """Seconds until all ``group`` copies of ``body`` sent at once have their responses."""

    def one() -> None:
        r = http.post(f"{url}/generate", json=body, timeout=600)
        if r.status_code != 200:
            raise RequestRefused(f"HTTP {r.status_code}: {r.text[:300]}")

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(group) as pool:
        for fut in [pool.submit(one) for _ in range(group)]:
            fut.result()
    return time.perf_counter() - start


def serve_points(job: dict[str, Any], failures: list[str], log=print) -> list[dict[str, Any]]:
    """Latency points of ``job`` (the same job dict the engine side gets) through one server; a
    point the server refuses is left out and its reason appended to ``failures``."""
    from scaling_points import item, point, preprocessor  # imports torch: only when points run

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    marks = itertools.count()
    with server(job) as served:
        out: list[dict[str, Any]] = []
        warmed = False
        for spec in job["points"]:
            pre = preprocessor(server_processor(job), job["shape"], spec["tokens"])
            data = item(job["shape"], spec["tokens"], spec["images"])
            bodies = [
                payload(pre.prepare(marked(data, next(marks))), spec["new_tokens"])
                for _ in range(REPEATS + 1)
            ]
            where = (
                f"serve on {job['shape']} ({spec['axis']}: tokens {spec['tokens']}, group "
                f"{spec['group']}, images {spec['images']})"
            )
            try:
                if not warmed:
                    round_trip(served.url, bodies[0], 1)
                    warmed = True
                times = [round_trip(served.url, b, spec["group"]) for b in bodies[1:]]
            except RequestRefused as e:
                failures.append(f"{where}: {e}")
                log(f"  {where}: refused: {e}")
                continue
            latency = statistics.median(times)
            out += [
                point("serve", job, spec, "latency", latency, "s"),
                point("serve", job, spec, "latency_per_request", latency / spec["group"], "s"),
            ]
            log(
                f"  serve    {job['shape']:12s} {spec['axis']:6s} tokens={spec['tokens']} "
                f"group={spec['group']} images={spec['images']}: {latency:.2f} s"
            )
    return out


_PROCESSORS: dict[str, Any] = {}


def server_processor(job: dict[str, Any]) -> Any:
    """The folder's processor (what the server loads), loaded once per folder."""
    from transformers import AutoProcessor

    folder = job["folder"]
    if folder not in _PROCESSORS:
        _PROCESSORS[folder] = AutoProcessor.from_pretrained(folder, local_files_only=True)
    return _PROCESSORS[folder]
