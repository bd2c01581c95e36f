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
