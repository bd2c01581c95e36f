"""The reward of the tiny model's synthetic shapes tasks (:mod:`vlrollout.tiny.synthetic`).

:func:`shapes_task_reward` is the rewards registry's ``tiny_task`` entry (a
:class:`~vlrollout.rewards.registry.DatasetReward`, built from the items it scores), which
``vlrollout run`` and ``vlrollout train`` resolve like any other reward.
"""

from __future__ import annotations

from typing import Any

from vlrollout.logs import get_logger

logger = get_logger(__name__)

GROUND_METRICS = ("iou", "giou")
"""Box metrics of :func:`shapes_task_reward`'s grounding items (``vlrollout.ground_metric``)."""


def count_reward() -> Any:
    """The count task's reward: 1.0 for the exact count, read by
    :func:`~vlrollout.rewards.answer.read_count` (the last count in the answer, number words
    included). The evaluation's count accuracy is its mean, so evaluation and RL read a completion
    the same way."""
    from vlrollout.rewards.answer import CountReward

    return CountReward()


def shapes_task_reward(items: list[dict[str, Any]], ground_metric: str = "iou") -> Any:
    """count → exact count; ground → ``ground_metric`` (one of :data:`GROUND_METRICS`: ``iou``,
    or the dense ``giou`` whose misses still rank by distance) of the Qwen2-VL box (0–1000)
    against the original-pixel label; caption → CIDEr-D.

    CIDEr-D's document frequencies come from the captions of ``items`` (the references), computed
    once, so a caption's score does not depend on which other captions share its batch (an RL
    reward must not depend on its batch). Items whose ``captions`` are not a list of strings are
    left out of the references (their episodes are rejected by the reward itself).

    Raises:
        ValueError: ``ground_metric`` is not one of :data:`GROUND_METRICS`.
    """
    if ground_metric not in GROUND_METRICS:
        raise ValueError(
            f"ground_metric must be one of {', '.join(GROUND_METRICS)}, got {ground_metric!r}"
        )
    from vlrollout.rewards import ByTask
    from vlrollout.rewards.caption import CaptionReward
    from vlrollout.rewards.cider import CiderD
    from vlrollout.rewards.grounding import GroundingReward

    references = [
        item["captions"]
        for item in items
        if isinstance(item.get("captions"), list)
        and item["captions"]
        and all(isinstance(c, str) for c in item["captions"])
    ]
    routes: dict[str, Any] = {
        "count": count_reward(),
        "ground": GroundingReward("qwen2_vl", ground_metric),
    }
    corpus = CiderD.from_references(references) if references else None
    unscored = {}
    if corpus is not None and corpus.weighs_anything:
        routes["caption"] = CaptionReward("cider_d", corpus=corpus)
    elif corpus is not None:
        unscored["caption"] = (
            "CIDEr-D needs the references of at least 2 images, and this run's items hold one "
            "image's (or copies of one: a smaller --limit?), which weigh no n-gram; run more "
            "caption items"
        )
        logger.warning("tiny_task: caption items have no reward: %s", unscored["caption"])
    return ByTask(routes, unscored=unscored)
