"""The engine inside AReaL's machinery: WorkflowExecutor's own event loop, offload/onload."""

from __future__ import annotations

import asyncio

import torch
from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig
from areal.api.io_struct import ModelRequest
from areal.api.workflow_api import RolloutWorkflow

from vlrollout.engine import LocalInferenceEngine


class OneTurn(RolloutWorkflow):
    """A minimal vision workflow: one request, the trajectory AReaL's trainer expects."""

    async def arun_episode(self, engine, data):
        resp = await engine.agenerate(
            ModelRequest(
                input_ids=data["input_ids"],
                metadata={"multi_modal_input": data["mm"]},
                gconfig=GenerationHyperparameters(max_new_tokens=6, min_new_tokens=6),
            )
        )
        seq = resp.input_tokens + resp.output_tokens
        n_in = resp.input_len
        return {
            "input_ids": torch.tensor([seq]),
            "attention_mask": torch.ones(1, len(seq), dtype=torch.bool),
            "loss_mask": torch.tensor([[0] * n_in + [1] * resp.output_len], dtype=torch.int32),
            "logprobs": torch.tensor([[0.0] * n_in + resp.output_logprobs]),
            "versions": torch.tensor([[-1] * n_in + resp.output_versions], dtype=torch.int32),
            "rewards": torch.tensor([1.0]),
        }


def test_rollout_batch_through_workflow_executor(tiny, vision_prompt):
    model, processor = tiny
    config = InferenceEngineConfig(
        consumer_batch_size=4, max_concurrent_rollouts=4, check_trajectory_format=True
    )
    data = []
    for i in range(3):
        p = vision_prompt(seed=i)
        data.append({"input_ids": p["input_ids"], "mm": p["mm"]})
    eng = LocalInferenceEngine(model, processor).initialize(config)
    try:
        eng.set_version(2)
        trajs = eng.rollout_batch(data, workflow=OneTurn(), group_size=2)
    finally:
        eng.destroy()
    assert len(trajs) == 3
    for traj, item in zip(trajs, data, strict=True):
        assert traj["input_ids"].shape == (2, len(item["input_ids"]) + 6)
        assert (traj["versions"][:, -6:] == 2).all()
    assert eng.stats()["prefills"] == 6


def test_offload_halts_generation_until_onload(tiny, text_prompt):
    model, processor = tiny
    with LocalInferenceEngine(model, processor) as eng:

        async def run():
            eng.offload()
            task = asyncio.create_task(
                eng.agenerate(
                    ModelRequest(
                        input_ids=text_prompt(),
                        gconfig=GenerationHyperparameters(max_new_tokens=3, min_new_tokens=3),
                    )
                )
            )
            for _ in range(20):
                await asyncio.sleep(0.005)
            before = eng.stats().get("tokens", 0)
            eng.onload()
            return before, await task

        before, resp = asyncio.run(run())
    assert before == 0 and resp.output_len == 3


def test_destroy_fails_waiting_requests(tiny, text_prompt):
    model, processor = tiny
    eng = LocalInferenceEngine(model, processor).initialize()

    async def run():
        eng.pause_generation()
        task = asyncio.create_task(eng.agenerate(ModelRequest(input_ids=text_prompt())))
        await asyncio.sleep(0.01)
        eng.destroy()
        try:
            await task
        except RuntimeError as e:
            return str(e)

    assert "destroyed" in asyncio.run(run())
