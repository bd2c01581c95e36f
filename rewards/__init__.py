"""Rewards for vision-language RL with AReaL's per-sample signature.

Every reward is a picklable callable ``(prompt, completions, prompt_ids, completion_ids,
**task_data) -> float``; the classes also have ``score(...) -> RewardResult`` carrying the reason
when a rule (not the metric) decided the value. Names are exported lazily, so
``import vlrollout.rewards`` stays cheap (no torch, torchvision or math_verify until used).
"""

from __future__ import annotations

if __name__ != "vlrollout.rewards":
    # The folder sits at the repository top level but is installed as vlrollout.rewards
    # (pyproject.toml package-dir). A second identity would give two registries and two copies of
    # every exception class, so importing it under any other name is refused.
    raise ImportError(
        f"this folder is the package vlrollout.rewards; import it under that name, not as {__name__!r}"
    )

import importlib
from typing import Any

_EXPORTS = {
    "RewardResult": "result",
    "Reward": "result",
    "tokenize": "text_tokenize",
    "ptb_tokenize": "ptb_tokenizer",
    "CiderD": "caption",
    "CaptionReward": "caption",
    "bleu": "caption",
    "rouge_l": "caption",
    "Frame": "frames",
    "convert_boxes": "frames",
    "convert_points": "frames",
    "ParsedOutput": "box_parsing",
    "get_parser": "box_parsing",
    "iou": "box_scores",
    "giou": "box_scores",
    "match_boxes": "box_scores",
    "match_points": "box_scores",
    "point_in_box": "box_scores",
    "GroundingReward": "grounding",
    "PointInBoxReward": "grounding",
    "TemporalIoUReward": "temporal",
    "temporal_iou": "temporal",
    "parse_segments": "temporal_parsing",
    "CountReward": "answer",
    "ChoiceReward": "answer",
    "NumericReward": "answer",
    "MathReward": "answer",
    "clevr_count_reward": "answer",
    "geometry3k_reward": "answer",
    "ThinkAnswerFormat": "format",
    "LengthPenalty": "format",
    "WeightedSum": "combine",
    "ByTask": "combine",
    "CLIPScoreReward": "clip_score",
    "get_reward": "registry",
    "PlainReward": "plain",
    "TRLReward": "for_trl",
    "AsyncTRLReward": "for_trl",
    "VerlReward": "for_verl",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vlrollout.rewards' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
