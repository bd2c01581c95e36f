"""``vlrollout eval`` against ``vlrollout serve --protocol vllm`` driven as an external server:
through the OpenAI client (model name read from ``/v1/models``) and through AReaL's vLLM remote
engine, the same predictions and numbers as the local model (greedy, deterministic engine)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.serve.conftest import ASSET, load_engine, serving
from vlrollout.cli import main

from .test_eval_cli import write_refs


@pytest.fixture(scope="module")
def server():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine's cores are shared
    engine = load_engine(deterministic=True)
    with serving("vllm", engine=engine) as (running, _):
        yield running
    engine.destroy()
    torch.set_num_threads(n)


def _eval(data, out, *extra) -> dict:
    argv = ["eval", "--data", str(data), "--task", "refcoco", "--model", str(ASSET)]
    argv += ["--output", str(out), "--max-new-tokens", "12", "--no-progress", "--bootstrap", "100"]
    assert main([*argv, *extra]) == 0
    predictions = {
        json.loads(p.read_text())["id"]: json.loads(p.read_text())
        for p in (out / "predictions").glob("*.json")
    }
    return {"results": json.loads((out / "results.json").read_text()), "pred": predictions}


def test_served_model_gives_the_local_numbers(server, tmp_path):
    data = write_refs(tmp_path)
    local = _eval(data, tmp_path / "local", "--seed", "1")
    address = server.address
    by_openai = _eval(data, tmp_path / "openai", "--address", address, "--protocol", "openai")
    by_vllm = _eval(data, tmp_path / "vllm", "--address", address, "--protocol", "vllm")
    for served in (by_openai, by_vllm):
        assert {i: p["completions"] for i, p in served["pred"].items()} == {
            i: p["completions"] for i, p in local["pred"].items()
        }
        assert {i: p["geometry"] for i, p in served["pred"].items()} == {
            i: p["geometry"] for i, p in local["pred"].items()
        }
        values = {n: m["value"] for n, m in served["results"]["metrics"].items()}
        assert values == {n: m["value"] for n, m in local["results"]["metrics"].items()}
    assert by_openai["results"]["settings"]["source"] == "openai"
