"""AReaL's FSDP actor on video trajectories of one tiny family; run as a subprocess (each family
needs its own ``torch.distributed`` and ``FSDPPPOActor``), like ``family_logp.py`` for images.

Rolls out three prompts (a video, an image + a video, another video; twice each) on the local
engine, builds AReaL's actor on the same weights, and prints one JSON line: the largest
trainer-vs-rollout logprob gap on the packed batch with the packing fix (``fixed``), the gap or
the error with AReaL's own ``_prepare_mb_list`` (``unfixed``), and how far ``ppo_update``'s
gradient is from :func:`family_logp.reference_gradients` (each sequence forwarded alone by
transformers, its video grids in the form its ``get_rope_index`` reads).

    python tests/train/video_logp.py qwen2_5_vl
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def rollouts(family: str) -> list[dict]:
    """Six trajectories of the family's tiny model (three video prompts, two samples each)."""
    from areal.api.cli_args import GenerationHyperparameters
    from areal.api.io_struct import ModelRequest

    from tests.train.conftest import TEMPERATURE
    from tests.train.video_inputs import IMAGE_BEFORE_VIDEO_MISBUILT, video_prompt, vision_of
    from vlrollout.engine.local import LocalInferenceEngine
    from vlrollout.packaging import pack_single_turn
    from vlrollout.testing.tiny_families import tiny_vlm

    model, processor = tiny_vlm(family, seed=0)
    engine = LocalInferenceEngine(model, processor, seed=0).initialize()
    prompts = [
        video_prompt(processor, "What moves?", seed=1),
        video_prompt(
            processor,
            "Which came first?",
            seed=2,
            image=family not in IMAGE_BEFORE_VIDEO_MISBUILT,
        ),
        video_prompt(processor, "Where does it stop?", seed=3, n_frames=6),
    ]
    gconfig = GenerationHyperparameters(max_new_tokens=6, min_new_tokens=3, temperature=TEMPERATURE)

    async def run():
        reqs = [
            ModelRequest(
                input_ids=p["input_ids"][0].tolist(),
                metadata={"multi_modal_input": vision_of(p)},
                gconfig=gconfig,
            )
            for p in prompts
            for _ in range(2)
        ]
        return await asyncio.gather(*(engine.agenerate(r) for r in reqs))

    resps = asyncio.run(run())
    engine.destroy()
    trajs = []
    for i, resp in enumerate(resps):
        p = prompts[i // 2]
        types = p["mm_token_type_ids"][0].tolist() if "mm_token_type_ids" in p else None
        traj = pack_single_turn(
            resp.input_tokens, resp, (-1.0) ** i * (1 + i / 10), vision_of(p), types
        )
        trajs.append(traj)
    return trajs


def _reference_form(trajs: list[dict], family: str) -> list[dict]:
    """The trajectories with grids as transformers' own forward reads them (``rope_grids``)."""
    from vlrollout.families import FAMILIES, rope_grids

    if FAMILIES[family].positions != "mrope":
        return trajs
    out = []
    for t in trajs:
        mm = rope_grids(t["multi_modal_input"][0], t["mm_token_type_ids"])
        out.append({**t, "multi_modal_input": [mm]})
    return out


def main(family: str) -> None:
    import torch

    torch.set_num_threads(1)
    from areal.api.cli_args import (
        MicroBatchSpec,
        NameResolveConfig,
        OptimizerConfig,
        PPOActorConfig,
    )
    from areal.api.io_struct import FinetuneSpec
    from areal.utils import name_resolve

    from tests.train.conftest import TEMPERATURE, max_logp_gap
    from tests.train.family_logp import compare_gradients, reference_gradients
    from vlrollout.testing.tiny_families import save_tiny_vlm
    from vlrollout.train.actor import build_actor
    from vlrollout.train.batch import compute_advantages

    tmp = Path(tempfile.mkdtemp())
    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=str(tmp / "nr")))
    path = save_tiny_vlm(family, tmp / "model")
    trajs = rollouts(family)
    result: dict = {"family": family, "sequences": len(trajs)}
    cfg = PPOActorConfig(
        experiment_name="video-logp",
        trial_name="t0",
        path=str(path),
        temperature=TEMPERATURE,
        optimizer=OptimizerConfig(lr=1e-3, warmup_steps_proportion=0.0, gradient_clipping=1e9),
        mb_spec=MicroBatchSpec(max_tokens_per_mb=100_000),
        kl_ctl=0.0,
        ppo_n_minibatches=1,
    )
    actor = build_actor(cfg, FinetuneSpec(total_train_epochs=1, dataset_size=6, train_batch_size=6))
    try:
        result["fixed"] = max_logp_gap(trajs, actor.compute_logp(trajs))
        fixed = actor._prepare_mb_list
        actor._prepare_mb_list = inspect.unwrap(fixed)  # AReaL's own, every wrapper off
        try:
            result["unfixed"] = max_logp_gap(trajs, actor.compute_logp(trajs))
        except Exception as e:  # AReaL alone may fail on video
            result["unfixed"] = f"{type(e).__name__}: {e}"[:200]
        finally:
            actor._prepare_mb_list = fixed
        advantages = compute_advantages(actor, trajs)
        want = reference_gradients(family, _reference_form(trajs, family), advantages)
        actor.ppo_update(advantages)
        result["ppo_update"] = True
        got = {
            n: p.grad.full_tensor() for n, p in actor.model.named_parameters() if p.grad is not None
        }
        result.update(compare_gradients(got, want))
    except Exception as e:  # reported to the test, which decides
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        actor.destroy()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
