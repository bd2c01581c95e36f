"""Trainer logprobs of one tiny model family against its rollout; run as a subprocess (each
family needs its own ``torch.distributed`` and ``FSDPPPOActor``).

Rolls out the family items of :mod:`vlrollout.testing.family_items` (twice each) on the local
engine, builds AReaL's actor on the same weights, and prints one JSON line: the largest
trainer-vs-rollout logprob gap on the packed batch with the packing fix (``fixed``) and with
AReaL's own ``_prepare_mb_list`` (``unfixed``), whether ``ppo_update`` ran and how far its
gradient is from :func:`reference_gradients` (:func:`compare_gradients`), or the ``error`` the
actor raised.

    python tests/train/family_logp.py qwen2_5_vl [llava ...]

With several families, each is checked in turn (its own actor and process group) and prints its
own line.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def reference_gradients(family: str, trajs: list, advantages: list) -> dict:
    """The gradient of AReaL's PPO objective on ``trajs`` computed the plain way: a fresh copy of
    the family's model, each sequence forwarded alone (transformers' own positions and mask),
    ``-A * exp(logp - logp_old)`` summed over the loss tokens of the batch and divided by their
    number (one micro-batch, no clipping reached: the ratio is 1 up to numerics).

    ``advantages`` is ``compute_advantages``' output: per token, aligned with the logprob of the
    next token (AReaL rolls ``loss_mask``, ``logprobs`` and ``advantages`` by one).
    """
    import torch

    from tests.train.conftest import TEMPERATURE
    from vlrollout.engine.sampling import token_logprobs
    from vlrollout.testing.tiny_families import tiny_vlm

    model, _ = tiny_vlm(family, seed=0)
    model.train()
    n_tokens = sum(int(a["loss_mask"].sum()) for a in advantages)
    for traj, adv in zip(trajs, advantages, strict=True):
        kwargs = dict(traj["multi_modal_input"][0]) if traj.get("multi_modal_input") else {}
        if "mm_token_type_ids" in traj:
            kwargs["mm_token_type_ids"] = traj["mm_token_type_ids"]
        ids = traj["input_ids"]
        logits = model(input_ids=ids, attention_mask=traj["attention_mask"], **kwargs).logits[0]
        logp = token_logprobs(logits, torch.roll(ids[0], -1), TEMPERATURE)
        mask = adv["loss_mask"][0].bool()
        ratio = torch.exp(logp - adv["logprobs"][0])
        (-(adv["advantages"][0] * ratio)[mask].sum() / n_tokens).backward()
    return {n: p.grad.detach() for n, p in model.named_parameters() if p.grad is not None}


def compare_gradients(got: dict, want: dict) -> dict:
    """``grad_names_equal``, ``grad_rel`` (relative distance of the whole gradient) and
    ``grad_worst`` (largest per-tensor ``|got - want| / max(|want|, 1e-4 |whole want|)``, and its
    tensor: a key bias's gradient is 0 in exact arithmetic, softmax ignores a shift common to
    every key, so both sides hold float noise there)."""
    import torch

    names = sorted(set(want) & set(got))
    diff = torch.sqrt(sum(((got[n] - want[n]) ** 2).sum() for n in names))
    norm = torch.sqrt(sum((want[n] ** 2).sum() for n in names))
    floor = 1e-4 * norm  # a gradient that is 0 in exact arithmetic (a key bias) is float noise
    per = {
        n: ((got[n] - want[n]).norm() / torch.maximum(want[n].norm(), floor)).item() for n in names
    }
    worst = max(per, key=per.get)
    return {
        "grad_names_equal": set(got) == set(want),
        "grad_rel": (diff / norm).item(),
        "grad_worst": [worst, per[worst]],
    }


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
    from vlrollout.compat.areal import register_vision_model
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
        # No clipping: the gradients are compared with the unclipped reference.
        optimizer=OptimizerConfig(lr=1e-3, warmup_steps_proportion=0.0, gradient_clipping=1e9),
        mb_spec=MicroBatchSpec(max_tokens_per_mb=100_000),
        kl_ctl=0.0,
        ppo_n_minibatches=1,  # one optimizer step over the batch: its gradient is compared
    )
    register_vision_model(family)  # a refused family too: the test checks why it is refused
    actor = build_actor(
        cfg, FinetuneSpec(total_train_epochs=1, dataset_size=16, train_batch_size=8)
    )
    try:
        result["fixed"] = max_logp_gap(trajs, actor.compute_logp(trajs))
        fixed = actor._prepare_mb_list
        actor._prepare_mb_list = inspect.unwrap(fixed)  # AReaL's own
        try:
            result["unfixed"] = max_logp_gap(trajs, actor.compute_logp(trajs))
        except Exception as e:  # AReaL's own batching cannot run the family at all
            result["unfixed_error"] = f"{type(e).__name__}: {e}"
        finally:
            actor._prepare_mb_list = fixed
        for i, traj in enumerate(trajs):  # distinct, non-zero: every sequence has a gradient
            traj["rewards"] = torch.tensor([(-1.0) ** i * (1.0 + i / 10)])
        advantages = compute_advantages(actor, trajs)
        want = reference_gradients(family, trajs, advantages)
        actor.ppo_update(advantages)
        result["ppo_update"] = True
        got = {
            n: p.grad.full_tensor() for n, p in actor.model.named_parameters() if p.grad is not None
        }
        result.update(compare_gradients(got, want))
    except Exception as e:  # reported to the test, which decides
        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        actor.destroy()
    print(json.dumps(result))


if __name__ == "__main__":
    for name in sys.argv[1:]:  # one after another: the imports are paid once
        main(name)
