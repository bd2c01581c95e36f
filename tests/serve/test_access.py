"""Who may use the server: an API key on every route, control routes that can be shut, and weight
updates only from folders under the weights root."""

from __future__ import annotations

import base64
import socket

import openai
import pytest
import requests

from tests.serve.conftest import ASSET, SAMPLES, load_engine, serving
from vlrollout.cli import build_parser
from vlrollout.serve.auth import API_KEY_ENV, api_key, exposure_warning

KEY = "s3cret-key"
IMAGE_URL = (
    "data:image/png;base64,"
    + base64.b64encode((SAMPLES.parent / "images" / "count-2-0.png").read_bytes()).decode()
)
CHAT = {
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": IMAGE_URL}},
                {"type": "text", "text": "How many shapes?"},
            ],
        }
    ],
    "max_tokens": 2,
}
ROUTES = {
    "sglang": [
        ("GET", "/health"),
        ("POST", "/generate"),
        ("POST", "/pause_generation"),
        ("POST", "/continue_generation"),
        ("POST", "/update_weights_from_disk"),
        ("POST", "/vlrollout/check_weights_path"),
        ("POST", "/no-such-route"),
    ],
    "vllm": [
        ("GET", "/health"),
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/areal_pause_generation"),
        ("POST", "/areal_continue_generation"),
        ("POST", "/areal_update_weights"),
        ("POST", "/vlrollout/check_weights_path"),
    ],
}
CHECK = "/vlrollout/check_weights_path"
CONTROL = {
    "sglang": ["/pause_generation", "/continue_generation", "/update_weights_from_disk", CHECK],
    "vllm": [
        "/areal_pause_generation",
        "/areal_continue_generation",
        "/areal_update_weights",
        CHECK,
    ],
}


@pytest.fixture(scope="module")
def engine():
    engine = load_engine()
    yield engine
    engine.destroy()


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_every_route_needs_the_key(engine, protocol):
    with serving(protocol, engine, api_key=KEY) as (server, _):
        for method, path in ROUTES[protocol]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
                r = requests.request(
                    method, server.url + path, json={}, headers=headers, timeout=30
                )
                assert r.status_code == 401, (path, headers, r.text)
                assert r.json() == {
                    "error": {
                        "message": f"{method} {path}: missing or wrong API key "
                        "(send 'Authorization: Bearer <key>')",
                        "type": "AuthenticationError",
                        "code": 401,
                    }
                }
                assert r.headers["WWW-Authenticate"] == "Bearer"
        good = {"Authorization": f"Bearer {KEY}"}
        r = requests.get(server.url + "/health", headers=good, timeout=30)
        assert r.status_code == 200, r.text
        queue = r.json()["queue"]  # refused before admission: nothing was queued or counted
        assert (queue["admitted"], queue["refused"]) == (0, 0)
        assert engine.get_version() == 0  # no refused control call reached the engine


@pytest.mark.parametrize("raw", [b"Bearer k\xe9y", b"Bearer \xff\xfe"])
def test_a_key_header_that_is_not_utf8_is_a_401(engine, raw):
    """A header byte aiohttp decodes with surrogateescape: refused as any wrong key, not a 500."""
    with serving("vllm", engine, api_key=KEY) as (server, _):
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as conn:
            conn.sendall(
                b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: "
                + raw
                + b"\r\nConnection: close\r\n\r\n"
            )
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert b"AuthenticationError" in answer


def test_openai_client_with_the_key(engine):
    with serving("vllm", engine, api_key=KEY) as (server, _):
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
        client_model = client.models.list().data[0].id
        out = client.chat.completions.create(model=client_model, **CHAT)
        assert out.choices[0].finish_reason in ("stop", "length")
        wrong = openai.OpenAI(base_url=f"{server.url}/v1", api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="missing or wrong API key"):
            wrong.chat.completions.create(model=client_model, **CHAT)


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_no_control_serves_generation_only(engine, protocol):
    with serving(protocol, engine, control=False) as (server, _):
        for path in CONTROL[protocol]:
            r = requests.post(server.url + path, json={"model_path": str(ASSET)}, timeout=30)
            assert r.status_code == 404, (path, r.text)
        if protocol == "vllm":
            r = requests.post(server.url + "/v1/chat/completions", json=CHAT, timeout=60)
        else:
            body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
            r = requests.post(server.url + "/generate", json=body, timeout=60)
        assert r.status_code == 200, r.text
    assert engine.get_version() == 0


@pytest.fixture
def weights(tmp_path):
    """``(root, outside)``: an allowed root, a model folder outside it, and links into it."""
    root, outside = tmp_path / "root", tmp_path / "elsewhere"
    (root / "inside").mkdir(parents=True)
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    (root / "link").symlink_to(outside, target_is_directory=True)
    return root, outside


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_weights_only_from_under_the_root(engine, weights, protocol):
    root, outside = weights
    path = CONTROL[protocol][2]
    with serving(protocol, engine, weights_root=root) as (server, _):
        for model_path in (outside, root / "link", root / "inside" / ".." / ".." / "elsewhere"):
            r = requests.post(server.url + path, json={"model_path": str(model_path)}, timeout=30)
            assert r.status_code == 403, (model_path, r.text)
            error = r.json()["error"]
            assert error["type"] == "PermissionDeniedError"
            assert f"outside the weights root {root.resolve()}" in error["message"], error
            assert "--weights-root" in error["message"]
        # Under the root the path is checked as before: no model there is a 400.
        r = requests.post(server.url + path, json={"model_path": str(root / "inside")}, timeout=30)
        assert r.status_code == 400 and "no config.json" in r.json()["error"]["message"]
    assert engine.get_version() == 0


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_the_weights_check_answers_as_an_update_would_without_loading(engine, weights, protocol):
    """A trainer asks before its first update; a folder under the root need not exist yet."""
    root, outside = weights
    with serving(protocol, engine, weights_root=root) as (server, _):
        for model_path in (outside, root / "link", root / "inside" / ".." / ".." / "elsewhere"):
            r = requests.post(server.url + CHECK, json={"model_path": str(model_path)}, timeout=30)
            assert r.status_code == 403, (model_path, r.text)
            assert f"outside the weights root {root.resolve()}" in r.json()["error"]["message"]
        for model_path in (root / "inside", root / "not" / "yet" / "weight_update_v1"):
            r = requests.post(server.url + CHECK, json={"model_path": str(model_path)}, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json()["success"] is True
        r = requests.post(server.url + CHECK, json={"path": str(root)}, timeout=30)
        assert r.status_code == 400 and "model_path" in r.json()["error"]["message"]
    assert engine.get_version() == 0


def test_weights_root_defaults_to_the_model_folders_parent(engine):
    with serving("sglang", engine) as (server, _):
        r = requests.post(
            server.url + "/update_weights_from_disk", json={"model_path": "/tmp"}, timeout=30
        )
        assert r.status_code == 403, r.text
        assert f"outside the weights root {ASSET.parent}" in r.json()["error"]["message"]


def test_the_key_comes_from_the_flag_or_the_environment(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    parse = build_parser().parse_args
    assert api_key(parse(["serve", "--model", "m"])) is None
    assert api_key(parse(["serve", "--model", "m", "--api-key", "a"])) == "a"
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert api_key(parse(["serve", "--model", "m"])) == "from-env"
    assert api_key(parse(["serve", "--model", "m", "--api-key", "a"])) == "a"
    monkeypatch.setenv(API_KEY_ENV, "")
    assert api_key(parse(["serve", "--model", "m"])) is None


@pytest.mark.parametrize(
    "host, key, control, warns",
    [
        ("0.0.0.0", None, True, True),
        ("0.0.0.0", None, False, True),
        ("0.0.0.0", KEY, True, False),
        ("127.0.0.1", None, True, False),
        ("localhost", None, True, False),
        ("::1", None, True, False),
    ],
)
def test_open_non_loopback_bind_warns(host, key, control, warns):
    message = exposure_warning(host, key, control, ASSET.parent)
    assert (message is not None) == warns, message
    if warns:
        assert f"{host} is not a loopback address and no API key is set" in message
        assert "anyone who reaches the port can generate" in message
        assert ("load weights from any folder under" in message) == control
        assert API_KEY_ENV in message


def test_serve_logs_the_warning_before_loading(monkeypatch, capsys):
    from vlrollout.engine import LocalInferenceEngine
    from vlrollout.serve.main import serve

    def load(path, **kwargs):
        raise KeyboardInterrupt  # stop before any server starts

    monkeypatch.delenv(API_KEY_ENV, raising=False)
    monkeypatch.setattr(LocalInferenceEngine, "from_pretrained", staticmethod(load))
    monkeypatch.setattr("vlrollout.serve.main.check_can_listen", lambda host, port: None)
    args = build_parser().parse_args(["serve", "--model", str(ASSET), "--host", "0.0.0.0"])
    with pytest.raises(KeyboardInterrupt):
        serve(args)
    assert "0.0.0.0 is not a loopback address and no API key is set" in capsys.readouterr().err
