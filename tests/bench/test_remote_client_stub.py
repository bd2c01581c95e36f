"""The benchmarks' remote-client stub does the client-side work of AReaL's remote engines: it reads
a request's images, so engine images we encode lazily are encoded inside the time it measures."""

from __future__ import annotations

import asyncio
import base64
import io
from pathlib import Path

import pytest
from areal.api.cli_args import GenerationHyperparameters
from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.testing.offline_processors import build_offline_processor
from vlrollout.workflows.steps import LazyImagesRequest, build_request

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _lazy_request() -> LazyImagesRequest:
    rgba = Image.new("RGBA", (40, 30), (200, 10, 10, 128))  # alpha: re-encoded as PNG for engines
    buf = io.BytesIO()
    rgba.save(buf, format="PNG")
    pre = AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"), max_pixels=56 * 56)
    item = {"messages": [{"role": "user", "content": "<image>What?"}], "images": [buf.getvalue()]}
    req = build_request(
        pre.prepare(item), GenerationHyperparameters(max_new_tokens=2), pre.tokenizer, pre.processor
    )
    assert isinstance(req, LazyImagesRequest) and req.images_unread
    return req


@pytest.mark.parametrize(
    "protocol, endpoint", [("sglang", "/generate"), ("vllm", "/v1/chat/completions")]
)
def test_the_stub_reads_the_images_and_sends_one_per_request_as_areals_client(
    monkeypatch, protocol, endpoint
):
    monkeypatch.syspath_prepend(str(BENCH))
    from remote_client_stub import RemoteClientStub

    req = _lazy_request()
    stub = RemoteClientStub(protocol, [[5, 6]])
    resp = asyncio.run(stub.agenerate(req))
    assert not req.images_unread and resp.output_tokens == [5, 6] and resp.input_images
    ((sent_to, payload),) = stub.payloads
    assert sent_to == endpoint and stub.body_bytes > len(req.image_data[0])
    if protocol == "sglang":
        (b64,) = payload["image_data"]
    else:
        (url,) = [
            p["image_url"]["url"]
            for p in payload["messages"][0]["content"]
            if p["type"] == "image_url"
        ]
        assert url.startswith("data:image/webp;base64,")  # AReaL labels it by its magic bytes
        b64 = url.split(",", 1)[1]
    with Image.open(io.BytesIO(base64.b64decode(b64))) as sent:
        assert sent.size == (40, 30)
    stub.clear()
    assert stub.payloads == [] and stub.requests == []


def test_the_stub_knows_only_areals_two_remote_protocols(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from remote_client_stub import RemoteClientStub

    with pytest.raises(ValueError, match="sglang"):
        RemoteClientStub("trtllm", [[1]])


def test_the_stub_counts_as_an_engine_that_sends_images(monkeypatch):
    """Episodes on the stub encode engine images beside the processor call, as on AReaL's
    clients; the local engine column (a plain ScriptedEngine) never encodes."""
    monkeypatch.syspath_prepend(str(BENCH))
    from remote_client_stub import RemoteClientStub

    from vlrollout.testing.scripted_engine import ScriptedEngine
    from vlrollout.workflows.episode import reads_image_data

    assert reads_image_data(RemoteClientStub("sglang", [[1]]))
    assert not reads_image_data(ScriptedEngine([[1]]))
