"""A deterministic run resumed from a checkpoint repeats the uninterrupted run, also at items that
come round again in a later epoch (the engine's draw counts are saved with the checkpoint)."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from tests.train.procs import SHIPPED_MODEL, run_side_by_side, run_train

# Two items in batches of two: every step is an epoch, so step 2 draws step 1's prompts again.
EPOCH_PER_STEP = (
    SHIPPED_MODEL,
    "train_dataset.batch_size=2",
    "gconfig.n_samples=2",
    "gconfig.max_new_tokens=8",
    "gconfig.temperature=1.0",
    "vlrollout.train_items=2",
    "vlrollout.eval_items=2",
    "vlrollout.eval_every=0",
    "vlrollout.log_rollouts=0",
    "vlrollout.engine.deterministic=true",
    "vlrollout.progress=false",
)

COMPARED = ("reward_mean", "reward_std", "entropy", "ppo_approx_kl", "gen_tokens")


def _last_step(out):
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


def _weights(out, step):
    (path,) = (out / "checkpoints" / f"step_{step}").glob("*.safetensors")
    return load_file(path)


@pytest.mark.slow
def test_a_resumed_deterministic_run_draws_the_next_epoch_as_the_uninterrupted_run(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    first = run_side_by_side(
        [
            lambda: run_train(whole, *EPOCH_PER_STEP, "total_train_steps=2"),
            lambda: run_train(cut, *EPOCH_PER_STEP, "total_train_steps=1"),
        ]
    )
    for f in first:
        f.result()
    run_train(cut, *EPOCH_PER_STEP, "total_train_steps=2")  # resumes after step 1

    a, b = _last_step(whole), _last_step(cut)
    assert a["step"] == b["step"] == 2
    assert {k: a.get(k) for k in COMPARED} == {k: b.get(k) for k in COMPARED}
    wa, wb = _weights(whole, 2), _weights(cut, 2)
    assert wa.keys() == wb.keys()
    assert all(wa[k].equal(wb[k]) for k in wa)


def test_a_steps_group_order_does_not_depend_on_earlier_draws_of_the_global_random(monkeypatch):
    """AReaL's ``rollout_batch`` shuffles with Python's global ``random``, which other code draws
    from as the moment dictates (free ports): a resumed run had summed another order."""
    import random
    from types import SimpleNamespace

    from vlrollout.train import step as step_module

    def shuffled(actor, workflow, data, group_size, step):
        order = list(range(8))
        random.shuffle(order)  # what AReaL's wait does
        return order, {}

    monkeypatch.setattr(step_module, "rollout_step", shuffled)
    monkeypatch.setattr(step_module, "batch_items", lambda items, step, size, seed: items)
    cfg = SimpleNamespace(
        seed=1,
        train_dataset=SimpleNamespace(batch_size=8),
        gconfig=SimpleNamespace(n_samples=1),
        vlrollout=SimpleNamespace(dynamic_sampling=False),
    )
    s = SimpleNamespace(
        cfg=cfg,
        rollouts=None,
        train_items=[],
        ranks=SimpleNamespace(share=lambda x: x),
        source=None,
        workflow=None,
    )
    orders = []
    for earlier_draws in (0, 3):
        for _ in range(earlier_draws):
            random.random()
        orders.append(step_module.next_batch(s, 1)[0])
    assert orders[0] == orders[1]
