"""Every model family served by ``vlrollout serve``'s app and driven by AReaL's own remote clients.

For each family and protocol (SGLang's ``/generate`` with ``image_data``, AReaL's vLLM flavour
with chat messages), a GRPO group per item is rolled out through ``RemoteSGLangEngine`` /
``RemotevLLMEngine``; every episode is accepted and its logprobs equal a teacher-forced forward
of the served model within 1e-4.
"""

from __future__ import annotations

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from transformers import AutoProcessor

from tests.serve.conftest import areal_client
from vlrollout.checks import logprob_consistency
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.serve.app import build_app
from vlrollout.serve.background import BackgroundServer
from vlrollout.testing.family_items import ITEMS
from vlrollout.testing.tiny_families import TINY_FAMILIES, save_tiny_vlm
from vlrollout.workflows import VisionRLVRWorkflow

REWARD = "tests.workflows.reward_fns.contains_answer"
TEMPERATURE = 0.7
SERVED_ITEMS = ("one_image", "two_images", "image_in_later_turn")


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def saved(request, tmp_path_factory):
    """``(path, engine)``: the family's tiny model saved, and an engine over the saved files."""
    torch.set_num_threads(1)
    path = save_tiny_vlm(request.param, tmp_path_factory.mktemp(request.param))
    engine = LocalInferenceEngine.from_pretrained(str(path), dtype=torch.float32).initialize()
    yield path, engine
    engine.destroy()


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_served_rollouts_match_the_model(saved, protocol):
    path, engine = saved
    processor = AutoProcessor.from_pretrained(str(path))  # what the server's engine loaded
    gconfig = GenerationHyperparameters(max_new_tokens=6, temperature=TEMPERATURE)
    workflow = VisionRLVRWorkflow(REWARD, gconfig, processor.tokenizer, processor)
    items = [{"id": name, "answer": "never-matches", **ITEMS[name]} for name in SERVED_ITEMS]
    server = BackgroundServer(build_app(engine, protocol)).start()
    client = areal_client(protocol, server.address, path, check_trajectory_format=True)
    try:
        trajs = client.rollout_batch(items, workflow=workflow, group_size=2)
    finally:
        client.destroy()
        server.stop()
    assert workflow.ctx.ledger.rejected == 0, list(workflow.ctx.ledger.records)
    assert len(trajs) == len(items)
    for traj in trajs:
        assert traj["input_ids"].shape[0] == 2
        for row in range(2):
            report = logprob_consistency(engine.model, traj, TEMPERATURE, row)
            assert report.n_tokens > 0 and report.max_abs_diff <= 1e-4, report
