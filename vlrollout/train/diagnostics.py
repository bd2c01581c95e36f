"""Per-step numbers that say why a GRPO step did or did not move the policy.

``metrics.jsonl`` already has the sampled reward's mean and spread over the whole batch and the
fraction of all-equal groups. What decides the size and sign of a GRPO update is finer: how far
rewards spread *within* each group (group normalisation turns any nonzero spread, however small,
into unit-scale advantages), how many generated tokens carry a nonzero advantage at all, and, for
grounding, what the sampled boxes look like (too large, empty, unreadable), since a reward can
rise or stall for reasons the mean alone hides.

:func:`batch_diagnostics` computes them from the step's trajectories (AReaL's rollout batch: one
dict per group, ``rewards`` of shape ``[n]``, ``input_ids``/``loss_mask`` of shape ``[n, L]``) and
the advantages ``compute_advantages`` returned. Box numbers appear only when the training items
have ``boxes`` (the grounding task).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

ADV_EPS = 1e-6
"""An advantage of at most this magnitude counts as zero (group normalisation divides by
``std + eps``: an all-equal group's advantages are exactly 0, others are of order 1)."""


def group_spread(batch: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean within-group reward standard deviation and mean within-group range.

    >>> import torch
    >>> g = [{"rewards": torch.tensor([0.0, 1.0])}, {"rewards": torch.tensor([0.5, 0.5])}]
    >>> group_spread(g)
    {'group_reward_std': 0.25, 'group_reward_range': 0.5}
    """
    stds, ranges = [], []
    for group in batch:
        r = [float(v) for v in group["rewards"].flatten()]
        stds.append(statistics.pstdev(r))
        ranges.append(max(r) - min(r))
    return {
        "group_reward_std": statistics.fmean(stds),
        "group_reward_range": statistics.fmean(ranges),
    }


def nonzero_advantage_fraction(adv_batch: Sequence[Mapping[str, Any]]) -> float:
    """Fraction of trained tokens (``loss_mask``) whose advantage is not zero: the share of the
    batch that moves the policy at all."""
    hit = total = 0
    for traj in adv_batch:
        mask = traj["loss_mask"].bool()
        hit += int(((traj["advantages"].abs() > ADV_EPS) & mask).sum())
        total += int(mask.sum())
    return hit / total if total else 0.0


def completions(batch: Sequence[Mapping[str, Any]], tokenizer: Any) -> list[str]:
    """Every generated completion of the batch, decoded with special tokens kept (Qwen2-VL's box
    markers are special tokens)."""
    texts = []
    for group in batch:
        for ids, mask in zip(group["input_ids"], group["loss_mask"], strict=True):
            texts.append(tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=False))
    return texts


def true_area_fraction(items: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean area of the items' (first) label box as a fraction of the image; ``None`` when the
    items have no boxes and sizes."""
    fractions = []
    for item in items:
        boxes, size = item.get("boxes"), item.get("image_size")
        if not boxes or not size:
            continue
        x1, y1, x2, y2 = boxes[0]
        fractions.append((x2 - x1) * (y2 - y1) / (size[0] * size[1]))
    return statistics.fmean(fractions) if fractions else None


def box_stats(texts: Sequence[str], true_area: float) -> dict[str, float]:
    """Sampled Qwen2-VL boxes (0..1000 frame) against the label boxes' mean area.

    ``frac_no_box``: no box parsed; ``frac_bad_box``: a box with zero area or inverted corners;
    ``pred_area``: mean area of the valid boxes as a fraction of the image;
    ``pred_area_ratio``: that over ``true_area`` (> 1: boxes larger than the objects).

    >>> box_stats(["<|box_start|>(0,0),(500,500)<|box_end|>", "none"], 0.125)
    {'frac_no_box': 0.5, 'frac_bad_box': 0.0, 'pred_area': 0.25, 'pred_area_ratio': 2.0}
    """
    from vlrollout.rewards.box_parsing import parse_qwen2_vl

    none = bad = 0
    areas = []
    for text in texts:
        boxes = parse_qwen2_vl(text).boxes
        if not boxes:
            none += 1
            continue
        x1, y1, x2, y2 = boxes[0]
        w, h = min(x2, 1000) - max(x1, 0), min(y2, 1000) - max(y1, 0)
        if not (w > 0 and h > 0):
            bad += 1
            continue
        areas.append(w * h / 1e6)
    n = max(1, len(texts))
    area = statistics.fmean(areas) if areas else 0.0
    return {
        "frac_no_box": none / n,
        "frac_bad_box": bad / n,
        "pred_area": area,
        "pred_area_ratio": area / true_area if true_area else 0.0,
    }


def batch_diagnostics(
    batch: Sequence[Mapping[str, Any]],
    adv_batch: Sequence[Mapping[str, Any]],
    tokenizer: Any,
    true_area: float | None = None,
) -> dict[str, float]:
    """The step's diagnostics for ``metrics.jsonl`` under ``diag/``.

    Args:
        batch: The rollout batch as it came from the engine (unrolled ``loss_mask``).
        adv_batch: ``compute_advantages``' output for it (``advantages`` and its ``loss_mask``).
        tokenizer: Decodes the completions (box numbers only).
        true_area: :func:`true_area_fraction` of the training items; ``None`` skips box numbers.
    """
    out = {**group_spread(batch), "frac_tokens_nonzero_adv": nonzero_advantage_fraction(adv_batch)}
    if true_area is not None:
        out.update(box_stats(completions(batch, tokenizer), true_area))
    return {f"diag/{k}": v for k, v in out.items()}
