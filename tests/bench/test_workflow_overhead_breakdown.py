"""bench_workflow_overhead's split of a group's time beyond floor* on the remote engines: the
engine-image encode (once per group) and AReaL's client work per request (copy, body, json.dumps)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from PIL import Image

from vlrollout.processors.image_loading import LoadedImage

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench_module():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_workflow_overhead

        yield bench_workflow_overhead
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_measured_client_work_encodes_the_engine_image_once(
    bench_module, monkeypatch, tmp_path, engine
):
    encodes = []
    real = LoadedImage.engine_bytes

    def counted(self: LoadedImage) -> bytes:
        encodes.append(self.passthrough)
        return real(self)

    monkeypatch.setattr(LoadedImage, "engine_bytes", counted)
    bench = bench_module.Bench(fast=False, group_size=2, engines=(engine,))
    pil = bench_module.Case("PIL input", Image.new("RGB", (64, 48), (9, 99, 199)), "landscape")
    jpeg_path = tmp_path / "a.jpg"
    Image.new("RGB", (64, 48), (9, 99, 199)).save(jpeg_path)
    jpeg = bench_module.Case("RGB JPEG", jpeg_path, "portrait")

    cost = asyncio.run(bench.remote_cost(pil, bench.engines[engine]))
    assert encodes == [False]  # one lossless re-encode, for the first request only
    assert cost.body_ms > 0
    encodes.clear()
    asyncio.run(bench.remote_cost(jpeg, bench.engines[engine]))
    assert False not in encodes  # the file's own bytes: nothing re-encoded
    assert not bench.ours.ctx.prompts  # the next episode still starts from a cold cache


def test_the_split_adds_up_to_the_time_beyond_the_floor(bench_module):
    r = bench_module.Result(
        "PIL input (slow)", "landscape", "sglang", 33.0, 30.0, 50.0, 200.0, 61.0, 1800.0
    )
    cost = bench_module.RemoteCost(encode_ms=14.0, body_ms=1.0)
    beyond, encode, bodies, rest = bench_module.beyond_floor(r, cost, 8)
    assert (beyond, encode, bodies) == (31.0, 14.0, 8.0)
    assert rest == pytest.approx(9.0)


def test_the_client_bound_is_the_floor_plus_the_requests_bodies(bench_module):
    r = bench_module.Result(
        "PIL input (fast)", "landscape", "sglang", 13.0, 12.0, 40.0, 200.0, 46.0, 1800.0
    )
    cost = bench_module.RemoteCost(encode_ms=14.0, body_ms=0.875)
    assert bench_module.client_bound(r, cost, 8) == pytest.approx((12.0 + 7.0) / 12.0)
    table = bench_module.beyond_floor_table([r], 8)
    assert table.columns[-1].startswith("floor* + client work")


def test_a_pil_input_is_a_new_image_object_for_every_episode(bench_module):
    """A dataset hands each row its own image object: our prompt cache hashes a new object's
    pixels for its key, so reusing one object would keep that hash out of our time."""
    photo = Image.new("RGB", (8, 6), (10, 20, 30))
    case = bench_module.Case("PIL input", photo, "landscape")
    first, second = (bench_module.our_item(case)["images"][0] for _ in range(2))
    assert first is not second and first is not photo
    assert first.tobytes() == second.tobytes() == photo.tobytes()
