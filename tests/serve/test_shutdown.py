"""Stopping ``vlrollout serve`` answers the requests a pause holds (503, the server is going
away) instead of waiting for their clients to give up."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from tests.serve.conftest import load_engine
from vlrollout.serve.app import build_app
from vlrollout.serve.background import BackgroundServer


@pytest.mark.parametrize(
    ("protocol", "path", "body"),
    [
        ("sglang", "/generate", {"input_ids": [1, 5], "sampling_params": {"max_new_tokens": 2}}),
        (
            "vllm",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        ),
    ],
)
def test_a_request_held_by_a_pause_is_answered_503_when_the_server_stops(protocol, path, body):
    engine = load_engine()
    server = BackgroundServer(build_app(engine, protocol, destroy_engine=True)).start()
    pause = "/pause_generation" if protocol == "sglang" else "/areal_pause_generation"
    assert requests.post(server.url + pause, timeout=10).status_code == 200
    answers = []

    def held() -> None:
        answers.append(requests.post(server.url + path, json=body, timeout=60))

    thread = threading.Thread(target=held)
    thread.start()
    time.sleep(0.5)  # the request is now waiting for the pause to end
    assert not answers
    start = time.monotonic()
    server.stop(timeout=20)
    thread.join(timeout=20)
    assert time.monotonic() - start < 10
    assert answers and answers[0].status_code == 503, answers
    assert "shutting down" in answers[0].json()["error"]["message"]


def test_requests_waiting_to_decode_are_answered_503_undecoded_when_the_server_stops(
    monkeypatch,
):
    """Three chat requests of a clip, decoded one at a time (each decode slowed to a second):
    stopping the server answers the two still waiting at once, without decoding their clips."""
    import asyncio

    from tests.processors.test_decode_room import _mp4
    from tests.serve.test_decoded_cost import (
        SMALL_FRAMES,
        VIDEO_FRAMES,
        VIDEO_SIDE,
        decoding,
        send_all,
        video_bodies,
    )
    from vlrollout.processors import video_loading
    from vlrollout.processors.decode_room import video_cost

    decodes, real = [], video_loading._decode_frames

    def slow(*args, **kwargs):
        decodes.append(1)
        time.sleep(1.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(video_loading, "_decode_frames", slow)
    import base64

    clip = base64.b64encode(_mp4(VIDEO_FRAMES, VIDEO_SIDE, 60)).decode()
    limits = decoding(video_cost(VIDEO_FRAMES * VIDEO_SIDE**2) * 3 // 2)
    engine = load_engine()
    app = build_app(engine, "vllm", destroy_engine=True, limits=limits, frames=SMALL_FRAMES)
    server = BackgroundServer(app).start()
    answers = []
    thread = threading.Thread(
        target=lambda: answers.extend(
            asyncio.run(send_all(server.url, video_bodies("vllm", None, clip, 3)))
        )
    )
    thread.start()
    time.sleep(0.5)  # the first clip is decoding, the other two wait for room
    start = time.monotonic()
    server.stop(timeout=20)
    thread.join(timeout=20)
    assert [status for status, _ in answers] == [503] * 3, answers
    assert all("shutting down; retry on another server" in text for _, text in answers)
    assert len(decodes) == 1 and time.monotonic() - start < 2.5
