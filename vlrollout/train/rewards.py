"""Rewards of ``vlrollout train``: any reward by registry name or import path, as ``vlrollout run``
resolves it (:func:`vlrollout.rewards.registry.get_reward`)."""

from __future__ import annotations

from typing import Any


def build_rewards(
    name: str,
    ground_metric: str,
    train: list[dict],
    valid: list[dict],
    model: str | None = None,
    written_as: str | None = None,
) -> tuple[Any, Any]:
    """``(training reward, evaluation reward)``, each built from its own items (a dataset reward,
    such as ``tiny_task``, takes its CIDEr-D references from them).

    A reward that takes the ``ground_metric`` option (``tiny_task``) trains grounding with it
    (GIoU: a miss still ranks by how far it is) and evaluates with IoU, the metric the tiny model
    is reported with; other rewards are the same in training and evaluation. A built-in box
    reward reads boxes as ``model``'s family writes them, or in the box format ``written_as``
    names (``vlrollout.box_format``; :func:`vlrollout.box_rewards.box_reward_options`).
    """
    from vlrollout.box_rewards import box_reward_options
    from vlrollout.rewards.registry import get_reward, reward_options

    if "ground_metric" not in reward_options(name):
        family = box_reward_options(name, model, written_as)
        return get_reward(name, items=train, **family), get_reward(name, items=valid, **family)
    return (
        get_reward(name, items=train, ground_metric=ground_metric),
        get_reward(name, items=valid, ground_metric="iou"),
    )
