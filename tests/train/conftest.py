"""One AReaL ``FSDPPPOActor`` (world size 1, gloo, CPU) and vision trajectories for the train tests.

The actor is built once per session: ``torch.distributed`` can be initialised once per process.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

TINY = "assets/tiny-qwen2vl"
TEMPERATURE = 0.7
EXPERIMENT, TRIAL = "vlrollout-train-tests", "t0"


@pytest.fixture(scope="session")
def name_resolve_root(tmp_path_factory):
    from areal.api.cli_args import NameResolveConfig
    from areal.utils import name_resolve

    root = tmp_path_factory.mktemp("name_resolve")
    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=str(root)))
    return root


@pytest.fixture(scope="session")
def actor(name_resolve_root):
    from areal.api.cli_args import MicroBatchSpec, OptimizerConfig, PPOActorConfig
    from areal.api.io_struct import FinetuneSpec

    from vlrollout.train.actor import build_actor

    torch.set_num_threads(1)
    cfg = PPOActorConfig(
        experiment_name=EXPERIMENT,
        trial_name=TRIAL,
        path=TINY,
        temperature=TEMPERATURE,
        optimizer=OptimizerConfig(lr=3e-3, warmup_steps_proportion=0.0),
        mb_spec=MicroBatchSpec(max_tokens_per_mb=100_000),
        kl_ctl=0.0,
    )
    actor = build_actor(
        cfg, FinetuneSpec(total_train_epochs=1, dataset_size=64, train_batch_size=32)
    )
    yield actor
    actor.destroy()


@pytest.fixture(scope="session")
def engine(name_resolve_root):
    from vlrollout.engine.local import LocalInferenceEngine

    eng = LocalInferenceEngine.from_pretrained(TINY, dtype=torch.float32, seed=0)
    eng.initialize()
    eng.configure_disk_updates(EXPERIMENT, TRIAL, timeout_s=120)
    yield eng
    eng.destroy()


def rollout(engine, items, max_new_tokens: int = 24):
    """One episode per item with our vision workflow and the tiny tasks' reward, whose CIDEr-D
    corpus is the captions of a fixed synthetic set (the items may hold one caption, or copies
    of one, which weigh no n-gram)."""
    from areal.api.cli_args import GenerationHyperparameters

    from vlrollout.tiny.rewards import shapes_task_reward
    from vlrollout.tiny.synthetic import generate_items
    from vlrollout.workflows import VisionRLVRWorkflow

    gconfig = GenerationHyperparameters(max_new_tokens=max_new_tokens, temperature=TEMPERATURE)
    reward = shapes_task_reward(generate_items("mix", 24, seed=101))
    wf = VisionRLVRWorkflow(reward, gconfig, engine.tokenizer, engine.processor)

    async def run():
        return await asyncio.gather(*(wf.arun_episode(engine, it) for it in items))

    trajs = asyncio.run(run())
    assert all(t is not None for t in trajs)
    return trajs


def max_logp_gap(trajs, logps) -> float:
    """Largest |trainer - rollout| logprob over generated tokens.

    AReaL's ``compute_logp`` returns, at position i, the logprob of token i+1; the rollout's
    ``logprobs`` sit at the token's own position.
    """
    worst = 0.0
    for traj, lp in zip(trajs, logps, strict=True):
        gen = traj["loss_mask"][0].bool()
        shifted = torch.roll(gen, -1)
        worst = max(worst, (lp.flatten()[shifted] - traj["logprobs"][0][gen]).abs().max().item())
    return worst
