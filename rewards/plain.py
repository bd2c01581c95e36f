"""Our rewards from plain Python: ``score(completion, **labels) -> (value, reason)``.

For notebooks and for the adapters to trainers that call a reward once per sample (verl,
EasyR1: :mod:`vlrollout.rewards.for_verl`). The reward is one of ours (a built-in name such as
``"iou"`` or ``"cider_d"``, an import path, or an object); the labels are the fields a data item
would carry (``boxes``, ``geometry``, ``captions``, ``answer``...). Scoring goes through the
reward's own :meth:`~vlrollout.rewards.result.Reward.score`, so the rules it applies inside
vlrollout apply here too: a completion longer than
:data:`~vlrollout.rewards.result.MAX_OUTPUT_CHARS` is not read (reason ``output_too_long``), and a
value a rule decided comes with that rule's reason.

>>> reward = PlainReward("iou", family="qwen2_5_vl")
>>> geometry = [{"original_width": 100, "original_height": 100,
...              "model_width": 100, "model_height": 100}]
>>> reward.score('{"bbox_2d": [0, 0, 50, 50]}', boxes=[0, 0, 50, 50], geometry=geometry)
(1.0, None)
>>> reward.score("no box here", boxes=[0, 0, 50, 50], geometry=geometry)
(0.0, 'no_box')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .caller import reward_argument_clash, reward_value
from .combine import reads_token_ids, reward_name
from .registry import get_reward
from .result import require_text


def build_reward(
    reward: Callable[..., Any] | str, items: Sequence[Mapping[str, Any]] = (), **options: Any
) -> Callable[..., Any]:
    """Our reward object from a built-in name or import path (built with ``options``, and with
    ``items`` for rewards built from their dataset, such as CIDEr-D's document frequencies), or
    the object itself.

    Raises:
        TypeError: options given with a reward object (build the object with them instead).
    """
    if isinstance(reward, str):
        return get_reward(reward, items=[dict(i) for i in items], **options)
    if options or items:
        raise TypeError(
            f"options {sorted(options)} and items are for rewards given by name; "
            f"{type(reward).__name__} is already built: build it with them"
        )
    return reward


def score_one(
    reward: Callable[..., Any],
    completion: str,
    labels: Mapping[str, Any],
    *,
    prompt: str = "",
    prompt_ids: Sequence[int] = (),
    completion_ids: Sequence[int] = (),
) -> tuple[float, str | None]:
    """``(value, reason)`` of one completion: the reward's ``score`` (value and the rule's
    reason) when it has one, else its AReaL-style call (reason ``None``).

    Errors of the reward (a label field missing, a bad label box) propagate, and a value the
    workflow would refuse (not a number, NaN, not finite in float32) raises its
    :class:`~vlrollout.ledger.EpisodeRejected` (``reward_error``).
    """
    require_text(completion, reward_name(reward))
    clash = reward_argument_clash(labels)
    if clash:
        raise ValueError(f"{reward_name(reward)}: label {clash}")
    args = (prompt, completion, list(prompt_ids), list(completion_ids))
    scorer = getattr(reward, "score", None)
    if callable(scorer):
        result = scorer(*args, **labels)
        return reward_value(result.value), result.reason
    return reward_value(reward(*args, **labels)), None


class PlainReward:
    """One of our rewards as ``score(completion, **labels) -> (value, reason)``. Rewards of
    token counts (``length_penalty``) are refused: ``score`` takes no token ids.

    Args:
        reward: A built-in reward name (``"iou"``, ``"giou"``, ``"cider_d"``, ``"count"``...), an
            import path, or a reward object (AReaL's per-sample signature).
        items: For rewards built from their dataset (``"cider_d"``: the items' ``captions`` give
            the document frequencies).
        **options: Options of a reward given by name (``family="qwen2_vl"``, ``corpus=``...).
    """

    def __init__(
        self,
        reward: Callable[..., Any] | str,
        items: Sequence[Mapping[str, Any]] = (),
        **options: Any,
    ) -> None:
        self.reward = build_reward(reward, items, **options)
        if reads_token_ids(self.reward):
            raise ValueError(
                f"{reward_name(self.reward)} scores the completion's token ids, which "
                "score(completion) does not take: call the reward with AReaL's signature, "
                "reward(prompt, completion, prompt_ids, completion_ids)"
            )

    def score(self, completion: str, **labels: Any) -> tuple[float, str | None]:
        """The value and, when a rule decided it (``no_box``, ``output_too_long``...), why."""
        return score_one(self.reward, completion, labels)

    def __call__(self, completion: str, **labels: Any) -> float:
        return self.score(completion, **labels)[0]

    def __repr__(self) -> str:
        return f"PlainReward({self.reward!r})"
