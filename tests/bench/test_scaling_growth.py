"""Growth exponents of the scaling benchmark (bench/scaling_growth.py): the log-log slope and the
flags above each cost's expected order, on hand-derived series."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scaling_growth import expected, exponent, fits  # noqa: E402


def _points(path, metric, axis, xs, ys, unit="s", shape="tiny"):
    return [
        {
            "path": path,
            "shape": shape,
            "axis": axis,
            "x": x,
            "metric": metric,
            "value": y,
            "unit": unit,
            "fixed": {"tokens": 64},
        }
        for x, y in zip(xs, ys, strict=True)
    ]


@pytest.mark.parametrize(
    ("ys", "k"),
    [([3, 12, 48, 192], 2.0), ([5, 5, 5, 5], 0.0), ([2, 4, 8, 16], 1.0), ([8, 4, 2, 1], -1.0)],
)
def test_the_slope_of_a_power_law_is_its_power(ys, k):
    # y = c x^k at x = 1, 2, 4, 8: log y = log c + k log x exactly.
    assert exponent([1, 2, 4, 8], ys) == pytest.approx(k, abs=1e-12)


def test_a_noisy_series_gets_the_least_squares_slope():
    # log2 x = 0, 1, 2; log2 y = 0, 2, 2: the least-squares slope is (0*(-1) + 2*0 + 2*1)/2 = 1.
    assert exponent([1, 2, 4], [1, 4, 4]) == pytest.approx(1.0)
    # Four points: log2 y = 0, 3, 1, 3 gives 3.5 / 5 = 0.7, not the end points' slope of 1.
    assert exponent([1, 2, 4, 8], [1, 8, 2, 8]) == pytest.approx(0.7)
    assert exponent([1, 10], [1, 10**1.5]) == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("xs", "ys"), [([1, 1], [1, 2]), ([1, 2], [0, 1]), ([-1, 2], [1, 1]), ([1, 2], [1])]
)
def test_a_series_that_cannot_be_fitted_is_refused(xs, ys):
    with pytest.raises(ValueError):
        exponent(xs, ys)


def test_a_cost_above_its_order_is_flagged_and_one_at_its_order_is_not():
    quadratic = _points("engine", "time/total", "group", [1, 2, 4, 8], [1, 4, 16, 64])
    linear = _points("generate", "time/total", "group", [1, 2, 4, 8], [1, 2, 4, 8])
    found = {f.path: f for f in fits(quadratic + linear)}
    assert found["engine"].exponent == pytest.approx(2.0)
    assert found["engine"].flagged and found["engine"].expected == 1.0
    assert not found["generate"].flagged


def test_prefill_may_grow_quadratically_in_tokens_but_not_faster():
    xs = [64, 256, 1024]
    ok = _points("engine", "time/prefill", "tokens", xs, [x**2 / 1e4 for x in xs])
    cubic = _points("generate", "time/prefill", "tokens", xs, [x**3 / 1e6 for x in xs])
    found = {f.path: f for f in fits(ok + cubic)}
    assert not found["engine"].flagged
    assert found["generate"].flagged and found["generate"].exponent == pytest.approx(3.0)


def test_a_prompt_prepared_per_copy_is_flagged_against_the_group():
    per_copy = _points("prompt", "time/prepare_group", "group", [1, 4, 16], [0.1, 0.4, 1.6])
    (fit,) = fits(per_copy)
    assert fit.expected == 0.0 and fit.flagged


def test_costs_under_the_noise_floor_are_fitted_but_not_flagged():
    tiny = _points("engine", "time/total", "group", [1, 2, 4], [0.001, 0.004, 0.016])
    (fit,) = fits(tiny)
    assert fit.exponent == pytest.approx(2.0) and not fit.flagged
    assert "noise floor" in fit.note


def test_generate_encoding_every_copy_is_the_reference_not_a_flag():
    assert expected("images_encoded", "group", "generate") is None
    assert expected("images_encoded", "group", "engine") == 0.0
    per_copy = _points("generate", "images_encoded", "group", [1, 4], [1, 4], unit="count")
    engine = _points("engine", "images_encoded", "group", [1, 4], [1, 4], unit="count")
    found = {f.path: f for f in fits(per_copy + engine)}
    assert not found["generate"].flagged and found["engine"].flagged


def test_the_size_axis_is_one_series_across_shapes():
    points = []
    for shape, params, seconds in (("tiny", 2e6, 0.2), ("20m", 2e7, 2.0), ("100m", 1e8, 10.0)):
        points += _points("engine", "time/total", "size", [params], [seconds], shape=shape)
    (fit,) = fits(points)
    assert fit.shape == "all" and fit.points == 3
    assert fit.exponent == pytest.approx(1.0) and not math.isnan(fit.exponent)


@pytest.mark.parametrize("metric", ["time/prefill", "time/total", "latency"])
def test_a_prompt_cost_against_images_per_prompt_is_judged_like_one_against_image_tokens(metric):
    # Each image lengthens the one prompt, so the prefill's attention grows with the square of
    # the images, as it does with the square of the tokens of one image.
    assert expected(metric, "images") == expected(metric, "tokens") == 2.0
    (fit,) = fits(_points("engine", metric, "images", [1, 2, 4], [0.5, 1.5, 4.5]))
    assert fit.exponent == pytest.approx(math.log(3, 2), abs=1e-3) and not fit.flagged


def test_a_decode_step_against_images_per_prompt_stays_linear():
    (fit,) = fits(_points("engine", "time/decode_per_token", "images", [1, 2, 4], [0.5, 1.5, 4.5]))
    assert fit.expected == 1.0 and fit.flagged
