"""The scaling benchmark's side-by-side timing (bench/scaling_points.py): the order the two
sides' timed runs take, and the points built from their medians."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scaling_points import (  # noqa: E402
    EngineSide,
    GenerateSide,
    VisionCounter,
    Worker,
    item,
    load,
    prepare_group,
    preprocessor,
    rows_per_image,
    run_order,
    timing_points,
)
from scaling_shapes import TINY  # noqa: E402

JOB = {"side": "engine", "shape": "tiny", "params": 2_450_000}
SPEC = {"axis": "group", "tokens": 64, "group": 4, "images": 1, "new_tokens": 5}


def test_the_sides_alternate_and_swap_who_goes_first_each_round():
    assert run_order(["engine", "generate"], 3) == [
        "engine",
        "generate",
        "generate",
        "engine",
        "engine",
        "generate",
    ]


@pytest.mark.parametrize("repeats", [1, 2, 3, 4])
def test_each_side_runs_its_repeats_and_no_side_runs_twice_before_the_other_once(repeats):
    order = run_order(["engine", "generate"], repeats)
    assert order.count("engine") == order.count("generate") == repeats
    for r in range(repeats):
        assert sorted(order[2 * r : 2 * r + 2]) == ["engine", "generate"]


def test_one_side_alone_runs_its_repeats():
    assert run_order(["generate"], 3) == ["generate"] * 3


def test_repeats_below_one_are_refused():
    with pytest.raises(ValueError, match="repeats"):
        run_order(["engine", "generate"], 0)


def test_timing_points_are_the_medians_of_the_runs_not_their_means():
    # (total, prefill) per run; one slow outlier the median ignores
    runs = [(2.0, 0.5), (9.0, 4.0), (2.2, 0.6)]
    got = {p["metric"]: p["value"] for p in timing_points(JOB, SPEC, runs)}
    assert got["time/total"] == 2.2
    assert got["time/prefill"] == 0.6
    assert got["time/decode"] == pytest.approx(1.6)  # median of 1.5, 5.0, 1.6
    assert got["time/decode_per_token"] == pytest.approx(1.6 / 4)
    assert got["tokens_per_s"] == pytest.approx(4 * 5 / 2.2)


def test_timing_points_carry_the_side_and_the_fixed_settings():
    points = timing_points(JOB, SPEC, [(1.0, 0.25)])
    assert {p["path"] for p in points} == {"engine"}
    assert all(
        p["x"] == 4 and p["fixed"] == {"tokens": 64, "images": 1, "new_tokens": 5} for p in points
    )
    assert {p["metric"]: p["unit"] for p in points}["tokens_per_s"] == "tok/s"


def test_timing_points_need_a_run():
    with pytest.raises(ValueError, match="no timed run"):
        timing_points(JOB, SPEC, [])


def test_every_engine_run_encodes_its_images_as_a_new_request_would():
    # The engine keeps the features it encoded; a timed run that found them there would skip the
    # encoding that generate pays on every run, and the next point with the same picture would
    # count no image encoded.
    model, processor = load({"folder": str(TINY), "dtype": "float32"})
    side = EngineSide(model, processor, "cpu", max_batch=4)
    try:
        pre = preprocessor(processor, "tiny", 64)
        _, _, prepared = asyncio.run(prepare_group(pre, item("tiny", 64, 1), 2))
        rows = []
        for _ in range(2):
            with VisionCounter(side.model) as counter:
                side.run(prepared, 2, 2)
            rows.append(counter.rows / rows_per_image(prepared))
    finally:
        side.close()
    assert rows == [1.0, 1.0]


@pytest.mark.parametrize("side", [EngineSide, GenerateSide])
def test_each_side_runs_once_before_its_first_point(monkeypatch, side):
    # A process's first run pays one-time costs (allocator pools, the first forward's set-up);
    # run in the first point's peak run, they showed as several times that point's memory.
    calls = []

    def run(self, inputs, group, new_tokens):
        calls.append((type(self), type(inputs).__name__, group, new_tokens))
        return 0.0, 0.0

    monkeypatch.setattr(side, "run", run)
    name = "engine" if side is EngineSide else "generate"
    points = [{**SPEC, "tokens": 256}, SPEC]
    job = {**JOB, "side": name, "folder": str(TINY), "dtype": "float32", "device": "cpu"}
    worker = Worker({**job, "max_batch": 4, "points": points})
    try:
        inputs = "PreparedPrompt" if side is EngineSide else "dict"
        assert calls == [(side, inputs, 1, 2)]
        assert set(worker.pres) == {64}  # the smallest point's prompt
    finally:
        worker.close()
