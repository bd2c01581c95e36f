"""Bootstrap intervals and pass@k against hand-derived values and their defining properties."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from vlrollout.eval.intervals import bootstrap_interval, pass_at_k


def _comb_pass_at_k(n: int, c: int, k: int) -> float:
    """The definition: 1 - C(n - c, k) / C(n, k) (C(m, k) = 0 when m < k)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_pass_at_k_hand_derived():
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # k = 1: the fraction correct
    assert pass_at_k(5, 4, 2) == 1.0  # fewer wrong samples than k: one of any k is right
    assert pass_at_k(5, 0, 5) == 0.0
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_comb_pass_at_k(n, c, k), abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 4), (3, 1, 0)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k needs"):
        pass_at_k(n, c, k)


def _mean(sample):
    return statistics.fmean(sample)


def test_bootstrap_hand_derived():
    # Two items 0 and 1: a resample's mean is 0, 0.5 or 1 with chances 1/4, 1/2, 1/4, so the
    # 2.5% and 97.5% quantiles of 1000 resamples are 0 and 1.
    assert bootstrap_interval([0.0, 1.0], _mean) == (0.0, 1.0)
    # A statistic of the whole resample (max of 1..10), not a mean: P(max <= 7) = 0.7^10 = 0.03
    # and P(max <= 8) = 0.8^10 = 0.11 put the 5% quantile at 8; P(max = 10) = 0.65, the 95% at 10.
    assert bootstrap_interval(list(range(1, 11)), max, level=0.9) == (8.0, 10.0)


def test_bootstrap_is_the_percentile_interval_of_the_resample_statistics():
    seen: list[float] = []

    def record(sample):
        seen.append(_mean(sample))
        return seen[-1]

    got = bootstrap_interval([0.1, 0.9, 0.4, 0.7, 0.2, 0.3], record, n=400, level=0.8)
    assert got == tuple(np.quantile(seen, [0.1, 0.9]))  # (1 -/+ level) / 2


def test_bootstrap_leaves_nan_resamples_out():
    def mean_without_outlier(sample):  # undefined (NaN) when the outlier was drawn
        return math.nan if 5.0 in sample else _mean(sample)

    lo, hi = bootstrap_interval([5.0, 1.0, 2.0], mean_without_outlier, n=200)
    assert 1.0 <= lo < hi <= 2.0


def test_bootstrap_single_item_and_all_nan():
    assert bootstrap_interval([0.25], _mean, n=50) == (0.25, 0.25)
    lo, hi = bootstrap_interval([1.0, 2.0], lambda s: math.nan, n=5)
    assert math.isnan(lo) and math.isnan(hi)


def test_bootstrap_resamples_depend_on_the_seed_only():
    values = [0.1, 0.9, 0.4, 0.7, 0.2, 0.3]
    seen: list[list[float]] = []

    def record(sample):
        seen.append(list(sample))
        return _mean(sample)

    first = bootstrap_interval(values, record, n=20, seed=3)
    drawn = list(seen)
    seen.clear()
    assert bootstrap_interval(values, record, n=20, seed=3) == first and seen == drawn
    assert len(drawn) == 20 and all(len(s) == len(values) for s in drawn)
    assert bootstrap_interval(values, _mean, n=20, seed=4) != first


@pytest.mark.parametrize(
    ("scores", "kw", "match"),
    [([], {}, "at least one"), ([1.0], {"n": 0}, "n"), ([1.0], {"level": 1.0}, "level")],
)
def test_bootstrap_refuses_bad_arguments(scores, kw, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_interval(scores, _mean, **kw)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30), st.integers(0, 1000))
@example([0.0, 0.0, 0.7966004977406433], 0)  # a resample mean rounding above the largest value
def test_bootstrap_interval_contains_the_mean(values, seed):
    lo, hi = bootstrap_interval(values, _mean, n=200, seed=seed)
    assert lo <= _mean(values) + 1e-12 and _mean(values) - 1e-12 <= hi
    # a resample of one value repeated averages to it up to rounding (3 * v / 3 may exceed v)
    assert min(values) - 1e-12 <= lo <= hi <= max(values) + 1e-12
