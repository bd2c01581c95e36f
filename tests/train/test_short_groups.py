"""Advantages of a step where a rejected episode left a group short.

AReaL's ``GroupedRolloutWorkflow`` keeps a group's accepted episodes when some are rejected, and
its group normalisation slices the concatenated batch into runs of ``group_size`` rows: one short
group shifts every later group and leaves trailing rows with a zero standard deviation. These
tests run AReaL's own ``PPOActor.compute_advantages`` through ``vlrollout``'s wrapper.
"""

from __future__ import annotations

import pytest
import torch

from tests.records import Records
from vlrollout.train import batch
from vlrollout.train.batch import compute_advantages

GROUP = 4


def _actor(mean="group", std="group", adv_norm=None):
    from areal.api.cli_args import NormConfig, PPOActorConfig
    from areal.trainer.ppo.actor import PPOActor

    cfg = PPOActorConfig(
        reward_norm=NormConfig(mean_level=mean, std_level=std, group_size=GROUP),
        adv_norm=adv_norm,
        kl_ctl=0.0,
    )
    return PPOActor(cfg, engine=None)


def _group(rewards: list[float]) -> dict[str, torch.Tensor]:
    n, length = len(rewards), 5
    return {
        "input_ids": torch.ones(n, length, dtype=torch.long),
        "attention_mask": torch.ones(n, length, dtype=torch.bool),
        "loss_mask": torch.tensor([[0, 0, 1, 1, 1]] * n),
        "logprobs": torch.zeros(n, length),
        "versions": torch.zeros(n, length, dtype=torch.long),
        "rewards": torch.tensor(rewards, dtype=torch.float32),
    }


def _first_token_advantages(out):
    return [o["advantages"][:, 2] for o in out]


def _group_normalised(rewards: list[float]) -> torch.Tensor:
    r = torch.tensor(rewards, dtype=torch.float64)
    return ((r - r.mean()) / (r.std() + 1e-5)).float()


def test_a_short_group_is_normalised_over_its_own_episodes_and_shifts_no_other():
    rewards = [[0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 3.0], [2.0, 0.0]]
    out = compute_advantages(_actor(), [_group(r) for r in rewards])
    for got, r in zip(_first_token_advantages(out), rewards, strict=True):
        assert torch.allclose(got, _group_normalised(r), atol=1e-4), (got, r)


def test_whole_groups_give_what_areal_gives():
    rewards = [[0.0, 1.0, 0.0, 1.0], [3.0, 1.0, 0.0, 2.0]]
    ours = compute_advantages(_actor(), [_group(r) for r in rewards])
    areal = _actor().compute_advantages([_group(r) for r in rewards])
    for a, b in zip(ours, areal, strict=True):
        assert torch.equal(a["advantages"], b["advantages"])


def test_batch_level_std_with_a_short_group_trains_it_with_zero_advantage():
    """Group mean with batch sd needs whole groups in one call: the whole groups get AReaL's
    numbers over them, the short group no gradient, and the log says so."""
    rewards = [[0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 0.0, 1.0]]
    with Records(batch.logger) as warnings:
        out = compute_advantages(_actor(std="batch"), [_group(r) for r in rewards])
    whole = _actor(std="batch").compute_advantages([_group(rewards[0]), _group(rewards[2])])
    assert torch.equal(out[0]["advantages"], whole[0]["advantages"])
    assert torch.equal(out[2]["advantages"], whole[1]["advantages"])
    assert torch.count_nonzero(out[1]["advantages"]) == 0
    assert out[1]["advantages"].shape == (3, 5)
    assert "1 of 3 groups" in warnings.text and "advantage 0" in warnings.text


def test_short_groups_keep_their_rows_and_images():
    groups = [_group([0.0, 1.0, 0.0, 1.0]), _group([1.0, 0.0])]
    groups[1]["multi_modal_input"] = [{"pixel_values": torch.ones(1)}] * 2
    out = compute_advantages(_actor(), groups)
    assert [o["input_ids"].shape[0] for o in out] == [4, 2]
    assert out[1]["multi_modal_input"] is groups[1]["multi_modal_input"]


@pytest.mark.parametrize("size", [GROUP + 1])
def test_a_group_longer_than_group_size_is_normalised_over_its_own_rows(size):
    rewards = [[float(i % 2) for i in range(size)], [0.0, 2.0, 0.0, 1.0]]
    out = compute_advantages(_actor(), [_group(r) for r in rewards])
    for got, r in zip(_first_token_advantages(out), rewards, strict=True):
        assert torch.allclose(got, _group_normalised(r), atol=1e-4)
