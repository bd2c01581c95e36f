"""The trainer's one-time set-up (:func:`vlrollout.train.actor.warm_up`) runs before the first
update and changes nothing a run computes: the weights are bit for bit what they were, and the
optimizer is as a new one (Adam's state at its initial zeros, the learning rates restored, no
gradient left). Its seconds reach ``metrics.jsonl`` as ``time/setup`` (checked by the resumed
asynchronous run in ``test_asynchronous.py``)."""

from __future__ import annotations

import copy

import torch

from vlrollout.train.actor import warm_up


def _local(t: torch.Tensor) -> torch.Tensor:
    return (t.to_local() if hasattr(t, "to_local") else t).detach().clone()


def test_the_warm_up_leaves_weights_and_a_new_optimizer_state(actor):
    optimizer = actor.optimizer
    saved = copy.deepcopy(optimizer.state_dict())  # the session's actor is shared: put it back
    rates = [g["lr"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["lr"] = 1e-2  # were the warm-up to step with it, AdamW's decay alone would move weights
    before = {n: _local(p) for n, p in actor.model.named_parameters()}
    try:
        seconds = warm_up(actor)
        after = dict(actor.model.named_parameters())
        assert all(torch.equal(before[n], _local(after[n])) for n in before)
        assert [g["lr"] for g in optimizer.param_groups] == [1e-2] * len(rates)
        trainable = [p for p in actor.model.parameters() if p.requires_grad]
        assert all(p.grad is None for p in trainable)
        states = [optimizer.state[p] for p in trainable]
        assert states and all({"step", "exp_avg", "exp_avg_sq"} <= set(s) for s in states)
        assert all(float(_local(v).abs().max()) == 0.0 for s in states for v in s.values())
        assert seconds > 0
    finally:
        optimizer.load_state_dict(saved)
        for g, lr in zip(optimizer.param_groups, rates, strict=True):
            g["lr"] = lr
