"""Trainer logprobs of one tiny model family against its rollout; run as a subprocess (each
family needs its own ``torch.distributed`` and ``FSDPPPOActor``).

Rolls out the family items of :mod:`vlrollout.testing.family_items` (twice each) on the local
engine, builds AReaL's actor on the same weights, and prints one JSON line: the largest
trainer-vs-rollout logprob gap on the packed batch with the packing fix (``fixed``) and with
AReaL's own ``_prepare_mb_list`` (``unfixed``), whether ``ppo_update`` ran, or the ``error`` the
actor raised.

    python tests/train/family_logp.py qwen2_5_vl
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(family: str) -> None:
    import torch

    torch.set_num_threads(1)
    from areal.api.cli_args import (
        GenerationHyperparameters,
        MicroBatchSpec,
        NameResolveConfig,
        OptimizerConfig,
        PPOActorConfig,
    )
    from areal.api.io_struct import FinetuneSpec
    from areal.utils import name_resolve

    from tests.train.conftest import TEMPERATURE, max_logp_gap
    from vlrollout.engine.local import LocalInferenceEngine
    from vlrollout.testing.family_items import ITEMS
    from vlrollout.testing.tiny_families import save_tiny_vlm, tiny_vlm
    from vlrollout.train.actor import build_actor
    from vlrollout.train.batch import compute_advantages
    from vlrollout.workflows import VisionRLVRWorkflow

    tmp = Path(tempfile.mkdtemp())
    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=str(tmp / "nr")))
    path = save_tiny_vlm(family, tmp / "model")
    model, processor = tiny_vlm(family, seed=0)
    engine = LocalInferenceEngine(model, processor, seed=0).initialize()
    items = [{"id": f"{k}{i}", "answer": "x", **v} for i in range(2) for k, v in ITEMS.items()]
    gconfig = GenerationHyperparameters(max_new_tokens=8, min_new_tokens=4, temperature=TEMPERATURE)
    wf = VisionRLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer", gconfig, processor.tokenizer, processor
    )

    async def rollout():
        return await asyncio.gather(*(wf.arun_episode(engine, it) for it in items))

    trajs = asyncio.run(rollout())
    engine.destroy()
    result: dict = {"family": family, "rejected": sum(t is None for t in trajs)}
    trajs = [t for t in trajs if t is not None]
    cfg = PPOActorConfig(
        experiment_name="family-logp",
        trial_name="t0",
        path=str(path),
        temperature=TEMPERATURE,
        optimizer=OptimizerConfig(lr=1e-3, warmup_steps_proportion=0.0),
        mb_spec=MicroBatchSpec(max_tokens_per_mb=100_000),
        kl_ctl=0.0,
    )
    actor = build_actor(
        cfg, FinetuneSpec(total_train_epochs=1, dataset_size=16, train_batch_size=8)
    )
    try:
        result["fixed"] = max_logp_gap(trajs, actor.compute_logp(trajs))
        fixed = actor._prepare_mb_list
        actor._prepare_mb_list = fixed.__wrapped__  # AReaL's own
        try:
            result["unfixed"] = max_logp_gap(trajs, actor.compute_logp(trajs))
        finally:
            actor._prepare_mb_list = fixed
        for i, traj in enumerate(trajs):
            traj["rewards"] = torch.tensor([float(i % 2)])
        actor.ppo_update(compute_advantages(actor, trajs))
        result["ppo_update"] = True
    except Exception as e:  # reported to the test, which decides
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        actor.destroy()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
