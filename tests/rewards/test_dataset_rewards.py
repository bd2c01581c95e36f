"""Rewards built from the dataset they score (``tiny_task``) come from the rewards registry like any
other reward, and ``vlrollout run`` and ``vlrollout train`` resolve every reward the same way."""

from __future__ import annotations

import pytest

from vlrollout.rewards.registry import REWARDS, DatasetReward, get_reward, reward_options
from vlrollout.run.main import load_reward
from vlrollout.tiny.synthetic import generate_items
from vlrollout.train.rewards import build_rewards

ITEMS = [it for task in ("count", "ground", "caption") for it in generate_items(task, 2, seed=5)]


def _ground_metric(reward) -> str:
    return reward.rewards["ground"].metric


def test_tiny_task_is_a_registry_entry_with_options():
    reward = get_reward("tiny_task", items=ITEMS)
    assert sorted(reward.rewards) == ["caption", "count", "ground"]
    assert _ground_metric(reward) == "iou"
    assert _ground_metric(get_reward("tiny_task", items=ITEMS, ground_metric="giou")) == "giou"
    assert reward_options("tiny_task") == ("ground_metric",)
    assert reward_options("count") == ()
    count = ITEMS[0]
    assert reward("p", str(count["answer"]), [], [], **count) == 1.0


def test_items_are_for_dataset_rewards_only():
    """Other rewards are built as before; the items a recipe passes do not reach them."""
    assert get_reward("count", items=ITEMS, tolerance=1).tolerance == 1


def test_run_and_train_resolve_tiny_task_through_the_registry():
    ran = load_reward("tiny_task", ITEMS)
    trained, evaluated = build_rewards("tiny_task", "giou", ITEMS, ITEMS[:3])
    assert (_ground_metric(ran), _ground_metric(trained), _ground_metric(evaluated)) == (
        "iou",
        "giou",
        "iou",
    )
    assert type(ran) is type(trained) is type(get_reward("tiny_task", items=ITEMS))


def test_a_registered_dataset_reward_reaches_both_recipes():
    """Nothing in the recipes names a reward: one registered by a user is built from each
    recipe's items, with train's box-metric option when the entry takes it."""
    seen = []

    def build(items, ground_metric="iou"):
        seen.append((len(items), ground_metric))
        return lambda *a, **k: 0.5

    REWARDS.register("dataset_probe", DatasetReward(build, options=("ground_metric",)))
    try:
        assert load_reward("dataset_probe", ITEMS)("p", "c", [], []) == 0.5
        build_rewards("dataset_probe", "giou", ITEMS, ITEMS[:3])
    finally:
        REWARDS.unregister("dataset_probe")
    assert seen == [(6, "iou"), (6, "giou"), (3, "iou")]


def test_run_names_an_unknown_reward():
    from vlrollout.errors import ConfigError

    with pytest.raises(ConfigError, match="--reward 'tiny_taks'"):
        load_reward("tiny_taks", ITEMS)


def test_caption_items_of_one_image_say_why_they_have_no_reward():
    """A run of one caption item (``--limit``) has no CIDEr-D corpus: the rejection says so, not
    "pass --reward cider_d", which refuses the same single image."""
    one_caption = [it for it in ITEMS if it.get("task") != "caption"] + [
        next(it for it in ITEMS if it.get("task") == "caption")
    ]
    reward = get_reward("tiny_task", items=one_caption)
    caption = one_caption[-1]
    with pytest.raises(ValueError) as e:
        reward("p", "a red square", [], [], **caption)
    assert "at least 2 images" in str(e.value) and "--reward cider_d" not in str(e.value)
