"""A remote engine is checked for the protocol it was named with before anything runs: a server
that lacks the protocol's generation route is a one-line refusal, not every item rejected as
``engine_error`` after the client's retries."""

from __future__ import annotations

import pytest

from tests.serve.conftest import ASSET, serving
from vlrollout.engine.checks import check_engine
from vlrollout.engine.config import EngineConfig
from vlrollout.errors import ConfigError


def _check(kind: str, address: str) -> None:
    check_engine(EngineConfig(kind=kind, model=str(ASSET), addresses=[address]))


@pytest.mark.parametrize(
    ("served", "named", "route"), [("vllm", "sglang", "/generate"), ("sglang", "vllm", "/v1/")]
)
def test_a_server_of_another_protocol_is_refused_naming_the_route_it_lacks(served, named, route):
    with serving(served) as (server, _):
        _check(served, server.address)  # the protocol it speaks passes
        with pytest.raises(ConfigError) as info:
            _check(named, server.address)
    message = str(info.value)
    assert message.startswith(f"the {named} server at {server.address} has no {route}")
    assert f"it does not speak {named}'s protocol" in message


def test_a_server_that_wants_a_key_is_not_refused_for_the_answer_it_gives_without_one():
    with serving("vllm", api_key="secret") as (server, _):
        _check("sglang", server.address)  # 401 to every route: the protocol cannot be told
