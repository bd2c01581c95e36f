"""Build rewards by name or import path, for configs.

``get_reward("iou", family="qwen2_5_vl")`` builds a built-in; ``get_reward("pkg.mod:attr")`` or
``get_reward("pkg.mod.attr")`` imports ``attr`` with AReaL's
``areal.utils.dynamic_import.import_from_string`` and, if it is a class, instantiates it with the
keyword arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vlrollout.registry import Registry


def _caption(metric: str) -> Callable[..., Any]:
    def build(**kwargs: Any) -> Any:
        from .caption import CaptionReward

        return CaptionReward(metric, **kwargs)

    return build


def _grounding(metric: str) -> Callable[..., Any]:
    def build(**kwargs: Any) -> Any:
        from .grounding import GroundingReward

        return GroundingReward(metric=metric, **kwargs)

    return build


def _lazy(module: str, attr: str, **fixed: Any) -> Callable[..., Any]:
    def build(**kwargs: Any) -> Any:
        import importlib

        obj = getattr(importlib.import_module(f"vlrollout.rewards.{module}"), attr)
        return obj(**fixed, **kwargs) if isinstance(obj, type) else obj

    return build


BUILTINS: dict[str, Callable[..., Any]] = {
    "cider_d": _caption("cider_d"),
    "bleu1": _caption("bleu1"),
    "bleu2": _caption("bleu2"),
    "bleu3": _caption("bleu3"),
    "bleu4": _caption("bleu4"),
    "rouge_l": _caption("rouge_l"),
    "iou": _grounding("iou"),
    "giou": _grounding("giou"),
    "acc@iou": _grounding("acc"),
    "box_f1": _grounding("box_f1"),
    "mean_iou": _grounding("mean_iou"),
    "point_in_box": _lazy("grounding", "PointInBoxReward"),
    "clip_score": _lazy("clip_score", "CLIPScoreReward"),
    "ref_clip_score": _lazy("clip_score", "CLIPScoreReward", use_references=True),
    "count": _lazy("answer", "CountReward"),
    "choice": _lazy("answer", "ChoiceReward"),
    "numeric": _lazy("answer", "NumericReward"),
    "math": _lazy("answer", "MathReward"),
    "clevr_count": _lazy("answer", "clevr_count_reward"),
    "geometry3k": _lazy("answer", "geometry3k_reward"),
    "format_think_answer": _lazy("format", "ThinkAnswerFormat"),
    "length_penalty": _lazy("format", "LengthPenalty"),
}


REWARDS: Registry[Callable[..., Any]] = Registry("reward", BUILTINS)
"""Built-in reward factories and rewards registered with ``REWARDS.register(name, obj)``."""


def get_reward(name_or_path: str, **kwargs: Any) -> Callable[..., Any]:
    """Return a reward callable for a built-in or registered name, or an import path.

    Args:
        name_or_path: A key of :data:`BUILTINS`, a registered name, or ``"pkg.module:attr"`` /
            ``"pkg.module.attr"``.
        **kwargs: Constructor arguments (for built-ins and classes). Passing them for a function
            binds them with ``functools.partial`` (picklable).

    Raises:
        vlrollout.registry.UnknownNameError: an unknown plain name (the message lists the known
            ones).
        ImportError / AttributeError: The import path does not resolve (the message names it).

    >>> get_reward("count", tolerance=1).tolerance
    1
    """
    obj = REWARDS.resolve(name_or_path)
    if name_or_path in BUILTINS:
        return obj(**kwargs)
    if isinstance(obj, type):
        return obj(**kwargs)
    if not callable(obj):
        raise TypeError(f"reward {name_or_path!r} resolved to non-callable {obj!r}")
    return functools.partial(obj, **kwargs) if kwargs else obj
