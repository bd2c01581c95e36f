"""Box rewards named by a recipe (``vlrollout run --reward iou``, ``vlrollout.reward=giou``) read
boxes as the model's family writes them: the convention ``vlrollout eval`` reads them in
(:data:`vlrollout.eval.metrics.boxes.BOX_FORMATS`; a family without one of its own writes
lmms-eval's 0-1 corners), never Qwen2.5-VL's by default."""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig

from vlrollout.eval.metrics.boxes import box_format
from vlrollout.families import UnsupportedModelError, family_of

BOX_REWARDS = frozenset({"iou", "giou", "acc@iou", "box_f1", "mean_iou"})
"""Built-in rewards that parse a completion's boxes in a family's convention."""


def model_family_name(model: str) -> str:
    """The :mod:`vlrollout.families` name of the model in folder ``model`` (from its config).

    Raises:
        ValueError: the config cannot be read or names no supported family (the reason).
    """
    try:
        return family_of(AutoConfig.from_pretrained(model, local_files_only=True)).name
    except (OSError, ValueError, UnsupportedModelError) as e:
        raise ValueError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None


def box_reward_options(reward: str, model: str | None) -> dict[str, Any]:
    """``family=`` and ``plain_frame=`` for the built-in box reward ``reward`` on ``model``'s
    family; ``{}`` for any other reward (or no model).

    Raises:
        ValueError: ``reward`` reads boxes and ``model``'s family cannot be read.
    """
    if reward not in BOX_REWARDS or model is None:
        return {}
    fmt = box_format(model_family_name(model))
    return {"family": fmt.parser, "plain_frame": fmt.plain_frame}
