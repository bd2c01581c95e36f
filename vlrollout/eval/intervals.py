"""Uncertainty of benchmark numbers: bootstrap intervals over items, and pass@k.

An evaluation scores a sample of items; a second sample of the same size would give another
number. :func:`bootstrap_interval` estimates that spread by resampling the items with replacement
and recomputing the metric on each resample, so it works for means (IoU, exact match) and for
metrics of the whole split alike (CIDEr-D's document frequencies, corpus BLEU are recomputed on
each resample). :func:`pass_at_k` is the chance that at least one of ``k`` samples is correct.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def bootstrap_interval(
    scores: Sequence[T],
    metric: Callable[[Sequence[T]], float],
    n: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric`` over ``scores`` (Efron and Tibshirani 1993, §13).

    Each of ``n`` resamples draws ``len(scores)`` items with replacement (a ``numpy``
    ``default_rng(seed)``: the same seed, size and ``n`` give the same resamples, whatever the
    metric, so several metrics of one evaluation share them) and calls ``metric`` on the list; the
    interval is the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (linear interpolation) of
    the values. Resamples where ``metric`` returns NaN are left out; all NaN gives ``(nan, nan)``.

    Args:
        scores: The items' scores (any objects ``metric`` reads).
        metric: The statistic of a list of scores: a mean, or a metric of the whole list.
        n: Number of resamples (>= 1).
        seed: Seed of the resampling.
        level: Coverage, in (0, 1).

    Returns:
        ``(low, high)``; ``(v, v)`` for a single item (every resample is that item).

    >>> bootstrap_interval([1.0] * 5, lambda s: sum(s) / len(s))
    (1.0, 1.0)
    """
    if not scores:
        raise ValueError("bootstrap_interval needs at least one score")
    if n < 1:
        raise ValueError(f"n (resamples) must be >= 1, got {n}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    items = list(scores)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(items), size=(n, len(items)))
    values = np.array([metric([items[i] for i in row]) for row in draws], dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return math.nan, math.nan
    tail = (1.0 - level) / 2
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct (Chen et al.
    2021, arXiv:2107.03374, §2.1): ``1 - C(n - c, k) / C(n, k)``, computed as a product.

    >>> pass_at_k(2, 1, 1), pass_at_k(4, 1, 2), pass_at_k(3, 0, 3)
    (0.5, 0.5, 0.0)
    """
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(
            f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got {n=}, {c=}, {k=}"
        )
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))
