"""The trainer's one-time set-up (:func:`vlrollout.train.warmup.warm_up`) runs before the first
update and changes nothing a run computes: the weights are bit for bit what they were, the
optimizer is as a new one (Adam's state at its initial zeros, the learning rates restored, no
gradient left), torch's generator and thread count are as they were, and two PPO updates after
it give bit for bit the weights that two updates without it give. Its seconds reach
``metrics.jsonl`` as ``time/setup`` (checked by the resumed asynchronous run in
``test_asynchronous.py``)."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.train.conftest import rollout
from vlrollout.train.batch import compute_advantages
from vlrollout.train.warmup import warm_up, warm_up_batch

GROUP = 2


def _local(t: torch.Tensor) -> torch.Tensor:
    return (t.to_local() if hasattr(t, "to_local") else t).detach().clone()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, so that -0.0 and 0.0 (equal as numbers) differ."""
    return _local(t).contiguous().view(torch.uint8)


@pytest.fixture(scope="module")
def items():
    from vlrollout.tiny.synthetic import generate_items

    return generate_items("mix", 4, seed=31)


@pytest.fixture(scope="module")
def batch(engine, items):
    from areal.api.cli_args import GenerationHyperparameters

    from vlrollout.tiny.rewards import shapes_task_reward
    from vlrollout.workflows import VisionRLVRWorkflow

    gconfig = GenerationHyperparameters(max_new_tokens=6)
    reward = shapes_task_reward(items)
    wf = VisionRLVRWorkflow(reward, gconfig, engine.tokenizer, engine.processor)
    return warm_up_batch(wf.ctx.preprocessor, items, groups=2, group_size=GROUP, new_tokens=6)


@pytest.fixture
def restored(actor):
    """The shared actor's weights, optimizer state and learning rates put back after the test."""
    optimizer = actor.optimizer
    saved = copy.deepcopy(optimizer.state_dict())
    rates = [g["lr"] for g in optimizer.param_groups]
    weights = {n: _local(p) for n, p in actor.model.named_parameters()}
    yield weights
    _put_back(actor, weights)
    optimizer.load_state_dict(saved)
    for g, lr in zip(optimizer.param_groups, rates, strict=True):
        g["lr"] = lr


def _put_back(actor, weights: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for n, p in actor.model.named_parameters():
            (p.to_local() if hasattr(p, "to_local") else p).copy_(weights[n])


def test_the_batch_has_a_steps_shape(batch):
    assert len(batch) == 2
    for group in batch:
        assert group["input_ids"].shape[0] == GROUP
        assert len(group["multi_modal_input"]) == GROUP
        assert int(group["loss_mask"].sum()) == GROUP * 6


def test_the_warm_up_leaves_weights_and_a_new_optimizer_state(actor, batch, restored):
    optimizer = actor.optimizer
    for g in optimizer.param_groups:
        g["lr"] = 1e-2  # were the warm-up to step with it, AdamW's decay alone would move weights
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    version = actor.get_version()
    seconds = warm_up(actor, batch)
    after = dict(actor.model.named_parameters())
    assert all(torch.equal(_bits(after[n]), restored[n].view(torch.uint8)) for n in restored)
    assert [g["lr"] for g in optimizer.param_groups] == [1e-2] * len(optimizer.param_groups)
    trainable = [p for p in actor.model.parameters() if p.requires_grad]
    assert all(p.grad is None for p in trainable)
    states = [optimizer.state[p] for p in trainable]
    assert states and all({"step", "exp_avg", "exp_avg_sq"} <= set(s) for s in states)
    assert all(float(_local(v).abs().max()) == 0.0 for s in states for v in s.values())
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.get_num_threads() == threads
    assert actor.get_version() == version
    assert seconds > 0


def _two_updates(actor, trajs, weights, *, warm: list | None) -> dict[str, torch.Tensor]:
    """The weights after two PPO updates on ``trajs`` from ``weights`` and a new optimizer
    state, with the warm-up on ``warm`` first when given."""
    _put_back(actor, weights)
    actor.optimizer.state.clear()  # a new optimizer's state
    if warm is not None:
        warm_up(actor, warm)
    for _ in range(2):
        actor.ppo_update(compute_advantages(actor, trajs))
    return {n: _bits(p) for n, p in actor.model.named_parameters()}


def test_two_updates_after_the_warm_up_give_the_same_weights(actor, engine, items, batch, restored):
    trajs = rollout(engine, items, max_new_tokens=6)
    assert len({float(t["rewards"]) for t in trajs}) > 1  # the updates move the weights
    plain = _two_updates(actor, trajs, restored, warm=None)
    assert any(not torch.equal(plain[n], restored[n].view(torch.uint8)) for n in plain)
    again = _two_updates(actor, trajs, restored, warm=None)
    assert all(torch.equal(plain[n], again[n]) for n in plain)  # the comparison is exact
    warmed = _two_updates(actor, trajs, restored, warm=batch)
    assert all(torch.equal(plain[n], warmed[n]) for n in plain)
