"""Our rewards as verl's and EasyR1's reward functions.

The contracts, as read from their sources (neither is a test dependency: verl pulls ray,
tensordict, hydra and wandb into the environment, and EasyR1 is not on PyPI; the tests call the
adapters the way these managers do):

- verl 0.9.1 (``verl/workers/reward_manager/naive.py``, ``verl/utils/reward_score/__init__.py``
  ``default_compute_score``): ``compute_score(data_source=, solution_str=, ground_truth=,
  extra_info=)`` per sample (the experimental reward loop adds the manager's
  ``**extra_reward_kwargs``) returns a float, or a dict whose ``"score"`` is the reward and
  whose every key is collected per sample into ``reward_extra_info`` (so every sample must return
  the same keys). The response is decoded with ``skip_special_tokens=True``.
- EasyR1 (``verl/workers/reward/function.py``): ``reward_type=batch`` calls
  ``compute_score(reward_inputs: list[RewardInput]) -> list[RewardScore]``, sequential calls it
  with one ``RewardInput``; ``RewardInput`` is ``{"response", "response_length",
  "ground_truth"}``, ``RewardScore`` a dict of floats whose ``"overall"`` is the reward and whose
  every key is averaged into a metric (so values must be numbers).

Labels reach our reward from ``ground_truth`` (a dict, or a JSON object as a string: ``{"boxes":
[...], "geometry": [...]}``, refused when it starts an object and does not parse; any other
value is ``{label_key: value}``) and from verl's ``extra_info`` dict (``ground_truth`` wins on a
key both give). Rewards of token counts (``length_penalty``) are refused: neither trainer passes
token ids to ``compute_score``. Scoring is :func:`~vlrollout.rewards.plain.score_one`, in the
calling process (both trainers run reward functions in their own reward workers), with the
reward's own output cap and reasons. A reward that raises (a label missing) scores
``failure_score`` and says why, rather than stopping the run; the reasons are counted in
:attr:`VerlReward.reasons`.

>>> reward = VerlReward("count")
>>> reward("clevr", "There are 3.", "3")
{'score': 1.0, 'reason': ''}
>>> reward("clevr", "I cannot tell.", "3")["reason"]
'no_number'
>>> reward.easyr1([{"response": "3", "response_length": 1, "ground_truth": "4"}])
[{'overall': 0.0, 'failed': 0.0}]
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vlrollout.ledger import EpisodeRejected

from .caller import REWARD_ARGUMENTS, reward_argument_clash
from .combine import reads_token_ids, reward_name
from .plain import build_reward, score_one


def labels_from(ground_truth: Any, extra_info: Any = None, label_key: str = "answer") -> dict:
    """The reward's keyword labels from verl's ``ground_truth`` and ``extra_info``; on a key both
    give, ``ground_truth`` is the label (verl's own GSM8K preprocessing keeps the worked solution
    in ``extra_info["answer"]`` and the final answer in ``ground_truth``).

    >>> labels_from('{"boxes": [0, 0, 5, 5]}', {"split": "train"})
    {'split': 'train', 'boxes': [0, 0, 5, 5]}
    >>> labels_from("3")
    {'answer': '3'}

    ``extra_info`` entries named as a reward argument (``prompt``, ...: context a dataset keeps
    beside a row) are not labels and are left out; in ``ground_truth`` such a key is a data
    error, raised as ``ValueError``.
    """
    labels: dict[str, Any]
    if isinstance(ground_truth, Mapping):
        labels = dict(ground_truth)
    else:
        parsed = _json_object(ground_truth) if isinstance(ground_truth, str) else None
        labels = parsed if parsed is not None else {label_key: ground_truth}
    if clash := reward_argument_clash(labels):
        raise ValueError(f"ground_truth: {clash}")
    if isinstance(extra_info, Mapping):
        context = {k: v for k, v in extra_info.items() if k not in REWARD_ARGUMENTS}
        labels = {**context, **labels}
    return labels


def _json_object(text: str) -> dict[str, Any] | None:
    """The object of a string that starts one (``None`` for any other string); one that starts
    an object and does not parse is a data error (``ValueError``), not an answer text."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"ground_truth is not valid JSON ({e.msg} at character {e.pos})") from None


class VerlReward:
    """One of our rewards as verl's ``compute_score`` (``__call__``) and EasyR1's (:meth:`easyr1`).

    Args:
        reward: A built-in reward name, an import path or a reward object.
        items: For rewards built from their dataset (``"cider_d"``).
        label_key: The label a plain (non-JSON) ``ground_truth`` becomes.
        failure_score: The score of a sample the reward raised on (its reason says why).
        **options: Options of a reward given by name (``family=``, ``corpus=``...).

    Attributes:
        reasons: How many samples each reason (a rule's, or ``reward_error``) decided.
    """

    def __init__(
        self,
        reward: Callable[..., Any] | str,
        items: Sequence[Mapping[str, Any]] = (),
        *,
        label_key: str = "answer",
        failure_score: float = 0.0,
        **options: Any,
    ) -> None:
        self.reward = build_reward(reward, items, **options)
        if reads_token_ids(self.reward):
            raise ValueError(
                f"{reward_name(self.reward)} scores the completion's token ids, and verl's and "
                "EasyR1's compute_score receive only the decoded text: use the trainer's own "
                "overlong penalty (verl's DAPO reward manager: overlong_buffer) instead"
            )
        self.label_key = label_key
        self.failure_score = float(failure_score)
        self.reasons: collections.Counter[str] = collections.Counter()

    def score(
        self, completion: str, labels: Mapping[str, Any] | Callable[[], Mapping[str, Any]]
    ) -> tuple[float, str | None]:
        """``(value, reason)``; a reward that raises, or labels that cannot be read (``labels``
        may be a function giving them), give ``failure_score`` and
        ``"reward_error: <exception>"``."""
        try:
            value, reason = score_one(
                self.reward, completion, labels() if callable(labels) else labels
            )
        except EpisodeRejected as e:  # a value the workflow refuses: NaN, inf, not a number
            value, reason = self.failure_score, f"{e.reason}: {e.detail}"
        except Exception as e:  # noqa: BLE001 - returned as the reason, never a silent 0
            value, reason = self.failure_score, f"reward_error: {type(e).__name__}: {e}"
        if reason:
            self.reasons[reason.split(":", 1)[0]] += 1
        return value, reason

    def __call__(
        self,
        data_source: Any,
        solution_str: str,
        ground_truth: Any,
        extra_info: Any = None,
        **manager_kwargs: Any,
    ) -> dict[str, Any]:
        """verl's ``compute_score``: ``{"score": value, "reason": why or ""}``.

        ``manager_kwargs`` (what verl's reward loop adds from its config) are not labels and are
        not passed to the reward.

        Raises:
            TypeError: ``solution_str`` is not text (it would be scored as its ``repr``).
        """
        if not isinstance(solution_str, str):
            raise TypeError(
                f"solution_str is a {type(solution_str).__name__}: verl passes the decoded "
                "response text"
            )
        value, reason = self.score(
            solution_str, lambda: labels_from(ground_truth, extra_info, self.label_key)
        )
        return {"score": value, "reason": reason or ""}

    def easyr1(self, reward_inputs: Any) -> Any:
        """EasyR1's ``compute_score``: a list of ``RewardInput`` (``reward_type=batch``) or one.

        Each score is ``{"overall": value, "failed": 1.0 if a rule or an error decided it}``
        (EasyR1 averages every key into a metric, so the reasons go to :attr:`reasons`).
        """
        if isinstance(reward_inputs, Mapping):
            return self._easyr1_one(reward_inputs, 0)
        if isinstance(reward_inputs, (str, bytes)):
            raise TypeError(
                f"reward_inputs is a {type(reward_inputs).__name__}: EasyR1 passes a "
                "RewardInput dict ({'response', 'response_length', 'ground_truth'}) or a list"
            )
        return [self._easyr1_one(x, k) for k, x in enumerate(reward_inputs)]

    def _easyr1_one(self, reward_input: Any, index: int) -> dict[str, float]:
        if not isinstance(reward_input, Mapping):
            raise TypeError(
                f"reward_inputs[{index}] is a {type(reward_input).__name__}, not a RewardInput "
                "dict ({'response', 'response_length', 'ground_truth'})"
            )
        for key in ("response", "ground_truth"):
            if key not in reward_input:
                raise TypeError(f"reward_inputs[{index}] has no {key!r}: not a RewardInput")
        value, reason = self.score(
            reward_input["response"],
            lambda: labels_from(reward_input["ground_truth"], None, self.label_key),
        )
        return {"overall": value, "failed": 1.0 if reason else 0.0}

    def __repr__(self) -> str:
        return f"VerlReward({self.reward!r})"
