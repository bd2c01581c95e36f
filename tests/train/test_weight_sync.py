"""Weights reach the engine through AReaL's own ``actor.update_weights`` (disk path).

After one GRPO update the engine's next rollout must come from the new weights (its logprobs
equal the trainer's recomputation) and every new token must carry the new version.
"""

from __future__ import annotations

import torch

from tests.train.conftest import EXPERIMENT, TRIAL, max_logp_gap, rollout
from vlrollout.train.batch import compute_advantages

ATOL = 1e-4


def test_update_weights_reaches_engine(actor, engine, tmp_path):
    from areal.api.io_struct import WeightUpdateMeta

    from vlrollout.tiny.synthetic import generate_items

    items = generate_items("mix", 12, seed=21)
    before = rollout(engine, items, max_new_tokens=12)
    assert max_logp_gap(before, actor.compute_logp(before)) <= ATOL

    adv = compute_advantages(actor, before)
    assert all(
        a["multi_modal_input"] is b["multi_modal_input"] for a, b in zip(adv, before, strict=True)
    )
    actor.ppo_update(adv)

    meta = WeightUpdateMeta.from_disk(EXPERIMENT, TRIAL, file_root=str(tmp_path))
    version = actor.get_version() + 1
    actor.connect_engine(engine, meta)
    actor.update_weights(meta.with_version(version))
    actor.set_version(version)
    engine.set_version(version)

    after = rollout(engine, items, max_new_tokens=12)
    assert all(t["versions"][0][t["loss_mask"][0].bool()].eq(version).all() for t in after)
    assert max_logp_gap(after, actor.compute_logp(after)) <= ATOL
    # The weights changed: the old rollout no longer matches the trainer.
    assert max_logp_gap(before, actor.compute_logp(before)) > 1e-3
    torch.testing.assert_close(
        engine.model.lm_head.weight, actor.model.lm_head.weight.full_tensor(), atol=1e-6, rtol=0
    )
