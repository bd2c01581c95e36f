"""Bad requests get a 4xx with a message naming the problem, and the server keeps serving."""

from __future__ import annotations

import base64
import json
import logging
import math
import time

import pytest
import requests

from tests.engine.conftest import make_image as image
from tests.engine.conftest import to_base64 as png_base64
from tests.processors.images import bomb_png
from tests.records import Records
from tests.serve.conftest import ASSET, ROOT, serving, vision_prompt
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import DEFAULT_MAX_PIXELS, load_image
from vlrollout.serve import app as app_module
from vlrollout.serve.errors import BadRequest
from vlrollout.serve.state import encoded_image

GARBAGE_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 8).decode()
TRUNCATED_PNG = base64.b64encode(base64.b64decode(png_base64(image(3)))[:-200]).decode()
"""A PNG whose header reads and whose pixel data ends early: it fails only when decoded."""
BOMB_PNG = base64.b64encode(bomb_png(8193, 8192)).decode()
"""A decompression bomb: 8193 x 8192 pixels, more than the processors' ``DEFAULT_MAX_PIXELS``."""


@pytest.fixture(scope="module")
def prompts(sglang_server):
    _, engine = sglang_server
    one, _, _ = vision_prompt(engine.processor, [image(0)])
    two, _, _ = vision_prompt(engine.processor, [image(0), image(1)])
    text = engine.tokenizer("Hello there")["input_ids"]
    return {"one": one, "two": two, "text": text, "img": png_base64(image(0))}


def _json(body) -> bytes:
    """``body`` as JSON bytes, NaN and Infinity literals included (``requests`` refuses them)."""
    return json.dumps(body).encode()


def _sglang_cases(p):
    sp = {"max_new_tokens": 2}
    return [
        ("malformed JSON", b'{"input_ids": [1,', 400, "malformed JSON"),
        ("body not an object", [1, 2], 400, "JSON object"),
        ("unknown field", {"input_ids": p["text"], "foo": 1}, 400, "unknown field(s) ['foo']"),
        (
            "unknown sampling field",
            {"input_ids": p["text"], "sampling_params": {"beam": 2}},
            400,
            "unknown field(s) ['beam']",
        ),
        ("no input_ids", {"sampling_params": sp}, 400, "missing required field(s) ['input_ids']"),
        ("input_ids not ids", {"input_ids": ["a"]}, 400, "non-negative token ids"),
        ("empty input_ids", {"input_ids": []}, 400, "non-empty list"),
        (
            "two images, one placeholder",
            {"input_ids": p["one"], "image_data": [p["img"], p["img"]], "sampling_params": sp},
            400,
            "image placeholders and images disagree",
        ),
        (
            "placeholders, no image",
            {"input_ids": p["two"], "sampling_params": sp},
            400,
            "has no images",
        ),
        (
            "image, no placeholder",
            {"input_ids": p["text"], "image_data": [p["img"]], "sampling_params": sp},
            400,
            "image placeholders and images disagree",
        ),
        (
            "undecodable image",
            {"input_ids": p["one"], "image_data": [GARBAGE_PNG], "sampling_params": sp},
            400,
            "image_decode",
        ),
        (
            "decompression bomb",
            {"input_ids": p["one"], "image_data": [BOMB_PNG], "sampling_params": sp},
            400,
            f"image_too_large: 8193x8192 = 67117056 pixels exceed the decode limit "
            f"max_image_pixels={DEFAULT_MAX_PIXELS}",
        ),
        (
            "decompression bomb: the flag that raises the limit",
            {"input_ids": p["one"], "image_data": [BOMB_PNG], "sampling_params": sp},
            400,
            "vlrollout serve --max-image-pixels N",
        ),
        (
            "invalid base64",
            {"input_ids": p["one"], "image_data": ["@@@not base64@@@"], "sampling_params": sp},
            400,
            "invalid base64",
        ),
        (
            "server-side path",
            {"input_ids": p["one"], "image_data": ["/etc/passwd"], "sampling_params": sp},
            400,
            "only inline images",
        ),
        ("stream", {"input_ids": p["text"], "stream": True}, 400, "stream=true"),
        (
            "zero new tokens",
            {"input_ids": p["text"], "sampling_params": {"max_new_tokens": 0}},
            400,
            "sampling_params: max_new_tokens must be >= 1",
        ),
        (
            "negative temperature",
            {"input_ids": p["text"], "sampling_params": {"temperature": -1}},
            400,
            "temperature must be a finite number >= 0, got -1.0",
        ),
        (
            "wrong type",
            {"input_ids": p["text"], "sampling_params": {"top_p": "high"}},
            400,
            "sampling_params: top_p must be float",
        ),
        (
            "token id outside the vocabulary",
            {"input_ids": [*p["text"], 10**9], "sampling_params": sp},
            400,
            "token id 1000000000 at position",
        ),
        # Python's json writes and reads NaN / Infinity literals; a client can send them.
        (
            "NaN temperature",
            b'{"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2, "temperature": NaN}}',
            400,
            "temperature must be a finite number >= 0, got nan",
        ),
        (
            "infinite temperature",
            _json({"input_ids": p["text"], "sampling_params": {**sp, "temperature": math.inf}}),
            400,
            "temperature must be a finite number >= 0, got inf",
        ),
        (
            "NaN frequency penalty",
            _json(
                {"input_ids": p["text"], "sampling_params": {**sp, "frequency_penalty": math.nan}}
            ),
            400,
            "frequency_penalty must be in [-2, 2], got nan",
        ),
        (
            "longer than the context",
            {"input_ids": p["text"] * 200, "sampling_params": sp},
            400,
            "No room to generate",
        ),
        (
            "negative stop token id",
            {"input_ids": p["text"], "sampling_params": {**sp, "stop_token_ids": [-5]}},
            400,
            "stop_token_ids must be token ids (ints >= 0), got [-5]",
        ),
        (
            "negative min_new_tokens",
            {"input_ids": p["text"], "sampling_params": {**sp, "min_new_tokens": -5}},
            400,
            "min_new_tokens must be >= 0, got -5",
        ),
        (
            "min_new_tokens above max_new_tokens",
            {"input_ids": p["text"], "sampling_params": {**sp, "min_new_tokens": 5}},
            400,
            "min_new_tokens=5 must be at most the maximum, 2",
        ),
        (
            "a minimum the context cannot hold after the prompt",
            {
                "input_ids": p["text"],
                "sampling_params": {"max_new_tokens": 600, "min_new_tokens": 510},
            },
            400,
            "min_new_tokens=510 cannot fit",
        ),
        # A JSON string is not a boolean: "false" must not switch a flag on.
        ("string stream", {"input_ids": p["text"], "stream": "false"}, 400, "stream must be bool"),
        ("list rid", {"input_ids": p["text"], "rid": ["x"]}, 400, "rid must be str, got list"),
        ("int rid", {"input_ids": p["text"], "rid": 123}, 400, "rid must be str, got int"),
        (
            "string return_logprob",
            {"input_ids": p["text"], "return_logprob": "no"},
            400,
            "return_logprob must be bool",
        ),
        (
            "string skip_special_tokens",
            {"input_ids": p["text"], "sampling_params": {**sp, "skip_special_tokens": "false"}},
            400,
            "skip_special_tokens must be bool",
        ),
    ]


def test_inline_images_are_held_to_the_processors_byte_limit():
    """The server decodes base64 and data URLs with the processors' decoder: an oversize payload is
    a 400 naming the field and the processors' reason and limit, refused before it is decoded."""
    raw = base64.b64decode(png_base64(image(0)))
    text = base64.b64encode(raw).decode()
    assert encoded_image(text, "image_data[0]", max_bytes=len(raw)) == raw
    for source in (text, "data:image/png;base64," + text):
        with pytest.raises(PreprocessError) as processors:
            load_image(source, max_bytes=len(raw) - 1)
        with pytest.raises(BadRequest) as server:
            encoded_image(source, "image_data[0]", max_bytes=len(raw) - 1)
        assert processors.value.reason == "image_too_large"
        assert str(server.value).startswith("image_data[0]: image_too_large: ")
        assert f"max_bytes={len(raw) - 1}" in str(server.value)
    # Refused on the length of the text alone: the invalid tail is never reached.
    with pytest.raises(BadRequest, match="image_too_large: 28 encoded bytes exceed max_bytes=8"):
        encoded_image("AAAA" * 10 + "@@", "image_data[0]", max_bytes=8)
    with pytest.raises(BadRequest, match="only inline images"):
        encoded_image("file:///etc/passwd", "image_data[0]")


def _post(server, path, body):
    if isinstance(body, bytes):
        return requests.post(
            f"{server.url}{path}",
            data=body,
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
    return requests.post(f"{server.url}{path}", json=body, timeout=30)


def _still_serves(server, path, body):
    r = _post(server, path, body)
    assert r.status_code == 200, r.text


def test_sglang_bad_requests(sglang_server, prompts):
    server, _ = sglang_server
    good = {"input_ids": prompts["text"], "sampling_params": {"max_new_tokens": 2}}
    for name, body, status, message in _sglang_cases(prompts):
        r = _post(server, "/generate", body)
        assert r.status_code == status, (name, r.text)
        assert message in r.json()["error"]["message"], (name, r.text)
        _still_serves(server, "/generate", good)


def test_vllm_bad_requests(vllm_server, prompts):
    server, _ = vllm_server
    img = "data:image/png;base64," + prompts["img"]

    def chat(*parts, **extra):
        content = [*parts, {"type": "text", "text": "How many?"}]
        return {"messages": [{"role": "user", "content": content}], "max_tokens": 2, **extra}

    def url(u):
        return {"type": "image_url", "image_url": {"url": u}}

    cases = [
        ("/v1/chat/completions", b"{oops", 400, "malformed JSON"),
        ("/v1/chat/completions", {"messages": "hi"}, 400, "non-empty list"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": 5, "content": "hi"}], "max_tokens": 2},
            400,
            "messages[0].role must be a string",
        ),
        (
            "/v1/chat/completions",
            chat({"type": "image_url", "image_url": {"url": img, "detail": "bogus"}}),
            400,
            "image_url.detail must be one of auto, low, high, got 'bogus'",
        ),
        ("/v1/chat/completions", chat(url(img), temp=1), 400, "unknown field(s) ['temp']"),
        ("/v1/chat/completions", chat(url("https://x/y.png")), 400, "only inline images"),
        (
            "/v1/chat/completions",
            chat(url("data:image/png;base64," + GARBAGE_PNG)),
            400,
            "image_decode",
        ),
        (
            "/v1/chat/completions",
            chat(url(img), url("data:image/png;base64," + TRUNCATED_PNG)),
            400,
            "/v1/chat/completions image 2: image_decode: corrupt or truncated image",
        ),
        (
            "/v1/chat/completions",
            chat(url("data:image/png;base64," + BOMB_PNG)),
            400,
            f"image_too_large: 8193x8192 = 67117056 pixels exceed the decode limit "
            f"max_image_pixels={DEFAULT_MAX_PIXELS}",
        ),
        (
            "/v1/chat/completions",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [url(img), {"type": "text", "text": "<|image_pad|> 2"}],
                    }
                ]
            },
            400,
            "placeholder",
        ),
        ("/v1/chat/completions", chat(url(img), use_beam_search=True), 400, "use_beam_search"),
        ("/v1/chat/completions", chat(url(img), n=0), 400, "n must be a whole number in [1, 16]"),
        ("/v1/chat/completions", chat(url(img), n=True), 400, "n must be a whole number"),
        (
            "/v1/chat/completions",
            chat(url(img), logprobs=True, top_logprobs=99),
            400,
            "top_logprobs must be a whole number in [0, 20]",
        ),
        ("/v1/completions", {"prompt": [1, 2], "n": 2}, 400, "n must be a whole number in [1, 1]"),
        ("/v1/completions", {"prompt": [1, 2], "stream": True}, 400, "chat/completions only"),
        (
            "/v1/completions",
            {"prompt": [1, 2], "logprobs": True},
            400,
            "logprobs must be a whole number in [0, 20]",
        ),
        ("/v1/completions", {"prompt": [1, 2], "logprobs": 21}, 400, "logprobs must be"),
        ("/v1/completions", {"prompt": prompts["one"], "max_tokens": 2}, 400, "has no images"),
        ("/v1/completions", {"prompt": [-1], "max_tokens": 2}, 400, "non-negative token ids"),
        ("/v1/completions", {"prompt": [1, 10**9], "max_tokens": 2}, 400, "outside the model"),
        ("/v1/chat/completions", _json(chat(url(img), temperature=math.inf)), 400, "finite"),
        ("/v1/completions", {"max_tokens": 2}, 400, "missing required field(s) ['prompt']"),
        (
            "/v1/chat/completions",
            chat(url(img), max_tokens=100_000),
            400,
            "maximum context length is 512 tokens",
        ),
        (
            "/v1/completions",
            {"prompt": [1, 2], "max_tokens": 511},
            400,
            "you requested 513 tokens (2 in the prompt, 511 in the completion)",
        ),
        ("/v1/chat/completions", chat(url(img), top_logprobs=2), 400, "logprobs must be true"),
        (
            "/v1/chat/completions",
            chat(url(img), max_tokens=None, max_completion_tokens=100_000),
            400,
            "maximum context length is 512 tokens",
        ),
        (
            "/v1/chat/completions",
            chat(url(img), min_tokens=5),
            400,
            "min_tokens=5 must be at most the maximum, 2",
        ),
        ("/v1/completions", {"prompt": [1, 2], "stream": "false"}, 400, "stream must be bool"),
        (
            "/v1/chat/completions",
            chat(url(img), max_tokens=None, min_tokens=500),
            400,
            "min_tokens=500 cannot fit",
        ),
        (
            "/v1/chat/completions",
            chat(url(img), stream=True, stream_options={"include_usage": "false"}),
            400,
            "include_usage must be bool",
        ),
        (
            "/v1/chat/completions",
            chat(url(img), stream=True, stream_options="x"),
            400,
            "stream_options must be dict",
        ),
        (
            "/v1/chat/completions",
            chat(url(img), stream=True, stream_options={"continuous_usage_stats": True}),
            400,
            "unknown field(s) ['continuous_usage_stats']",
        ),
        ("/v1/chat/completions", chat(url(img), stream="false"), 400, "stream must be bool"),
        ("/v1/chat/completions", chat(url(img), logprobs="no"), 400, "logprobs must be bool"),
        (
            "/v1/chat/completions",
            chat(url(img), logprobs=True, return_tokens_as_token_ids="false"),
            400,
            "return_tokens_as_token_ids must be bool",
        ),
        (
            "/v1/completions",
            {"prompt": [1, 2], "skip_special_tokens": "false"},
            400,
            "skip_special_tokens must be bool",
        ),
    ]
    good = chat(url(img))
    for path, body, status, message in cases:
        r = _post(server, path, body)
        assert r.status_code == status, (path, body if isinstance(body, bytes) else "", r.text)
        assert message in r.json()["error"]["message"], r.text
        _still_serves(server, "/v1/chat/completions", good)


def test_unknown_route_and_method_are_json_errors(sglang_server):
    server, _ = sglang_server
    r = requests.post(f"{server.url}/nope", json={}, timeout=10)
    assert r.status_code == 404 and "/nope" in r.json()["error"]["message"]
    r = requests.get(f"{server.url}/generate", timeout=10)
    assert r.status_code == 405 and "GET /generate" in r.json()["error"]["message"]


def test_oversized_body_is_413_and_server_keeps_serving(prompts):
    with serving("sglang", max_body_bytes=4096) as (server, _):
        body = {"input_ids": prompts["one"], "image_data": [prompts["img"] * 4]}
        r = _post(server, "/generate", body)
        assert r.status_code == 413, r.text
        assert "larger than the server's limit of 4096 bytes" in r.json()["error"]["message"]
        _still_serves(
            server,
            "/generate",
            {"input_ids": prompts["text"], "sampling_params": {"max_new_tokens": 2}},
        )
        for _ in range(2):
            assert _post(server, "/generate", b"{oops").status_code == 400
        assert requests.post(f"{server.url}/nope", json={}, timeout=10).status_code == 404
        # A long-running server's error rate, by status, without reading its log.
        errors = requests.get(f"{server.url}/health", timeout=10).json()["errors"]
        assert errors == {"400": 2, "404": 1, "413": 1}


def test_failed_weight_update_is_400_and_weights_stay(sglang_server, prompts):
    server, engine = sglang_server
    version = engine.get_version()
    missing = ASSET.parent / "no-such-checkpoint"  # under the weights root, not a model
    r = _post(server, "/update_weights_from_disk", {"model_path": str(missing)})
    assert r.status_code == 400 and "cannot load weights" in r.json()["error"]["message"]
    assert engine.get_version() == version
    r = _post(server, "/update_weights_from_disk", {"path": "x"})
    assert r.status_code == 400 and "unknown field(s) ['path']" in r.json()["error"]["message"]
    _still_serves(
        server,
        "/generate",
        {"input_ids": prompts["text"], "sampling_params": {"max_new_tokens": 2}},
    )


def test_a_body_over_the_limit_is_413_even_when_it_is_over_the_queue_bound_too(prompts):
    # 413 says "never", 503 "retry later": a client retries a 503 that could never pass.
    from vlrollout.serve.admission import QueueLimits

    limits = QueueLimits(max_requests=4, max_bytes=2048)
    with serving("sglang", max_body_bytes=4096, limits=limits) as (server, _):
        body = {"input_ids": prompts["one"], "image_data": [prompts["img"] * 4]}
        r = _post(server, "/generate", body)
        assert r.status_code == 413, r.text
        assert "Retry-After" not in r.headers


def test_an_image_the_processor_refuses_is_400_on_both_protocols(
    sglang_server, vllm_server, prompts
):
    strip = png_base64(image(0, width=3000, height=1))
    server, _ = sglang_server
    r = _post(server, "/generate", {"input_ids": prompts["one"], "image_data": [strip]})
    assert r.status_code == 400, r.text
    assert "aspect ratio" in r.json()["error"]["message"]
    server, _ = vllm_server
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{strip}"}}
    messages = [{"role": "user", "content": [part, {"type": "text", "text": "Hi"}]}]
    r = _post(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 2})
    assert r.status_code == 400, r.text


@pytest.mark.parametrize("encoding", ["br", "deflate", "gzip"])
def test_a_body_that_cannot_be_decoded_as_its_content_encoding_is_400(sglang_server, encoding):
    server, _ = sglang_server
    r = requests.post(
        f"{server.url}/generate",
        data=b'{"input_ids": [1, 2]}',
        headers={"Content-Type": "application/json", "Content-Encoding": encoding},
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert "Content-Encoding" in r.json()["error"]["message"]


def test_an_image_the_processor_cannot_resize_is_400_on_both_protocols(tmp_path):
    """Mistral 3's fast image processor resizes a 500x3 image to nothing and torch raises
    RuntimeError: a client error (400), which an OpenAI client does not retry, not a 500."""
    import torch

    from vlrollout.engine import LocalInferenceEngine
    from vlrollout.testing.tiny_families import save_tiny_vlm

    model = save_tiny_vlm("mistral3", tmp_path / "mistral3")
    engine = LocalInferenceEngine.from_pretrained(str(model), dtype=torch.float32).initialize()
    thin = png_base64(image(0, width=500, height=3))
    try:
        token = engine.processor.image_token_id
        with serving("sglang", engine) as (server, _):
            body = {"input_ids": [1, token, 2], "image_data": [thin]}
            r = _post(server, "/generate", body)
            assert r.status_code == 400 and "processor_error" in r.text, r.text
        with serving("vllm", engine) as (server, _):
            part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{thin}"}}
            messages = [{"role": "user", "content": [part, {"type": "text", "text": "Hi"}]}]
            r = _post(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 2})
            assert r.status_code == 400 and "processor_error" in r.text, r.text
    finally:
        engine.destroy()


def test_chat_content_parts_never_make_the_server_read_its_own_files(
    vllm_server, prompts, tmp_path
):
    """Only OpenAI's part types reach the processor: the item forms that name a file
    (``{"type": "image", "image": PATH}``, ``{"image": PATH}``, a video path) would make the
    server read, and probe, its own disk for a client."""
    server, _ = vllm_server
    png = tmp_path / "server_side.png"
    png.write_bytes(base64.b64decode(prompts["img"]))
    clip = ROOT / "assets" / "samples" / "videos" / "temporal-2-0.mp4"
    parts = [
        {"type": "image", "image": str(png)},
        {"image": str(png)},
        {"type": "image", "image": f"file://{png}"},
        {"type": "video", "video": str(clip)},
        {"type": "image"},
        {"text": "no type"},
        "a bare string",
    ]
    for part, reason in [
        *((p, "image_url") for p in parts),
        ({"type": "text"}, "text as a string"),
    ]:
        body = {"messages": [{"role": "user", "content": [part]}], "max_tokens": 2}
        r = _post(server, "/v1/chat/completions", body)
        assert r.status_code == 400, (part, r.text)
        message = r.json()["error"]["message"]
        assert "messages[0].content[0]" in message and reason in message, (part, message)
    _still_serves(
        server,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
    )


def test_deeply_nested_json_is_a_400(sglang_server):
    server, _ = sglang_server
    body = ('{"input_ids": ' + "[" * 5000 + "]" * 5000 + "}").encode()
    r = _post(server, "/generate", body)
    assert r.status_code == 400, r.text
    assert "nested too deeply" in r.json()["error"]["message"]


def test_a_model_the_server_does_not_serve_is_a_404(vllm_server):
    """As vLLM answers: a client naming another model (a LoRA adapter never loaded, a typo)
    must not get the base model's answer under the name it asked for."""
    server, _ = vllm_server
    served = requests.get(f"{server.url}/v1/models", timeout=10).json()["data"][0]["id"]
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for path, body in (
        ("/v1/chat/completions", chat),
        ("/v1/completions", {"prompt": [1, 2], "max_tokens": 2}),
    ):
        r = _post(server, path, {**body, "model": "a-lora-never-loaded"})
        assert r.status_code == 404, r.text
        error = r.json()["error"]
        assert error["type"] == "NotFoundError" and served in error["message"]
        assert _post(server, path, {**body, "model": served}).status_code == 200
        unnamed = _post(server, path, body)
        assert unnamed.status_code == 200 and unnamed.json()["model"] == served


def test_a_wrong_method_has_an_error_type(sglang_server):
    server, _ = sglang_server
    r = requests.get(f"{server.url}/generate", timeout=10)
    assert r.status_code == 405 and r.json()["error"]["type"] == "MethodNotAllowed"


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_a_weight_update_flag_sent_as_a_string_is_a_400(protocol, tmp_path):
    # "false" is truthy in Python: the update would abort every request in flight.
    path = {"sglang": "/update_weights_from_disk", "vllm": "/areal_update_weights"}[protocol]
    with serving(protocol, weights_root=tmp_path) as (server, engine):
        body = {"model_path": str(tmp_path), "abort_all_requests": "false"}
        r = _post(server, path, body)
        assert r.status_code == 400, r.text
        assert "abort_all_requests must be bool" in r.json()["error"]["message"]
        assert engine.get_version() == 0


def test_a_null_flag_means_its_default_on_both_protocols(sglang_server, vllm_server, prompts):
    server, _ = sglang_server
    sp = {"max_new_tokens": 2, "skip_special_tokens": None, "ignore_eos": None}
    r = _post(server, "/generate", {"input_ids": prompts["text"], "sampling_params": sp})
    assert r.status_code == 200, r.text
    server, _ = vllm_server
    body = {"prompt": [1, 2], "max_tokens": 2, "skip_special_tokens": None}
    r = _post(server, "/v1/completions", body)
    assert r.status_code == 200, r.text


def test_sglang_pause_takes_only_its_modes(sglang_server):
    server, _ = sglang_server
    for mode in ("xyz", 1):
        r = _post(server, "/pause_generation", {"mode": mode})
        assert r.status_code == 400, r.text
        assert "mode must be one of" in r.json()["error"]["message"]
    assert requests.get(f"{server.url}/health", timeout=10).json()["paused"] is False


def test_a_chat_whose_images_alone_pass_the_context_is_refused_before_their_pixels(
    vllm_server, monkeypatch
):
    """33 images of 16 tokens each pass the tiny model's 512-token context less the 2 new tokens
    asked: a 400 naming ``prompt_too_long``, counted from the sizes before the processor builds
    any pixels."""
    from vlrollout.processors import AutoProcessorPreprocessor

    server, _ = vllm_server
    calls = []
    real = AutoProcessorPreprocessor.call_processor
    monkeypatch.setattr(
        AutoProcessorPreprocessor,
        "call_processor",
        lambda self, *a, **k: calls.append(1) or real(self, *a, **k),
    )
    img = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + png_base64(image(0, 120, 120))},
    }
    body = {"messages": [{"role": "user", "content": [img] * 33}], "max_tokens": 2}
    r = requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert "prompt_too_long" in r.json()["error"]["message"]
    assert "alone take 528 tokens, more than the 510" in r.json()["error"]["message"]
    assert calls == []
    body["messages"][0]["content"] = [img] * 2  # within the context: prepared and run
    assert requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=60).ok
    assert calls == [1]


def test_a_generate_longer_than_the_context_is_refused_before_its_images_are_built(
    sglang_server, prompts, monkeypatch
):
    from vlrollout.serve.state import ServerState

    server, _ = sglang_server
    built = []
    real = ServerState.vision_tensors
    monkeypatch.setattr(
        ServerState, "vision_tensors", lambda self, *a: built.append(1) or real(self, *a)
    )
    ids = prompts["text"] * 200 + prompts["one"]
    body = {"input_ids": ids, "image_data": [prompts["img"]], "sampling_params": {}}
    r = requests.post(f"{server.url}/generate", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert f"No room to generate: the prompt's {len(ids)} tokens" in r.text
    assert built == []


def test_a_bad_inline_video_is_named_as_a_video(vllm_server):
    server, _ = vllm_server
    part = {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,@@not-base64@@"}}
    body = {"messages": [{"role": "user", "content": [part]}], "max_tokens": 2}
    r = requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "messages[0].content[0]: video_source:" in message and "image" not in message, message


@pytest.fixture
def serve_info_records():
    """The serve app's INFO lines while the test runs."""
    logger, level = app_module.logger, app_module.logger.level
    logger.setLevel(logging.INFO)
    try:
        with Records(logger, logging.INFO) as records:
            yield records
    finally:
        logger.setLevel(level)


def test_a_client_that_hangs_up_is_logged_and_counted(prompts, serve_info_records):
    """A request whose client closed the connection before its answer leaves one log line and
    counts as 499 (nginx's "client closed request") under ``/health``'s ``errors``: its
    generation stops and nothing is answered, so the access log alone would not show it."""
    with serving("sglang") as (server, _):
        sp = {"max_new_tokens": 4000, "ignore_eos": True}
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.post(
                f"{server.url}/generate",
                json={"input_ids": prompts["text"], "sampling_params": sp},
                timeout=0.5,
            )
        deadline = time.monotonic() + 20
        errors: dict = {}
        while time.monotonic() < deadline and "499" not in errors:
            time.sleep(0.1)
            errors = requests.get(f"{server.url}/health", timeout=10).json()["errors"]
        assert errors == {"499": 1}
    text = serve_info_records.text.splitlines()
    lines = [line for line in text if "closed the connection" in line]
    assert lines == ["POST /generate -> 499: the client closed the connection before the answer"]


def test_openai_fields_at_their_neutral_value_are_taken(vllm_server):
    """Harnesses send presence_penalty 0, an empty logit_bias and a user id by default: they
    change nothing, so they pass; any other value is refused naming the field, never ignored."""
    server, _ = vllm_server
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    neutral = {"presence_penalty": 0, "logit_bias": {}, "user": "harness-7"}
    r = requests.post(server.url + "/v1/chat/completions", json={**chat, **neutral}, timeout=60)
    assert r.status_code == 200, r.text
    r = requests.post(
        server.url + "/v1/completions", json={"prompt": [1, 2], **neutral}, timeout=60
    )
    assert r.status_code == 200, r.text
    for field, value in (("presence_penalty", 0.5), ("logit_bias", {"5": 10}), ("user", 7)):
        r = requests.post(
            server.url + "/v1/chat/completions", json={**chat, field: value}, timeout=60
        )
        assert r.status_code == 400 and field in r.json()["error"]["message"], r.text


def test_a_body_that_is_not_utf8_is_told_so(sglang_server):
    """JSON travels as UTF-8 (RFC 8259): bytes that are not are named so, not read as UTF-16."""
    server, _ = sglang_server
    r = requests.post(server.url + "/generate", data=b'\xff\xfe{"input_ids": [1]}', timeout=30)
    assert r.status_code == 400 and "the body is not UTF-8" in r.json()["error"]["message"]


def _generate(server, text, **sampling):
    body = {
        "input_ids": text,
        "sampling_params": {"max_new_tokens": 4, "min_new_tokens": 4, **sampling},
        "return_logprob": True,
    }
    return _post(server, "/generate", body)


def test_temperatures_float32_cannot_divide_by_sample_as_their_limit(sglang_server, prompts):
    """A temperature below 1e-5 samples greedily with logprobs at temperature 1, as 0 does (and
    as SGLang and vLLM treat it); one past float32's range samples uniformly, as any temperature
    whose division leaves float32 logits at 0 does. Neither is a 500 with a token past the
    vocabulary."""
    server, engine = sglang_server
    vocab = engine.model.config.get_text_config().vocab_size

    def run(t):
        r = _generate(server, prompts["text"], temperature=t)
        assert r.status_code == 200, (t, r.text)
        return r.json()["meta_info"]["output_token_logprobs"]

    greedy = run(0)
    for tiny in (1e-300, 1e-45, 1e-6):
        assert run(tiny) == greedy, tiny
    for huge in (1e300, 1e308):
        out = run(huge)
        assert all(0 <= t < vocab and math.isfinite(lp) for lp, t, _ in out), huge


@pytest.mark.parametrize("penalty", [-1e300, -2.5, 50, 1e300])
def test_a_frequency_penalty_outside_minus_2_to_2_is_a_400(
    sglang_server, vllm_server, prompts, penalty
):
    """OpenAI's, vLLM's and SGLang's range; -1e300 overflowed float32 into a 500."""
    server, _ = sglang_server
    r = _generate(server, prompts["text"], frequency_penalty=penalty)
    assert r.status_code == 400 and "frequency_penalty" in r.json()["error"]["message"], r.text
    server, _ = vllm_server
    body = {"prompt": prompts["text"], "max_tokens": 2, "frequency_penalty": penalty}
    r = _post(server, "/v1/completions", body)
    assert r.status_code == 400 and "[-2, 2]" in r.json()["error"]["message"], r.text
    _still_serves(server, "/v1/completions", {"prompt": prompts["text"], "max_tokens": 2})


def test_top_k_is_off_or_at_least_1_as_each_protocol_says(sglang_server, vllm_server, prompts):
    """SGLang takes -1 (off) or >= 1; vLLM also 0 (off). Anything else was read as off."""
    server, _ = sglang_server
    for top_k, status in ((-5, 400), (0, 400), (-1, 200), (3, 200)):
        r = _generate(server, prompts["text"], top_k=top_k)
        assert r.status_code == status, (top_k, r.text)
        if status == 400:
            assert "top_k must be -1 (off) or at least 1" in r.json()["error"]["message"], r.text
    server, _ = vllm_server
    for top_k, status in ((-5, 400), (-2, 400), (0, 200), (-1, 200)):
        body = {"prompt": prompts["text"], "max_tokens": 2, "top_k": top_k}
        r = _post(server, "/v1/completions", body)
        assert r.status_code == status, (top_k, r.text)
        if status == 400:
            message = r.json()["error"]["message"]
            assert "top_k must be -1 or 0 (off) or at least 1" in message, r.text


def test_text_with_a_lone_surrogate_is_a_400_naming_where(vllm_server, prompts):
    """JSON can escape half of a UTF-16 pair (\\ud800), which is no Unicode text: the tokenizer
    raised a TypeError, a 500."""
    server, _ = vllm_server
    chat = b'{"messages": [{"role": "user", "content": "a\\ud800"}], "max_tokens": 2}'
    completion = b'{"prompt": "x\\udfffy", "max_tokens": 2}'
    paired = '{"messages": [{"role": "user", "content": "ok \\ud83d\\ude00"}], "max_tokens": 2}'
    for path, body, where in (
        ("/v1/chat/completions", chat, "messages[0].content"),
        ("/v1/completions", completion, "prompt"),
    ):
        r = _post(server, path, body)
        assert r.status_code == 400, r.text
        message = r.json()["error"]["message"]
        assert "surrogate" in message and where in message, message
    assert _post(server, "/v1/chat/completions", paired.encode()).status_code == 200


def test_fields_the_server_would_ignore_are_refused(vllm_server, sglang_server, prompts, tmp_path):
    server, _ = vllm_server
    completion = {"prompt": prompts["text"], "max_tokens": 2, "logprobs": 1, "top_logprobs": 3}
    r = _post(server, "/v1/completions", completion)
    assert r.status_code == 400 and "top_logprobs" in r.json()["error"]["message"], r.text
    chat = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2,
        "stream_options": {"include_usage": True},
    }
    r = _post(server, "/v1/chat/completions", chat)
    assert r.status_code == 400 and "stream" in r.json()["error"]["message"], r.text
    server, _ = sglang_server
    body = {"model_path": str(ASSET), "load_format": "dummy"}
    r = _post(server, "/update_weights_from_disk", body)
    assert r.status_code == 400 and "load_format" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize(
    "part, key",
    [
        (
            {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}, "nframes": 2},
            "nframes",
        ),
        (
            {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA", "fps": 0.5}},
            "fps",
        ),
        (
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64,AAAA"},
                "max_pixels": 9,
            },
            "max_pixels",
        ),
    ],
    ids=["video part key", "video url key", "image part key"],
)
def test_a_per_part_setting_is_a_400_not_ignored(vllm_server, part, key):
    """vlrollout run refuses a part's own sampling settings; the server samples as run does, so it
    refuses them too rather than answer as if they were not there."""
    server, _ = vllm_server
    body = {"messages": [{"role": "user", "content": [part, {"type": "text", "text": "?"}]}]}
    r = requests.post(
        f"{server.url}/v1/chat/completions", json={**body, "max_tokens": 2}, timeout=60
    )
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "messages[0].content[0]" in message and repr(key) in message, message


def test_video_placeholders_without_video_data_are_named_as_videos(sglang_server):
    """input_ids with Qwen2-VL's video placeholder (id 13) and no video_data: the message names
    videos and video_data, not images."""
    server, _ = sglang_server
    body = {"input_ids": [5, 13, 13, 13, 13, 6], "sampling_params": {"max_new_tokens": 2}}
    r = _post(server, "/generate", body)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "video placeholders and videos disagree" in message and "video_data" in message
    assert "image" not in message, message


def test_numbers_json_reads_but_python_cannot_use_are_400s(vllm_server, sglang_server, prompts):
    """An integer too large for a float where a float is expected, and an integer literal past
    Python's 4300-digit limit, are 400s naming the field or the body (they were 500s)."""
    server, _ = vllm_server
    huge = "1" + "0" * 400
    chat = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "%s": %s}'
    for key in ("temperature", "top_p", "frequency_penalty"):
        r = _post(server, "/v1/chat/completions", (chat % (key, huge)).encode())
        assert r.status_code == 400, r.text
        assert key in r.json()["error"]["message"], r.text
    r = _post(server, "/v1/chat/completions", (chat % ("max_tokens", "9" * 5000)).encode())
    assert r.status_code == 400 and "4300" in r.json()["error"]["message"], r.text
    server, _ = sglang_server
    body = f'{{"input_ids": {prompts["text"]}, "sampling_params": {{"temperature": {huge}}}}}'
    r = _post(server, "/generate", body.encode())
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"], r.text
    _still_serves(server, "/generate", {"input_ids": prompts["text"], "sampling_params": {}})


def test_a_null_model_path_is_a_400(vllm_server, sglang_server):
    for (server, _), path in (
        (vllm_server, "/areal_update_weights"),
        (vllm_server, "/vlrollout/check_weights_path"),
        (sglang_server, "/update_weights_from_disk"),
    ):
        r = _post(server, path, {"model_path": None})
        assert r.status_code == 400, (path, r.text)
        assert "model_path" in r.json()["error"]["message"], r.text


def test_a_missing_content_is_a_400_except_on_an_assistant_turn(vllm_server):
    """OpenAI: a user message needs content; an assistant turn that called tools has null."""
    server, _ = vllm_server
    for message in ({"role": "user"}, {"role": "user", "content": None}):
        r = _post(server, "/v1/chat/completions", {"messages": [message], "max_tokens": 2})
        assert r.status_code == 400, r.text
        assert "messages[0].content is missing" in r.json()["error"]["message"], r.text
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "again"},
    ]
    r = _post(server, "/v1/chat/completions", {"messages": turns, "max_tokens": 2})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_a_bad_completion_length_is_named_by_the_field_sent(vllm_server, key):
    server, _ = vllm_server
    for value in (0, "5"):
        body = {"messages": [{"role": "user", "content": "hi"}], key: value}
        r = _post(server, "/v1/chat/completions", body)
        assert r.status_code == 400 and key in r.json()["error"]["message"], r.text
