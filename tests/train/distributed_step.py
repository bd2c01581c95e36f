"""One GRPO step of AReaL's ``FSDPPPOActor`` on a fixed batch; run under torchrun (any world size).

Each rank takes its share of the saved groups (contiguous, as AReaL's
``areal/infra/dist_rollout.py`` redistributes whole trajectories), runs ``compute_logp``,
``compute_advantages`` and ``ppo_update``, and rank 0 saves the full (all-gathered) gradients,
AReaL's scalar stats and the generated-token logprob gap to ``OUT``.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \
        tests/train/distributed_step.py BATCH.pt OUT.pt
"""

from __future__ import annotations

import os
import sys


def main(batch_path: str, out_path: str) -> None:
    import torch

    torch.set_num_threads(1)
    from areal.api.cli_args import MicroBatchSpec, NormConfig, OptimizerConfig, PPOActorConfig
    from areal.api.io_struct import FinetuneSpec

    from vlrollout.train.actor import build_actor
    from vlrollout.train.batch import compute_advantages

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    groups = torch.load(batch_path, weights_only=False)
    per = len(groups) // world
    mine = groups[rank * per : (rank + 1) * per]
    group_size = int(groups[0]["input_ids"].shape[0])
    cfg = PPOActorConfig(
        experiment_name="ws-compare",
        trial_name=f"ws{world}",
        backend=f"fsdp:d{world}",
        path="assets/tiny-qwen2vl",
        temperature=0.7,
        optimizer=OptimizerConfig(lr=1e-3, warmup_steps_proportion=0.0),
        mb_spec=MicroBatchSpec(max_tokens_per_mb=100_000),
        kl_ctl=0.0,
        # One optimizer step over the whole batch: with several minibatches, world size 2 would
        # group different sequences into each step than world size 1.
        ppo_n_minibatches=1,
        reward_norm=NormConfig(mean_level="group", std_level="group", group_size=group_size),
        adv_norm=None,
    )
    actor = build_actor(cfg, FinetuneSpec(1, len(groups), len(groups)))
    logps = actor.compute_logp(mine)
    gap = 0.0
    for g, lp in zip(mine, logps, strict=True):
        m = g["loss_mask"].bool()
        gap = max(gap, (lp[torch.roll(m, -1, dims=-1)] - g["logprobs"][m]).abs().max().item())
    adv = compute_advantages(actor, mine)
    actor.ppo_update(adv)
    stats = actor.export_stats()
    grads = {
        n: p.grad.full_tensor().detach().clone()
        for n, p in actor.model.named_parameters()
        if p.grad is not None
    }
    weights = {n: p.full_tensor().detach().clone() for n, p in actor.model.named_parameters()}
    gap_t = torch.tensor([gap])
    torch.distributed.all_reduce(gap_t, op=torch.distributed.ReduceOp.MAX)
    if rank == 0:
        torch.save(
            {"grads": grads, "weights": weights, "stats": stats, "logp_gap": gap_t.item()},
            out_path,
        )
    actor.destroy()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
