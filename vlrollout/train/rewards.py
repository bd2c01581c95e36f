"""Rewards of ``vlrollout train``: the synthetic shapes tasks, or any reward by name/import path.

Built here from :mod:`vlrollout.rewards` components (not imported from the ``run`` recipe: one
recipe does not import another).
"""

from __future__ import annotations

from typing import Any


def shapes_reward(items: list[dict[str, Any]], ground_metric: str = "iou") -> Any:
    """count → exact count; ground → ``ground_metric`` (``iou``/``giou``) of the Qwen2-VL box
    (0–1000) against the original-pixel label; caption → CIDEr-D with document frequencies from
    the references of ``items``, computed once (an RL reward must not depend on its batch)."""
    from vlrollout.rewards import ByTask
    from vlrollout.rewards.answer import CountReward
    from vlrollout.rewards.caption import CaptionReward
    from vlrollout.rewards.grounding import GroundingReward

    routes: dict[str, Any] = {
        "count": CountReward(),
        "ground": GroundingReward("qwen2_vl", ground_metric),
    }
    references = [item["captions"] for item in items if item.get("captions")]
    if references:
        routes["caption"] = CaptionReward("cider_d", corpus=references)
    return ByTask(routes)


def build_rewards(
    name: str, ground_metric: str, train: list[dict], valid: list[dict]
) -> tuple[Any, Any]:
    """``(training reward, evaluation reward)``.

    ``tiny_task`` trains grounding with ``ground_metric`` (GIoU: a miss still ranks by how far
    it is) and evaluates with IoU, the metric the tiny model is reported with.
    """
    if name == "tiny_task":
        return shapes_reward(train, ground_metric), shapes_reward(valid, "iou")
    from vlrollout.rewards.registry import get_reward

    reward = get_reward(name)
    return reward, reward
