"""Dynamic sampling on a fake rollout: which groups are kept, how the batch is topped up, what is
counted."""

from __future__ import annotations

import pytest
import torch

from vlrollout.ledger import EpisodeLedger, NothingAccepted
from vlrollout.train.dynamic_sampling import (
    admit_top_up_rounds,
    merge_outcomes,
    reward_spread,
    rollout_step_with_spread,
    rollout_with_spread,
    scale_short_batch,
    top_up_items,
)


class FakeRollout:
    """An item is its group's rewards; an item ``None`` is an item whose episodes were all
    rejected (no group comes back). Records each call's items."""

    def __init__(self) -> None:
        self.calls: list[list] = []

    def __call__(self, items):
        self.calls.append(list(items))
        groups = [
            {"rewards": torch.tensor(r, dtype=torch.float32), "item": r}
            for r in items
            if r is not None
        ]
        rejected = sum(r is None for r in items)
        outcome = {
            "submitted": len(items) * 2,
            "accepted": len(groups) * 2,
            "rejected": rejected * 2,
            "rejected_by_reason": {"no_box": rejected * 2} if rejected else {},
            "rejections": [{"reason": "no_box"}] * rejected,
        }
        return groups, outcome


def pool(*rewards):
    """``more_items`` over a fixed sequence; records the sizes asked for."""
    it = iter(rewards)
    asked: list[int] = []

    def more(n: int):
        asked.append(n)
        return [next(it) for _ in range(n)]

    more.asked = asked  # type: ignore[attr-defined]
    return more


SPREAD, FLAT = [0.0, 1.0], [0.5, 0.5]


def test_all_groups_with_spread_take_one_round():
    rollout = FakeRollout()
    more = pool()
    out = rollout_with_spread(rollout, [SPREAD, [0.2, 0.3]], more, batch_size=2, max_rounds=4)
    assert (out.kept, out.dropped, out.surplus, out.rounds, out.items) == (2, 0, 0, 1, 2)
    assert [g["item"] for g in out.groups] == [SPREAD, [0.2, 0.3]]
    assert more.asked == [] and len(rollout.calls) == 1


def test_all_equal_groups_are_dropped_and_the_batch_topped_up_in_order():
    rollout = FakeRollout()
    a, b, c = [0.0, 0.1], [0.0, 0.2], [0.0, 0.3]
    more = pool(FLAT, a, b, c, [0.0, 0.4])
    out = rollout_with_spread(rollout, [FLAT, a, FLAT, FLAT], more, batch_size=4, max_rounds=5)
    # round 1 keeps 1 of 4 (share 1/4): 3 missing / (1/4) = 12 items, capped at batch_size 4
    assert more.asked == [4]
    assert [g["item"] for g in out.groups] == [a, a, b, c]
    assert (out.kept, out.dropped, out.surplus, out.rounds, out.items) == (4, 4, 0, 2, 8)
    assert out.metrics()["dynamic/dropped_frac"] == pytest.approx(4 / 8)


def test_surplus_groups_are_counted_and_left_out():
    rollout = FakeRollout()
    more = pool(SPREAD, SPREAD, SPREAD)
    out = rollout_with_spread(rollout, [FLAT, SPREAD], more, batch_size=2, max_rounds=3)
    # share 1/2: 1 missing / (1/2) = 2 items; both have spread, one is beyond the batch
    assert more.asked == [2]
    assert (out.kept, out.dropped, out.surplus, len(out.groups)) == (2, 1, 1, 2)


def test_the_round_limit_leaves_a_short_batch():
    rollout = FakeRollout()
    more = pool(FLAT, FLAT, FLAT, FLAT, FLAT, FLAT)
    out = rollout_with_spread(rollout, [SPREAD, FLAT, FLAT], more, batch_size=3, max_rounds=2)
    assert (out.kept, out.rounds, len(out.groups)) == (1, 2, 1)
    assert out.groups[0]["item"] == SPREAD


def test_no_group_with_spread_returns_the_first_round_with_kept_zero():
    rollout = FakeRollout()
    more = pool([1.0, 1.0], [1.0, 1.0])
    out = rollout_with_spread(rollout, [FLAT, [0.0, 0.0]], more, batch_size=2, max_rounds=2)
    assert out.kept == 0 and out.dropped == 4
    assert [g["item"] for g in out.groups] == [FLAT, [0.0, 0.0]]
    # nothing kept yet: the next round asks for the whole batch
    assert more.asked == [2]


def test_max_rounds_one_filters_without_topping_up():
    more = pool()
    out = rollout_with_spread(FakeRollout(), [FLAT, SPREAD], more, batch_size=2, max_rounds=1)
    assert (out.kept, out.dropped, out.rounds, more.asked) == (1, 1, 1, [])


def test_min_spread_is_a_strict_threshold():
    out = rollout_with_spread(
        FakeRollout(), [[0.0, 0.25], [0.0, 0.5]], pool(), 2, 1, min_spread=0.25
    )
    assert [g["item"] for g in out.groups] == [[0.0, 0.5]]


def test_rejected_items_are_summed_into_the_outcome():
    more = pool(None, SPREAD)
    out = rollout_with_spread(FakeRollout(), [SPREAD, None], more, batch_size=2, max_rounds=3)
    # round 2 asks for 1 missing / share 1/1 = 1 item, which is all rejected; round 3 gets one
    assert more.asked == [1, 1]
    assert (out.kept, out.rounds, out.items) == (2, 3, 4)
    assert out.outcome["submitted"] == 8 and out.outcome["rejected"] == 4
    assert out.outcome["rejected_by_reason"] == {"no_box": 4}
    assert len(out.outcome["rejections"]) == 2


def test_reward_spread_and_bad_arguments():
    assert reward_spread({"rewards": torch.tensor([[0.25], [1.0]])}) == 0.75
    with pytest.raises(ValueError, match="empty"):
        reward_spread({"rewards": torch.tensor([])})
    with pytest.raises(ValueError, match="batch_size and max_rounds"):
        rollout_with_spread(FakeRollout(), [], pool(), 0, 1)
    with pytest.raises(ValueError, match="min_spread"):
        rollout_with_spread(FakeRollout(), [], pool(), 1, 1, min_spread=-1)
    assert merge_outcomes([])["submitted"] == 0


def test_top_up_items_cover_the_items_before_repeating_and_depend_on_seed_and_step():
    items = [{"id": i} for i in range(6)]
    more = top_up_items(items, seed=3, step=7)
    first = more(4) + more(2)
    assert sorted(it["id"] for it in first) == list(range(6))
    assert len(more(6)) == 6  # a fresh order after all were drawn
    again = top_up_items(items, seed=3, step=7)
    assert again(6) == first
    others = [top_up_items(items, seed=3, step=s)(6) for s in range(8, 12)]
    assert any(o != first for o in others)
    with pytest.raises(ValueError, match="at least one item"):
        top_up_items([], seed=0, step=0)


class FakeActor:
    """``rollout_batch`` as AReaL's: one group per item, here the item's ``rewards``; an item
    with ``rewards`` None has all its episodes rejected (recorded in the workflow's ledger)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def rollout_batch(self, data, workflow, group_size):
        self.calls.append([it["id"] for it in data])
        groups = []
        for it in data:
            if it["rewards"] is None:
                for _ in range(group_size):
                    workflow.ledger.reject(it["id"], "no_box", "nothing parsed")
                continue
            for _ in range(group_size):
                workflow.ledger.accept()
            groups.append({"rewards": torch.tensor(it["rewards"]), "id": it["id"]})
        return groups


class FakeWorkflow:
    def __init__(self) -> None:
        self.ledger = EpisodeLedger()


def test_rollout_step_with_spread_tops_up_from_the_training_items():
    train = [{"id": f"t{i}", "rewards": [0.0, float(i)]} for i in range(1, 9)]
    data = [{"id": "flat", "rewards": [1.0, 1.0]}, {"id": "lost", "rewards": None}]
    actor = FakeActor()
    groups, outcome, metrics = rollout_step_with_spread(
        actor, FakeWorkflow(), data, train, group_size=2, seed=0, step=4, max_rounds=3
    )
    # nothing kept in round 1: the top-up asks for the whole batch (2 items) from train
    assert actor.calls[0] == ["flat", "lost"] and len(actor.calls) == 2
    assert [g["id"] for g in groups] == actor.calls[1]
    assert actor.calls[1] == [it["id"] for it in top_up_items(train, 0, 4)(2)]
    assert outcome["submitted"] == 8 and outcome["rejected"] == 2
    assert metrics["dynamic/kept"] == 2 and metrics["dynamic/dropped"] == 1
    assert metrics["dynamic/rounds"] == 2


def test_rollout_step_with_spread_stops_when_a_round_accepts_nothing():
    data = [{"id": "lost", "rewards": None}]
    with pytest.raises(NothingAccepted):
        rollout_step_with_spread(
            FakeActor(), FakeWorkflow(), data, data, group_size=2, seed=0, step=0, max_rounds=2
        )


def test_every_top_up_round_is_admitted_by_the_engine():
    from types import SimpleNamespace

    rollout = SimpleNamespace(consumer_batch_size=16)
    admit_top_up_rounds(rollout, batch_size=16, max_rounds=3)
    assert rollout.consumer_batch_size == 48
    larger = SimpleNamespace(consumer_batch_size=64)
    admit_top_up_rounds(larger, batch_size=16, max_rounds=3)
    assert larger.consumer_batch_size == 64  # never lowered


def test_the_sampled_reward_of_every_episode_is_kept_beside_the_filtered_batch():
    """The kept groups' mean says little of the policy (filtering moves a 0/1 reward toward 0.5):
    the mean over every episode of every round is recorded too."""
    rollout = FakeRollout()
    out = rollout_with_spread(
        rollout,
        [[1.0, 1.0], [0.0, 1.0], [1.0, 1.0]],
        pool([0.0, 1.0], [1.0, 1.0]),
        batch_size=2,
        max_rounds=2,
    )
    assert [g["item"] for g in out.groups] == [[0.0, 1.0], [0.0, 1.0]]
    assert (out.kept, out.dropped) == (2, 3)
    assert out.metrics()["dynamic/reward_mean_all"] == pytest.approx(8 / 10)


def test_the_kept_groups_do_not_depend_on_the_order_the_rollout_returns_them():
    """AReaL returns groups as they finish: the same episodes in another order must give the same
    batch, surplus included (a deterministic rerun trained on other groups before)."""

    def group(k: int, rewards: list[float]) -> dict:
        return {"input_ids": torch.tensor([[k, k + 1]] * 2), "rewards": torch.tensor(rewards)}

    groups = [group(k, [0.0, float(k)]) for k in range(1, 6)]

    def kept(order: list[int]) -> list[int]:
        def rollout(items):
            return [groups[i] for i in order], {"submitted": len(items)}

        out = rollout_with_spread(rollout, list(range(5)), pool(), batch_size=3, max_rounds=1)
        assert (out.kept, out.surplus) == (3, 2)
        return [int(g["input_ids"][0, 0]) for g in out.groups]

    assert kept([0, 1, 2, 3, 4]) == kept([4, 2, 0, 3, 1]) == kept([3, 4, 1, 0, 2])


def _advantages(*rows):
    return [{"advantages": torch.tensor([r]), "rewards": torch.tensor([1.0])} for r in rows]


def test_a_short_batch_is_scaled_by_the_share_of_groups_kept():
    batch = _advantages([1.0, -2.0], [0.5, 0.0])
    out, scale = scale_short_batch(batch, kept=2, batch_size=8)
    assert scale == 0.25
    assert [t["advantages"].tolist() for t in out] == [[[0.25, -0.5]], [[0.125, 0.0]]]
    assert [t["rewards"] for t in out] == [t["rewards"] for t in batch]  # the rest as it was
    assert batch[0]["advantages"].tolist() == [[1.0, -2.0]]  # the given dicts unchanged


def test_a_full_batch_and_a_batch_without_spread_are_not_scaled():
    batch = _advantages([1.0, -2.0])
    assert scale_short_batch(batch, kept=4, batch_size=4) == (batch, 1.0)
    # kept 0: the first round's groups, all advantages 0 already
    assert scale_short_batch(batch, kept=0, batch_size=4) == (batch, 1.0)
    with pytest.raises(ValueError, match="batch_size"):
        scale_short_batch(batch, kept=0, batch_size=0)


def test_areals_ppo_loss_scales_with_the_advantages():
    """The scale is the loss's: AReaL's PPO loss is linear in the advantages, clipped ratios
    included (the premise of ``scale_short_batch``)."""
    from areal.utils.functional import ppo_actor_loss_fn

    torch.manual_seed(0)
    old = torch.randn(64)
    new = old + 0.5 * torch.randn(64)  # ratios well outside 1 +- 0.2: some clipped
    adv = torch.randn(64)
    mask = torch.rand(64) > 0.2

    def loss(a):
        out, _ = ppo_actor_loss_fn(
            logprobs=new,
            proximal_logprobs=old,
            old_logprobs=old,
            advantages=a,
            eps_clip=0.2,
            loss_mask=mask,
        )
        return out

    assert torch.allclose(loss(0.25 * adv), 0.25 * loss(adv), rtol=1e-5, atol=1e-7)


class RaisingRollout(FakeRollout):
    """As ``rollout_step`` does: a round with no accepted episode raises ``NothingAccepted``."""

    def __call__(self, items):
        groups, outcome = super().__call__(items)
        if not groups:
            raise NothingAccepted("training step 1", outcome["submitted"], [], outcome=outcome)
        return groups, outcome


def test_a_top_up_round_wholly_rejected_adds_no_group_and_the_step_trains_what_it_kept():
    """The first round kept a group; a top-up of only rejected items had stopped the run saying
    no episode of the step was accepted."""
    more = pool(*[None] * 4)
    out = rollout_with_spread(RaisingRollout(), [SPREAD, FLAT], more, batch_size=2, max_rounds=3)
    assert more.asked == [2, 2]  # 1 missing over a share of 1/2 kept
    assert (out.kept, out.rounds, out.items) == (1, 3, 6)
    assert out.outcome["accepted"] == 4 and out.outcome["rejected"] == 8
    with pytest.raises(NothingAccepted):  # a first round with nothing accepted still stops
        rollout_with_spread(RaisingRollout(), [None, None], more, batch_size=2, max_rounds=3)
