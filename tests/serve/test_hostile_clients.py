"""Clients that would hold a server off loopback: a body that stops arriving loses its queue slot,
a browser page cannot drive the control routes, and a path the OS cannot take is a 400."""

from __future__ import annotations

import socket
import time

import pytest
import requests

from tests.serve.conftest import serving
from vlrollout.serve.admission import QueueLimits


def _stall(address: str, path: str, declared: int) -> socket.socket:
    """A connection that sent its headers and one byte of a ``declared``-byte body, then stopped."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n{{"
    )
    sock.sendall(head.encode())
    return sock


def test_a_body_that_stops_arriving_is_408_and_frees_its_queue_slot():
    limits = QueueLimits(max_requests=1, max_bytes=10_000)
    with serving("sglang", limits=limits, body_idle_timeout_s=0.5) as (server, _):
        sock = _stall(server.address, "/generate", 5000)
        try:
            start = time.monotonic()
            answer = sock.recv(4096).decode()
            waited = time.monotonic() - start
        finally:
            sock.close()
        assert answer.startswith("HTTP/1.1 408"), answer[:200]
        assert "no byte of the body for 0.5 s" in answer and waited < 10
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
        r = requests.post(server.url + "/generate", json=body, timeout=60)
        health = requests.get(server.url + "/health", timeout=10).json()
    assert r.status_code == 200, r.text
    assert health["queue"]["requests"] == 0 and health["errors"] == {"408": 1}


@pytest.mark.parametrize(
    "protocol, path", [("sglang", "/pause_generation"), ("vllm", "/areal_pause_generation")]
)
def test_a_control_route_refuses_a_browser(protocol, path):
    """Browsers send Origin with every cross-site POST, and a plain form POST needs no CORS
    preflight: a page must not pause or update a keyless server beside the trainer. AReaL's
    clients send no Origin."""
    with serving(protocol) as (server, _):
        r = requests.post(
            server.url + path,
            data="{}",
            headers={"Content-Type": "text/plain", "Origin": "http://evil.example"},
            timeout=10,
        )
        paused = requests.get(server.url + "/health", timeout=10).json()["paused"]
        ok = requests.post(server.url + path, json={}, timeout=10)
    assert r.status_code == 403 and "control routes do not answer browsers" in r.text
    assert not paused and ok.status_code == 200


def test_a_model_path_with_a_nul_byte_is_a_400(tmp_path):
    with serving("sglang", weights_root=tmp_path) as (server, _):
        r = requests.post(
            server.url + "/vlrollout/check_weights_path",
            json={"model_path": str(tmp_path / "real\u0000x")},
            timeout=10,
        )
    assert r.status_code == 400 and "model_path" in r.json()["error"]["message"]
