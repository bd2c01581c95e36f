"""Videos through ``vlrollout serve`` on the shipped tiny model: ``video_url`` parts with the
OpenAI client (``--protocol vllm``) and ``video_data`` on SGLang's ``/generate``. Each check reads
what the engine was given: the video's tensors, with as many placeholder tokens as their grid."""

from __future__ import annotations

import base64

import openai
import pytest
import requests
import torch
from openai import OpenAI

from tests.serve.conftest import load_engine, serving
from tests.workflows.test_video_workflows import write_clip
from vlrollout.workflows import FrameSampling

FRAMES = FrameSampling(max_frames=4, min_pixels=56 * 56, max_pixels=56 * 56)


@pytest.fixture(scope="module")
def clip_url(tmp_path_factory):
    clip = write_clip(tmp_path_factory.mktemp("video") / "clip.mp4")
    return "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode()


@pytest.fixture(scope="module")
def engine():
    engine = load_engine()
    engine.seen = []  # every request the engine was given
    generate = engine.agenerate

    async def recording(req):
        engine.seen.append(req)
        return await generate(req)

    engine.agenerate = recording
    yield engine
    engine.destroy()


def _video_of(engine, req) -> dict[str, torch.Tensor]:
    mm = req.metadata["multi_modal_input"]
    n = list(req.input_ids).count(engine.model.config.video_token_id)
    assert n == int(mm["video_grid_thw"].prod()) // 4 > 0
    return mm


def _messages(url: str) -> list[dict]:
    content = [
        {"type": "video_url", "video_url": {"url": url}},
        {"type": "text", "text": "How many shapes appear?"},
    ]
    return [{"role": "user", "content": content}]


def test_openai_client_video_url_then_sglang_video_data(engine, clip_url, tmp_path):
    with serving("vllm", engine, frames=FRAMES) as (server, _):
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        client_model = client.models.list().data[0].id
        reply = client.chat.completions.create(
            model=client_model, messages=_messages(clip_url), max_tokens=4, temperature=0
        )
        assert reply.choices[0].finish_reason in ("stop", "length")
        chat = engine.seen[-1]
        mm = _video_of(engine, chat)
        assert mm["video_grid_thw"].tolist() == [[2, 4, 4]]
        assert reply.usage.prompt_tokens == len(chat.input_ids)

        # The server reads no file for a client: a path is refused, as for images.
        write_clip(tmp_path / "local.mp4")
        with pytest.raises(openai.BadRequestError, match="only inline videos"):
            client.chat.completions.create(
                model=client_model, messages=_messages(str(tmp_path / "local.mp4")), max_tokens=2
            )

    with serving("sglang", engine, frames=FRAMES) as (server, _):
        body = {
            "input_ids": list(chat.input_ids),
            "video_data": [clip_url],
            "sampling_params": {"max_new_tokens": 4, "temperature": 0},
        }
        answer = requests.post(f"{server.url}/generate", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        sent = _video_of(engine, engine.seen[-1])
        assert torch.equal(sent["pixel_values_videos"], mm["pixel_values_videos"])
        # The same tensors, decoded greedily: the same answer whichever protocol sent them.
        assert answer.json()["text"] == reply.choices[0].message.content


def test_videos_are_held_to_the_video_byte_limit_not_the_images(engine, clip_url):
    """A clip is many frames: the served preprocessor's ``max_video_bytes`` bounds it on both
    protocols, as in ``vlrollout run``, not the (smaller) limit on one encoded image."""
    clip_bytes = len(base64.b64decode(clip_url.split(",", 1)[1]))
    small = {"frames": FRAMES, "max_image_bytes": clip_bytes // 2}
    with serving("vllm", engine, **small) as (server, _):
        body = {"messages": _messages(clip_url), "max_tokens": 2}
        r = requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text
        chat = engine.seen[-1]
    with serving("sglang", engine, **small) as (server, _):
        body = {"input_ids": list(chat.input_ids), "video_data": [clip_url]}
        r = requests.post(f"{server.url}/generate", json=body, timeout=60)
        assert r.status_code == 200, r.text
