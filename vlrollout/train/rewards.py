"""Rewards of ``vlrollout train``: the synthetic shapes tasks, or any reward by name/import path.

The shapes-task reward is :func:`vlrollout.tiny.rewards.shapes_task_reward` (shared with
``vlrollout run``).
"""

from __future__ import annotations

from typing import Any


def build_rewards(
    name: str, ground_metric: str, train: list[dict], valid: list[dict]
) -> tuple[Any, Any]:
    """``(training reward, evaluation reward)``.

    ``tiny_task`` trains grounding with ``ground_metric`` (GIoU: a miss still ranks by how far
    it is) and evaluates with IoU, the metric the tiny model is reported with.
    """
    from vlrollout.tiny.rewards import shapes_task_reward

    if name == "tiny_task":
        return shapes_task_reward(train, ground_metric), shapes_task_reward(valid, "iou")
    from vlrollout.rewards.registry import get_reward

    reward = get_reward(name)
    return reward, reward
