"""Build rewards by name or import path, for configs: the one way every recipe gets its reward.

``get_reward("iou", family="qwen2_5_vl")`` builds a built-in; ``get_reward("pkg.mod:attr")`` or
``get_reward("pkg.mod.attr")`` imports ``attr`` with AReaL's
``areal.utils.dynamic_import.import_from_string`` and, if it is a class, instantiates it with the
keyword arguments. Rewards built from the dataset they score (:class:`DatasetReward`, such as
``tiny_task``) also get the recipe's ``items``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vlrollout.logs import get_logger
from vlrollout.registry import Registry

logger = get_logger(__name__)


def _caption(metric: str) -> Callable[..., Any]:
    def build(**kwargs: Any) -> Any:
        from .caption import CaptionReward

        return CaptionReward(metric, **kwargs)

    return build


def _cider_d(items: list[dict[str, Any]], corpus: Any = None, **kwargs: Any) -> Any:
    """CIDEr-D with its document frequencies from ``corpus``, else from the items' ``captions``
    (computed once, so a caption's score does not depend on its batch). An item whose captions
    are no list of texts is left out of the corpus, with a warning naming it: scoring refuses it,
    as the other caption rewards do, so a run rejects that item and goes on.

    Raises:
        ValueError: no ``corpus`` and no item holds reference captions.
    """
    from .caption import CaptionReward

    if corpus is None:
        corpus = [refs for refs in _item_references(items) if refs]
        if not corpus:
            raise ValueError(
                "cider_d scores against the items' reference captions ('captions', a list of "
                "strings) and no item has any; use another reward, or pass corpus="
            )
    return CaptionReward("cider_d", corpus=corpus, **kwargs)


def _item_references(items: list[dict[str, Any]]) -> list[list[str]]:
    """Each item's reference captions, leaving out (with a warning) those that are not texts."""
    from .cider import reference_captions

    found = []
    for k, item in enumerate(items):
        if item.get("captions") is None:
            continue
        try:
            found.append(reference_captions(item["captions"], f"items[{k}]['captions']"))
        except ValueError as e:
            logger.warning("%s: left out of CIDEr-D's corpus; scoring refuses the item", e)
    return found


BOX_REWARDS = frozenset({"iou", "giou", "acc@iou", "box_f1", "mean_iou"})
"""Built-in rewards that parse a completion's boxes in a model family's convention (their
``family=`` says which)."""


def _grounding(metric: str) -> Callable[..., Any]:
    def build(**kwargs: Any) -> Any:
        from .grounding import GroundingReward

        return GroundingReward(metric=metric, **kwargs)

    return build


def _video_task(**kwargs: Any) -> Any:
    """The synthetic video samples' tasks (``vlrollout make-samples``' ``video.jsonl``):
    ``temporal`` items by temporal IoU (``kwargs`` go to it), ``video_count`` items by exact count."""
    from .answer import CountReward
    from .combine import ByTask
    from .temporal import TemporalIoUReward

    return ByTask({"temporal": TemporalIoUReward(**kwargs), "video_count": CountReward()})


def _lazy(module: str, attr: str, **fixed: Any) -> Callable[..., Any]:
    def build(**kwargs: Any) -> Any:
        import importlib

        obj = getattr(importlib.import_module(f"vlrollout.rewards.{module}"), attr)
        return obj(**fixed, **kwargs) if isinstance(obj, type) else obj

    return build


@dataclass(frozen=True)
class DatasetReward:
    """A reward built from the items it will score, as ``build(items, **options)``.

    For rewards whose definition depends on the dataset, such as CIDEr-D's document frequencies
    taken from the items' references (computed once, so a score does not depend on its batch).

    Attributes:
        build: The builder, or its import path (``"pkg.mod:attr"``), imported when the reward is
            built: an entry may name a module that itself imports the rewards.
        options: The keyword options ``build`` takes besides ``items``; a recipe passes its own
            reward options (``vlrollout train``'s ``ground_metric``) only to entries that name them
            (:func:`reward_options`).
    """

    build: Callable[..., Any] | str
    options: tuple[str, ...] = ()

    def __call__(self, items: Sequence[dict[str, Any]], **options: Any) -> Any:
        build = self.build
        if isinstance(build, str):
            from areal.utils.dynamic_import import import_from_string

            build = import_from_string(build.replace(":", "."))
        return build(list(items), **options)


BUILTINS: dict[str, Callable[..., Any]] = {
    # Document frequencies from the scored items' references (or corpus=), fixed once.
    "cider_d": DatasetReward(_cider_d),
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
    # Temporal grounding on videos: an answer [start, end] (seconds, or frame indices when the item
    # says so) against the item's labelled segments.
    "temporal_iou": _lazy("temporal", "TemporalIoUReward"),
    "temporal_acc@iou": _lazy("temporal", "TemporalIoUReward", metric="acc"),
    "video_task": _video_task,
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
    # The tiny model's synthetic shapes tasks: count exact, ground by ``ground_metric`` (IoU, or the
    # denser GIoU) of Qwen2-VL boxes, caption by CIDEr-D against the items' references.
    "tiny_task": DatasetReward(
        "vlrollout.tiny.rewards:shapes_task_reward", options=("ground_metric",)
    ),
}


REWARDS: Registry[Callable[..., Any]] = Registry("reward", BUILTINS)
"""Built-in reward factories and rewards registered with ``REWARDS.register(name, obj)``."""


def get_reward(
    name_or_path: str, *, items: Sequence[dict[str, Any]] = (), **kwargs: Any
) -> Callable[..., Any]:
    """Return a reward callable for a built-in or registered name, or an import path.

    Args:
        name_or_path: A key of :data:`BUILTINS`, a registered name, or ``"pkg.module:attr"`` /
            ``"pkg.module.attr"``.
        items: The dataset's items: a :class:`DatasetReward` is built from them; other rewards
            do not get them.
        **kwargs: Constructor arguments (for built-ins, classes and dataset rewards). Passing them
            for a function binds them with ``functools.partial`` (picklable).

    Raises:
        vlrollout.registry.UnknownNameError: an unknown plain name (the message lists the known
            ones).
        ImportError / AttributeError: The import path does not resolve (the message names it).

    >>> get_reward("count", tolerance=1).tolerance
    1
    """
    obj = REWARDS.resolve(name_or_path)
    if isinstance(obj, DatasetReward):
        return obj(items, **kwargs)
    if name_or_path in BUILTINS:
        return obj(**kwargs)
    if isinstance(obj, type):
        return obj(**kwargs)
    if not callable(obj):
        raise TypeError(f"reward {name_or_path!r} resolved to non-callable {obj!r}")
    return functools.partial(obj, **kwargs) if kwargs else obj


def reward_options(name_or_path: str) -> tuple[str, ...]:
    """The recipe options a reward takes: a :class:`DatasetReward`'s ``options``, else none.

    >>> reward_options("tiny_task"), reward_options("count")
    (('ground_metric',), ())
    """
    obj = REWARDS.resolve(name_or_path)
    return obj.options if isinstance(obj, DatasetReward) else ()
