"""A remote engine is checked for the protocol it was named with before anything runs: a server
that speaks another protocol is a one-line refusal, not every item rejected as ``engine_error``
after the client's retries."""

from __future__ import annotations

import pytest
import requests
from aiohttp import web

from tests.serve.conftest import ASSET, serving
from vlrollout.engine.checks import check_engine
from vlrollout.engine.config import EngineConfig
from vlrollout.errors import ConfigError
from vlrollout.serve.background import BackgroundServer


def _check(kind: str, address: str) -> None:
    check_engine(EngineConfig(kind=kind, model=str(ASSET), addresses=[address]))


@pytest.mark.parametrize(("served", "named"), [("vllm", "sglang"), ("sglang", "vllm")])
def test_vlrollout_serve_of_another_protocol_is_refused_as_its_health_names_it(served, named):
    with serving(served) as (server, _):
        _check(served, server.address)  # the protocol it speaks passes
        with pytest.raises(ConfigError) as info:
            _check(named, server.address)
        errors = requests.get(server.url + "/health", timeout=10).json()["errors"]
    assert str(info.value).startswith(
        f"the {named} server at {server.address} speaks {served}'s protocol"
    )
    assert errors == {}  # the checks leave no error answer in the server's counts


async def _post_only(request: web.Request) -> web.Response:
    return web.json_response({})


async def _bare_health(request: web.Request) -> web.Response:
    return web.Response()  # SGLang's and vLLM's /health: 200, no body


@pytest.mark.parametrize(("routes", "named", "route"), [
    (["/v1/completions", "/v1/chat/completions"], "sglang", "/generate"),
    (["/generate"], "vllm", "/v1/completions"),
])  # fmt: skip
def test_another_server_without_the_protocols_route_is_refused_naming_it(routes, named, route):
    """A server that does not name its protocol (SGLang, vLLM) is asked for the route with a
    GET: 405 where it takes POST, 404 where it has none."""
    app = web.Application()
    app.router.add_get("/health", _bare_health)
    for path in routes:
        app.router.add_post(path, _post_only)
    other = "vllm" if named == "sglang" else "sglang"
    with BackgroundServer(app) as server:
        _check(other, server.address)
        with pytest.raises(ConfigError) as info:
            _check(named, server.address)
    assert str(info.value).startswith(f"the {named} server at {server.address} has no {route}")
    assert f"it does not speak {named}'s protocol" in str(info.value)


def test_a_server_that_wants_a_key_is_not_refused_for_the_answer_it_gives_without_one():
    with serving("vllm", api_key="secret") as (server, _):
        _check("sglang", server.address)  # 401 to every route: the protocol cannot be told
