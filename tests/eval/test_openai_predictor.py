"""OpenAIPredictor against ``vlrollout serve --protocol vllm`` driven as an external OpenAI server
would be: the same completions, geometry and token counts as EnginePredictor on the engine it
serves (greedy, deterministic engine); failed requests become rejections naming the cause."""

from __future__ import annotations

import asyncio
import socket

import pytest
import torch
from aiohttp import web
from areal.api.cli_args import GenerationHyperparameters

from tests.serve.conftest import ASSET, SAMPLES, load_engine, serving
from vlrollout.datasets import load_items
from vlrollout.eval.openai_client import OpenAIPredictor
from vlrollout.eval.predict import EnginePredictor
from vlrollout.serve.background import BackgroundServer

NEW_TOKENS = 24
TEXT_ITEM = {"id": "text-only", "messages": [{"role": "user", "content": "Name a colour."}]}


@pytest.fixture(scope="module")
def served():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine's cores are shared
    engine = load_engine(deterministic=True)  # what `vlrollout serve --deterministic` builds
    with serving("vllm", engine=engine) as (server, _):
        yield server, engine
    engine.destroy()
    torch.set_num_threads(n)


def openai_predictor(url: str, **kwargs) -> OpenAIPredictor:
    kwargs.setdefault("max_retries", 0)
    return OpenAIPredictor(url, str(ASSET), str(ASSET), max_tokens=NEW_TOKENS, **kwargs)


async def predict_all(predictor, items, k=1):
    try:
        return [await predictor.predict(item, k) for item in items]
    finally:
        if isinstance(predictor, OpenAIPredictor):
            await predictor.aclose()


def test_served_predictions_equal_the_local_engine(served, tmp_path):
    server, engine = served
    items = [*load_items(SAMPLES), TEXT_ITEM]
    items.append({**items[0], "id": "missing", "images": [str(tmp_path / "gone.png")]})
    local = EnginePredictor(
        engine,
        engine.tokenizer,
        str(ASSET),
        gconfig=GenerationHyperparameters(max_new_tokens=NEW_TOKENS),
    )
    expected = asyncio.run(predict_all(local, items))
    got = asyncio.run(predict_all(openai_predictor(server.address), items))
    assert [p.to_dict() for p in got] == [p.to_dict() for p in expected]
    assert sum(p.rejection is None for p in got) == len(items) - 1
    assert got[-1].rejection["reason"] == "image_not_found"
    assert any("<|box_start|>" in p.completions[0] for p in got if p.completions)


def test_served_k_choices(served):
    server, _ = served
    predictor = openai_predictor(server.url, temperature=5.0, seed=3)
    [prediction] = asyncio.run(predict_all(predictor, load_items(SAMPLES, limit=1), k=3))
    assert prediction.rejection is None and len(prediction.completions) == 3
    assert len(set(prediction.completions)) > 1, prediction.completions


def failing_app(status: int, message: str, delay_s: float = 0.0) -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        await asyncio.sleep(delay_s)
        body = {"error": {"message": message, "type": "Error", "code": status}}
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def test_http_error_becomes_a_rejection_naming_status_and_message():
    item = load_items(SAMPLES, limit=1)[0]
    with BackgroundServer(failing_app(500, "engine fell over")) as server:
        [prediction] = asyncio.run(predict_all(openai_predictor(server.address), [item]))
    assert prediction.rejection["reason"] == "http_error"
    assert "HTTP 500" in prediction.rejection["detail"]
    assert "engine fell over" in prediction.rejection["detail"]
    assert prediction.geometry  # our preprocessor ran before the request
    with BackgroundServer(failing_app(200, "late", delay_s=2.0)) as server:
        slow = openai_predictor(server.address, timeout_s=0.3)
        [prediction] = asyncio.run(predict_all(slow, [item]))
    assert prediction.rejection["reason"] == "http_timeout"


def test_refused_connection_becomes_a_rejection():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    item = load_items(SAMPLES, limit=1)[0]
    [prediction] = asyncio.run(predict_all(openai_predictor(f"127.0.0.1:{port}"), [item]))
    assert prediction.rejection["reason"] == "http_connection"
    assert str(port) in prediction.rejection["detail"]


def replying_app(text: str | None = None, body: dict | None = None) -> web.Application:
    """A server that answers 200 with ``text`` (not JSON) or a JSON ``body``."""

    async def chat(request: web.Request) -> web.Response:
        return web.Response(text=text) if body is None else web.json_response(body)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.mark.parametrize(
    ("app", "said"),
    [
        (replying_app(text="not json"), "not a chat completion"),
        (replying_app(body={"id": "x", "object": "chat.completion"}), "no choices"),
    ],
    ids=["not-json", "no-choices"],
)
def test_a_reply_that_is_not_a_chat_completion_is_a_bad_response(app, said):
    item = load_items(SAMPLES, limit=1)[0]
    with BackgroundServer(app) as server:
        [prediction] = asyncio.run(predict_all(openai_predictor(server.address), [item]))
    assert prediction.rejection["reason"] == "bad_response", prediction.rejection
    assert said in prediction.rejection["detail"]
