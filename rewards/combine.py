"""Weighted sums of rewards that report each component for logging."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .result import Reward, RewardResult, option_number
from .task_hints import task_reward_hint


def reward_name(reward: Callable[..., Any]) -> str:
    """A readable name: ``reward.name``, else the function's ``__name__``, else the class name."""
    return (
        getattr(reward, "name", None) or getattr(reward, "__name__", None) or type(reward).__name__
    )


def reads_token_ids(reward: Callable[..., Any]) -> bool:
    """Whether ``reward`` (or any part of a :class:`WeightedSum` or :class:`ByTask`) scores the
    completion's token ids rather than its text (``reads_token_ids = True`` on the reward)."""
    parts = [r for r, _ in getattr(reward, "terms", ())]
    parts += list(getattr(reward, "rewards", {}).values())
    return bool(getattr(reward, "reads_token_ids", False)) or any(map(reads_token_ids, parts))


def score_any(reward: Callable[..., Any], *args: Any, **kwargs: Any) -> RewardResult:
    """``reward.score(...)`` when it has one, else wrap the float of ``reward(...)`` (no reason)."""
    if hasattr(reward, "score"):
        return reward.score(*args, **kwargs)
    return RewardResult(float(reward(*args, **kwargs)))


class WeightedSum(Reward):
    """``sum(weight * reward(...))`` over ``(reward, weight)`` pairs; picklable when its parts are.

    Components are any AReaL-signature callables; those with a ``score`` method contribute their
    reasons. :meth:`components` returns the unweighted value per component name (duplicates get a
    ``_2``, ``_3`` suffix), for logging next to the total.

    >>> from vlrollout.rewards.format import ThinkAnswerFormat
    >>> from vlrollout.rewards.answer import CountReward
    >>> r = WeightedSum([(CountReward(), 1.0), (ThinkAnswerFormat(), 0.5)])
    >>> r.components("p", "<think>x</think><answer>3</answer>", [], [], answer="3")
    {'count': 1.0, 'format': 1.0}
    >>> r("p", "<think>x</think><answer>3</answer>", [], [], answer="3")
    1.5
    """

    def __init__(
        self, terms: Sequence[tuple[Callable[..., Any], float]], *, name: str = "weighted_sum"
    ) -> None:
        terms = list(terms)
        if not terms:
            raise ValueError("WeightedSum needs at least one (reward, weight) pair")
        names: list[str] = []
        for i, term in enumerate(terms):
            if not (isinstance(term, (tuple, list)) and len(term) == 2 and callable(term[0])):
                raise TypeError(f"terms[{i}] must be a (reward, weight) pair, got {term!r}")
            option_number(term[1], f"terms[{i}]'s weight")  # NaN: every total refused
            base = reward_name(term[0])
            candidate, k = base, 1
            while candidate in names:
                k += 1
                candidate = f"{base}_{k}"
            names.append(candidate)
        self.terms = [(r, float(w)) for r, w in terms]
        self.names = names
        self.name = name

    def _results(self, *args: Any, **kwargs: Any) -> list[RewardResult]:
        return [score_any(r, *args, **kwargs) for r, _ in self.terms]

    def components(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> dict[str, float]:
        """Unweighted value of each component, by name."""
        results = self._results(prompt, completions, prompt_ids, completion_ids, **task_data)
        return {n: r.value for n, r in zip(self.names, results, strict=True)}

    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        results = self._results(prompt, completions, prompt_ids, completion_ids, **task_data)
        total = sum(w * r.value for (_, w), r in zip(self.terms, results, strict=True))
        details: dict[str, Any] = {n: r.value for n, r in zip(self.names, results, strict=True)}
        reasons = [f"{n}: {r.reason}" for n, r in zip(self.names, results, strict=True) if r.reason]
        for n, r in zip(self.names, results, strict=True):
            if r.reason:
                details[f"{n}/reason"] = r.reason
        return RewardResult(total, "; ".join(reasons) or None, details)


class ByTask(Reward):
    """Route each sample to the reward of its task, read from a ``task_data`` field.

    For mixed datasets (counting, grounding and captioning items in one run). An item whose task
    has no reward raises ``ValueError`` naming the task, the known ones and a reward that scores
    it (:func:`~vlrollout.rewards.task_hints.task_reward_hint`), rather than scoring 0.

    >>> r = ByTask({"count": lambda *a, **k: 1.0})
    >>> r("p", "3", [], [], task="count")
    1.0
    """

    name = "by_task"

    def __init__(
        self,
        rewards: dict[str, Callable[..., Any]],
        key: str = "task",
        unscored: dict[str, str] | None = None,
    ) -> None:
        if not rewards:
            raise ValueError("ByTask needs at least one task -> reward entry")
        self.rewards = dict(rewards)
        self.key = key
        self.unscored = dict(unscored or {})
        """Tasks left without a reward on purpose, and why (said instead of the hint)."""

    def scores(self, task: Any) -> bool:
        """Whether ``task`` (an item's ``key`` field) has a reward here."""
        return isinstance(task, str) and task in self.rewards

    def no_reward_for(self, task: Any) -> str:
        """Why an item of ``task`` cannot be scored, and the reward that scores it."""
        if isinstance(task, str) and task in self.unscored:
            return f"no reward for {self.key}={task!r}: {self.unscored[task]}"
        return (
            f"no reward for {self.key}={task!r}; known tasks: {sorted(self.rewards)}; "
            f"{task_reward_hint(task)}"
        )

    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        task = task_data.get(self.key)
        if not self.scores(task):
            raise ValueError(self.no_reward_for(task))
        result = score_any(
            self.rewards[task], prompt, completions, prompt_ids, completion_ids, **task_data
        )
        return RewardResult(result.value, result.reason, {**result.details, "task": task})
