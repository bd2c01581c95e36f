"""AReaL's own RemoteSGLangEngine / RemotevLLMEngine drive the server through WorkflowExecutor."""

from __future__ import annotations

import threading

import pytest
import requests
from areal.api.cli_args import GenerationHyperparameters
from PIL import Image

from tests.serve.conftest import ASSET, SAMPLES, areal_client
from vlrollout.checks import logprob_consistency
from vlrollout.datasets import load_items
from vlrollout.processors import image_loading
from vlrollout.workflows import VisionRLVRWorkflow

REWARD = "tests.workflows.reward_fns.contains_answer"


def _workflow(temperature: float = 1.0) -> VisionRLVRWorkflow:
    gconfig = GenerationHyperparameters(max_new_tokens=8, temperature=temperature)
    return VisionRLVRWorkflow(REWARD, gconfig, str(ASSET), str(ASSET))


@pytest.fixture(params=["sglang", "vllm"])
def served(request, sglang_server, vllm_server):
    server, engine = sglang_server if request.param == "sglang" else vllm_server
    client = areal_client(request.param, server.address, check_trajectory_format=True)
    try:
        yield request.param, server, engine, client
    finally:
        client.destroy()


def _check_trainable(engine, traj, rows: int, temperature: float = 1.0) -> None:
    """Every row's rollout logprobs equal a teacher-forced forward of the served model."""
    assert traj["input_ids"].shape[0] == rows
    for row in range(rows):
        report = logprob_consistency(engine.model, traj, temperature, row)
        assert report.n_tokens > 0
        assert report.max_abs_diff <= 1e-4, report


def test_rollout_batch_over_http(served):
    protocol, server, engine, client = served
    items = load_items(SAMPLES)[:3]
    before = engine.stats().get("prefills", 0)
    path = {"sglang": "/generate", "vllm": "/v1/chat/completions"}[protocol]
    calls = requests.get(f"{server.url}/health", timeout=10).json()["requests"].get(path, 0)
    workflow = _workflow(temperature=0.7)
    trajs = client.rollout_batch(items, workflow=workflow, group_size=2)
    assert len(trajs) == 3
    for traj in trajs:
        _check_trainable(engine, traj, rows=2, temperature=0.7)
        generated = traj["loss_mask"].bool()
        assert (traj["versions"][generated] == 0).all()
    assert engine.stats()["prefills"] - before >= 6  # every episode crossed HTTP
    # vision requests: SGLang gets image_data, AReaL's vLLM client sends chat messages
    health = requests.get(f"{server.url}/health", timeout=10).json()
    assert health["requests"][path] - calls == 6
    assert workflow.ctx.ledger.rejected == 0, list(workflow.ctx.ledger.records)


def test_submit_and_wait_over_http(served):
    _, _, engine, client = served
    items = load_items(SAMPLES)[3:6]
    workflow = _workflow()
    for item in items:
        client.submit(item, workflow=workflow)
    results = client.wait(len(items), timeout=120)
    trajs = results if isinstance(results, list) else [results]
    assert len(trajs) == len(items)
    for traj in trajs:
        _check_trainable(engine, traj, rows=traj["input_ids"].shape[0])


def test_pil_images_over_http_are_encoded_beside_the_processor_call(served, monkeypatch):
    """Decoded images (as HF ``datasets`` gives them) through AReaL's own client: each group's
    lossless copy is encoded once, on the encoder thread, and the server sees exactly the
    trainer's pixels (its logprobs equal a teacher-forced forward on the trainer's tensors)."""
    _, _, engine, client = served
    threads = []
    encode = image_loading.LoadedImage.engine_bytes

    def recording(self):
        threads.append(threading.current_thread().name)
        return encode(self)

    monkeypatch.setattr(image_loading.LoadedImage, "engine_bytes", recording)
    items = load_items(SAMPLES)[:2]
    for item in items:
        with Image.open(item["images"][0]) as im:
            item["images"] = [im.convert("RGB").transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    trajs = client.rollout_batch(items, workflow=_workflow(), group_size=2)
    assert len(trajs) == 2
    for traj in trajs:
        _check_trainable(engine, traj, rows=2)
    assert len(threads) == 2 and all(t.startswith("vlrollout-engine-images") for t in threads)
