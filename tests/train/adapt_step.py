"""Two GRPO steps of AReaL's actor with LoRA and/or frozen vision parts; run as a subprocess (each
setting needs its own ``torch.distributed`` and ``FSDPPPOActor``).

Per step: rollout on the local engine, ``compute_advantages``, ``ppo_update``, AReaL's
``update_weights`` (disk) into the engine. Then a checkpoint with :func:`checkpoint.save`. Prints
one JSON line: which parameters are trainable and frozen, the largest change of each kind, the
largest gap between the engine's weights and the trainer's (merged for LoRA), grad norms, and
the checkpoint folder.

    python tests/train/adapt_step.py MODEL OUT [lora] [tower] [projector]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def full_state(actor) -> dict:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {k: v.clone() for k, v in get_model_state_dict(actor.model, options=options).items()}


def main(model: str, out: str, flags: set[str]) -> None:
    import torch

    torch.set_num_threads(1)
    from areal.api.cli_args import (
        MicroBatchSpec,
        NameResolveConfig,
        OptimizerConfig,
        PPOActorConfig,
    )
    from areal.api.io_struct import FinetuneSpec, WeightUpdateMeta
    from areal.utils import name_resolve

    from tests.train.conftest import TEMPERATURE, rollout
    from vlrollout.engine.local import LocalInferenceEngine
    from vlrollout.tiny.synthetic import generate_items
    from vlrollout.train import checkpoint
    from vlrollout.train.actor import build_actor
    from vlrollout.train.batch import compute_advantages
    from vlrollout.train.lora import lora_scalings, merge_lora
    from vlrollout.train.stats import pick

    out_dir = Path(out)
    name_resolve.reconfigure(
        NameResolveConfig(type="nfs", nfs_record_root=str(out_dir / "name_resolve"))
    )
    lora = "lora" in flags
    cfg = PPOActorConfig(
        experiment_name="adapt",
        trial_name="t",
        path=model,
        temperature=TEMPERATURE,
        optimizer=OptimizerConfig(lr=1e-2, warmup_steps_proportion=0.0, weight_decay=0.1),
        mb_spec=MicroBatchSpec(max_tokens_per_mb=100_000),
        kl_ctl=0.0,
        use_lora=lora,
        lora_rank=4,
        lora_alpha=8,
    )
    actor = build_actor(
        cfg,
        FinetuneSpec(total_train_epochs=1, dataset_size=32, train_batch_size=16),
        freeze_vision_tower="tower" in flags,
        freeze_projector="projector" in flags,
    )
    engine = LocalInferenceEngine.from_pretrained(model, dtype=torch.float32, seed=0)
    engine.initialize()
    engine.configure_disk_updates("adapt", "t", timeout_s=120)
    meta = WeightUpdateMeta.from_disk("adapt", "t", file_root=str(out_dir / "areal"))
    actor.connect_engine(engine, meta)

    trainable = sorted(n for n, p in actor.model.named_parameters() if p.requires_grad)
    # What AReaL's grad-norm clipping sees: the parameters holding a gradient at each call.
    import areal.engine.fsdp_engine as fsdp_engine

    names = {id(p): n for n, p in actor.model.named_parameters()}
    with_grad: set[str] = set()
    clip = fsdp_engine.fsdp2_clip_grad_norm

    def recording_clip(parameters, *args, **kwargs):
        parameters = list(parameters)
        with_grad.update(names[id(p)] for p in parameters if p.grad is not None)
        return clip(parameters, *args, **kwargs)

    fsdp_engine.fsdp2_clip_grad_norm = recording_clip
    before = full_state(actor)
    grad_norms = []
    for step in (1, 2):
        items = generate_items("mix", 8, seed=30 + step)
        batch = rollout(engine, [it for it in items for _ in range(2)], max_new_tokens=8)
        adv = compute_advantages(actor, batch)
        actor.ppo_update(adv)
        actor.step_lr_scheduler()
        grad_norms.append(pick(actor.export_stats(), "grad_norm"))
        actor.update_weights(meta.with_version(step))
        actor.set_version(step)
        engine.set_version(step)
    after = full_state(actor)
    served = merge_lora(after, lora_scalings(actor.model)) if lora else after
    engine_state = engine.model.state_dict()

    def change(names):
        return max((float((after[n] - before[n]).abs().max()) for n in names), default=None)

    frozen = sorted(set(before) - set(trainable))
    ckpt = checkpoint.save(actor, out_dir, 2)
    result = {
        "trainable": trainable,
        "frozen": frozen,
        "trainable_change_max": change(trainable),
        "unchanged": [n for n in trainable if torch.equal(after[n], before[n])],
        "frozen_change_max": change(frozen),
        "engine_keys_equal": sorted(served) == sorted(engine_state),
        "engine_gap": max(float((served[k] - engine_state[k]).abs().max()) for k in served),
        "grad_norms": grad_norms,
        "with_grad": sorted(with_grad),
        "checkpoint": str(ckpt.path),
    }
    torch.save(served, out_dir / "served.pt")
    engine.destroy()
    actor.destroy()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], set(sys.argv[3:]))
