"""Box rewards named by a recipe (``vlrollout run --reward iou``, ``vlrollout.reward=giou``) read
boxes as the model's family writes them: the convention ``vlrollout eval`` reads them in
(:data:`vlrollout.eval.metrics.boxes.BOX_FORMATS`), never Qwen2.5-VL's by default. A family
without a convention of its own is refused: evaluation reads lmms-eval's guess for it, a reward
must not train on one."""

from __future__ import annotations

from typing import Any

from vlrollout.eval.metrics.boxes import box_format, check_box_format
from vlrollout.families import family_name_at
from vlrollout.rewards.grounding import POINT_FAMILIES
from vlrollout.rewards.registry import BOX_REWARDS


def box_format_unread(reward: str) -> str | None:
    """Why a box format given for ``reward`` would be read by nothing (``None`` when the reward
    is a built-in box or point reward, which read it)."""
    if reward in (*BOX_REWARDS, "point_in_box"):
        return None
    return (
        f"applies to the box and point rewards ({', '.join(sorted(BOX_REWARDS))}, "
        f"point_in_box); the reward {reward!r} reads its boxes its own way"
    )


def box_reward_options(
    reward: str, model: str | None, written_as: str | None = None
) -> dict[str, Any]:
    """``family=`` and ``plain_frame=`` for the built-in box reward ``reward`` on ``model``'s
    family, or in the box format ``written_as`` names (a model fine-tuned to write another
    family's boxes: ``vlrollout run --box-format``) (``family=`` alone for ``point_in_box``);
    ``{}`` for any other reward (or no model and no ``written_as``).

    Raises:
        ValueError: ``reward`` reads boxes (points) and ``model``'s family cannot be read or has
            no box (point) convention of its own.
    """
    if reward not in (*BOX_REWARDS, "point_in_box") or (model is None and written_as is None):
        return {}
    family = written_as or family_name_at(model)
    fmt = check_box_format(written_as) if written_as else box_format(family)
    if reward == "point_in_box":
        if fmt.parser not in POINT_FAMILIES:
            raise ValueError(
                f"the model's family {family} writes no point convention point_in_box reads "
                f"({', '.join(sorted(POINT_FAMILIES))} do); name a PointInBoxReward(family=...) "
                "by import path"
            )
        return {"family": fmt.parser}
    if fmt.of_original:  # evaluation reads lmms-eval's guess; a training reward must not guess
        raise ValueError(
            f"the model's family {family} writes no box convention of its own; name a reward "
            "built with the convention your model writes (an import path to a "
            "GroundingReward(family=..., plain_frame=...))"
        )
    return {"family": fmt.parser, "plain_frame": fmt.plain_frame}
