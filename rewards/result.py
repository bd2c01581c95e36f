"""The value a reward returns plus why, and the base class every reward here derives from.

The rule "no silent zeros": when a rule rather than the metric decided a value (no box in the
output, unparseable number, malformed format), :meth:`Reward.score` returns a
:class:`RewardResult` whose ``reason`` says which rule fired. ``__call__`` returns only the float,
because that is AReaL's reward contract, so logging code that wants reasons calls ``score``
(:class:`~vlrollout.rewards.combine.WeightedSum` does, per component).

Missing or invalid *dataset* fields (no ``captions`` in ``task_data``, a label box that is not four
numbers) are configuration bugs, not model mistakes: they raise ``KeyError``/``ValueError`` naming
the field instead of returning a value.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_OUTPUT_CHARS = 65_536
"""Completions longer than this many characters are not read: they score the reward's
``failure_value`` with reason ``output_too_long`` and ``details["chars"]``. A prefix would not
do, as the answer readers take the last answer, which a prefix can cut off while it keeps an
earlier, different one. 64 Ki characters is ~16k tokens, beyond any generation length we train
with. Per reward: set ``max_output_chars`` on the instance (``None`` disables the cap)."""


@dataclass(frozen=True)
class RewardResult:
    """A reward value and, when a rule decided it, the reason.

    Attributes:
        value: The reward (a finite float).
        reason: ``None`` when the metric computed the value from a well-formed output; otherwise a
            short machine-greppable reason such as ``"no_box"`` or ``"unparseable_number"``.
        details: Extra numbers or notes for logging (e.g. ``{"num_boxes": 3}``).

    >>> RewardResult(0.0, "no_box").failed
    True
    """

    value: float
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not math.isfinite(self.value):
            raise ValueError(f"RewardResult.value must be finite, got {self.value!r}")

    @property
    def failed(self) -> bool:
        """True when a rule (not the metric) decided the value."""
        return self.reason is not None


class Reward(ABC):
    """Base class: AReaL's per-sample reward signature on top of :meth:`score`.

    Subclasses implement :meth:`compute` ``(prompt, completions, prompt_ids, completion_ids,
    **task_data) -> RewardResult``. Callers use :meth:`score` (the result, with its reason) or the
    instance itself (``__call__``: the float value, AReaL's contract); both apply the rules every
    reward shares, so no subclass repeats them: a completion longer than
    :attr:`max_output_chars` is not read and scores :attr:`failure_value`. Subclasses
    keep only picklable state so they run in the reward process pool
    (:mod:`vlrollout.rewards.executor`).
    """

    name: str = "reward"
    max_output_chars: int | None = MAX_OUTPUT_CHARS
    failure_value: float = 0.0

    @abstractmethod
    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        """The metric on ``completions`` (at most :attr:`max_output_chars` long)."""

    def score(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        """:meth:`compute`, or for a completion longer than :attr:`max_output_chars`
        :attr:`failure_value` with reason ``"output_too_long"`` and ``details["chars"]``.

        Raises:
            TypeError: ``completions`` is not a ``str`` (see :func:`require_text`).
        """
        require_text(completions, self.name)
        limit = self.max_output_chars
        if limit is None or len(completions) <= limit:
            return self.compute(prompt, completions, prompt_ids, completion_ids, **task_data)
        return RewardResult(self.failure_value, "output_too_long", {"chars": len(completions)})

    def __call__(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> float:
        return float(self.score(prompt, completions, prompt_ids, completion_ids, **task_data).value)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


def option_number(value: Any, name: str, minimum: float | None = None) -> float:
    """A reward's numeric option: a finite real number (not a bool), at least ``minimum`` when
    one is given; else a ``ValueError`` naming the option (NaN would fail every score silently,
    and a string only at the first score)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum:g}"
        raise ValueError(f"{name} must be a finite number{bound}, got {value!r}")
    return value


def option_index(value: Any, name: str) -> int:
    """A reward's index option (which image, which video): an ``int`` >= 0, else a
    ``ValueError`` naming the option (``-1`` would pick the last one silently)."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def require_text(completion: Any, reward_name: str) -> None:
    """Raise a ``TypeError`` unless ``completion`` is text: a reward reads the decoded text, and
    ``None``, bytes or a message list read as their ``repr`` would score as something else."""
    if not isinstance(completion, str):
        raise TypeError(
            f"{reward_name}: the completion is a {type(completion).__name__}, not text: "
            "pass the decoded completion as a str"
        )


def require_field(task_data: dict[str, Any], key: str, reward_name: str) -> Any:
    """Return ``task_data[key]`` or raise a ``KeyError`` that names the reward and the fields present."""
    if key not in task_data:
        raise KeyError(
            f"{reward_name} needs task_data[{key!r}] (a field of the dataset row), but the row has "
            f"fields {sorted(task_data)}. Add {key!r} to the dataset or choose another reward."
        )
    if task_data[key] is None:
        raise KeyError(
            f"{reward_name} needs task_data[{key!r}] (a field of the dataset row), and the row's "
            f"{key!r} is null: give it a value or leave the row out."
        )
    return task_data[key]


def label_number(value: Any) -> float:
    """A number in a dataset label (a box coordinate, a segment's seconds) as a float; a bool or
    a string is refused (``TypeError``), not read as one (``True`` would be 1)."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{value!r} is not a number")
    return float(value)
