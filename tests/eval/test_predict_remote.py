"""EnginePredictor on AReaL's own remote engines (``RemotevLLMEngine``, ``RemoteSGLangEngine``)
pointed at ``vlrollout serve``: the same predictions as on the embedded engine it serves."""

from __future__ import annotations

import asyncio

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters

from tests.serve.conftest import ASSET, SAMPLES, areal_client, load_engine, serving
from vlrollout.datasets import load_items
from vlrollout.eval.predict import EnginePredictor

NEW_TOKENS = 24


@pytest.fixture(scope="module")
def engine():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine's cores are shared
    engine = load_engine(deterministic=True)
    yield engine
    engine.destroy()
    torch.set_num_threads(n)


def predictions(engine, items):
    gconfig = GenerationHyperparameters(max_new_tokens=NEW_TOKENS)
    predictor = EnginePredictor(engine, str(ASSET), str(ASSET), gconfig=gconfig)

    async def run():
        return [(await predictor.predict(item, 1)).to_dict() for item in items]

    return asyncio.run(run())


@pytest.mark.parametrize("protocol", ["vllm", "sglang"])
def test_remote_engine_predictions_equal_the_embedded_engine(engine, protocol):
    items = load_items(SAMPLES, limit=6)
    expected = predictions(engine, items)
    with serving(protocol, engine=engine) as (server, _):
        client = areal_client(protocol, server.address)
        try:
            got = predictions(client, items)
        finally:
            client.destroy()
    assert got == expected
    assert all(p["rejection"] is None for p in got)
