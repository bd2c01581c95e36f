"""Admission control: a bound on queued generation requests and their bytes, 503 with
``Retry-After`` beyond it, counters in ``/health``, and a loopback burst larger than the queue."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import aiohttp
import pytest
import requests
from PIL import Image

from tests.serve.conftest import SAMPLES, load_engine, serving, vision_prompt
from vlrollout.serve.admission import Admission, QueueLimits
from vlrollout.serve.main import default_max_queued_mb

BURST, BOUND = 40, 4
IMAGE = SAMPLES.parent / "images" / "count-2-0.png"


def test_requests_and_bytes_are_bounded_and_counted():
    drained = []
    gate = Admission(QueueLimits(max_requests=2, max_bytes=100), on_drain=lambda: drained.append(1))
    assert gate.admit(10) and gate.admit(10)
    assert not gate.admit(0)  # a third request
    gate.release(10)
    assert not gate.admit(91)  # 10 + 91 bytes > 100
    assert gate.admit(90)
    assert gate.snapshot() == {
        "requests": 2,
        "bytes": 100,
        "max_requests": 2,
        "max_bytes": 100,
        "admitted": 3,
        "refused": 2,
        "peak_requests": 2,
        "peak_bytes": 100,
        "decoding_pixels": 0,
        "max_decoding_pixels": 100,
        "peak_decoding_pixels": 0,
    }
    assert not gate.grow(1)  # a body without Content-Length, read: over the bound
    assert (gate.admitted, gate.refused) == (2, 3)
    assert gate.grow(0)
    gate.release(10)
    assert drained == []
    gate.release(90)
    assert drained == [1]  # the queue emptied once
    assert gate.snapshot()["requests"] == 0 and gate.snapshot()["bytes"] == 0


@pytest.mark.parametrize("bad", [{"max_requests": 0}, {"max_bytes": 0}])
def test_limits_must_be_positive(bad):
    with pytest.raises(ValueError, match="must be >= 1 or None"):
        QueueLimits(**{"max_requests": 1, "max_bytes": 1, **bad})


def test_the_default_byte_bound_is_a_share_of_the_machine(monkeypatch):
    monkeypatch.setattr("vlrollout.serve.main.machine_memory_bytes", lambda: 64 * 2**30)
    assert default_max_queued_mb() == 512  # 64 GiB / 8 share / 16 resident bytes per byte
    monkeypatch.setattr("vlrollout.serve.main.machine_memory_bytes", lambda: 2 * 2**30)
    assert default_max_queued_mb() == 64  # never below the largest body


@pytest.fixture(scope="module")
def slow_engine():
    """The tiny model, each forward slowed so that a burst outlasts the queue."""
    engine = load_engine()
    hook = engine.model.register_forward_pre_hook(lambda *a: time.sleep(0.01))
    yield engine
    hook.remove()
    engine.destroy()


async def _burst(url: str, bodies: list[dict]) -> tuple[list[tuple[int, dict, dict]], list[dict]]:
    """Send ``bodies`` at once; meanwhile poll ``/health``. Returns each request's
    ``(status, json, headers)`` in order, and the health answers seen while the burst ran."""
    healths: list[dict] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(body):
            async with session.post(url + "/generate", json=body) as r:
                return r.status, await r.json(), dict(r.headers)

        async def poll(done: asyncio.Event):
            while not done.is_set():
                async with session.get(url + "/health") as r:
                    assert r.status == 200
                    healths.append(await r.json())
                await asyncio.sleep(0.02)

        done = asyncio.Event()
        poller = asyncio.create_task(poll(done))
        answers = await asyncio.gather(*(one(b) for b in bodies))
        done.set()
        await poller
    return answers, healths


def test_a_burst_larger_than_the_queue(slow_engine, monkeypatch):
    trims = []
    monkeypatch.setattr("vlrollout.serve.memory.TRIM_DELAY_S", 0.05)
    monkeypatch.setattr("vlrollout.serve.memory.release_free_memory", lambda: trims.append(1))
    ids, _, _ = vision_prompt(slow_engine.processor, [Image.open(IMAGE)])
    image = base64.b64encode(IMAGE.read_bytes()).decode()
    bodies = [
        {
            "rid": f"r{k}",
            "input_ids": ids,
            "image_data": [image],
            "sampling_params": {"max_new_tokens": 4, "ignore_eos": True},
        }
        for k in range(BURST)
    ]
    limits = QueueLimits(max_requests=BOUND, max_bytes=2**30)
    with serving("sglang", slow_engine, limits=limits) as (server, _):
        answers, healths = asyncio.run(_burst(server.url, bodies))
        after = requests.get(server.url + "/health", timeout=10).json()
        deadline = time.monotonic() + 30
        while not trims and time.monotonic() < deadline:
            time.sleep(0.01)
    assert trims, "freed memory was not handed back after the queue drained"
    ok = [(k, a) for k, a in enumerate(answers) if a[0] == 200]
    full = [a for a in answers if a[0] == 503]
    assert len(ok) + len(full) == BURST, [a[0] for a in answers]
    assert len(ok) >= BOUND and full, (len(ok), len(full))
    for k, (_, body, _) in ok:  # every answer is its own request's
        assert body["meta_info"]["id"] == f"r{k}"
        assert body["meta_info"]["completion_tokens"] == 4
    for _, body, headers in full:
        assert headers["Retry-After"] == "1"
        assert body["error"]["type"] == "ServiceUnavailableError"
        assert f"queue is full ({BOUND} requests" in body["error"]["message"]
    busy = [h for h in healths if h["queue"]["requests"] > 0]
    assert busy, "/health did not answer while requests were queued"
    assert max(h["queue"]["requests"] for h in healths) <= BOUND
    queue = after["queue"]
    assert (queue["admitted"], queue["refused"]) == (len(ok), len(full))
    assert (queue["requests"], queue["bytes"], queue["peak_requests"]) == (0, 0, BOUND)
    assert after["generated_tokens"] == 4 * len(ok)
    assert after["tokens_per_s"] > 0


def test_a_chunked_body_is_charged_when_read(slow_engine):
    """A body without ``Content-Length`` is charged its size once read: over the byte bound it
    gets 503, under it the request is answered."""
    small = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
    big = {**small, "rid": "x" * 2000}

    def chunked(body: dict):
        yield json.dumps(body).encode()

    limits = QueueLimits(max_requests=4, max_bytes=1000)
    with serving("sglang", slow_engine, limits=limits) as (server, _):
        r = requests.post(server.url + "/generate", data=chunked(big), timeout=60)
        assert r.status_code == 503, r.text
        assert "queue is full" in r.json()["error"]["message"]
        r = requests.post(server.url + "/generate", data=chunked(small), timeout=60)
        assert r.status_code == 200, r.text
        queue = requests.get(server.url + "/health", timeout=10).json()["queue"]
    assert (queue["admitted"], queue["refused"], queue["bytes"], queue["requests"]) == (1, 1, 0, 0)
