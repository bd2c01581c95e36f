"""``bench/bench_train_step.py``'s summary of a run, on fabricated ``metrics.jsonl`` rows (the
benchmark itself trains for minutes per run)."""

from __future__ import annotations

import doctest
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import bench_train_step as bench  # noqa: E402


def _row(step: int, stale: int, rollout: float, update: float, **extra) -> dict:
    times = {"rollout": rollout, "logp": 1.0, "update": update, "weight_sync": 0.5}
    row = {"step": step, "gen_tokens": 100, "staleness_max": stale, **extra}
    row.update({f"time/{p}": t for p, t in times.items()})
    row["time/step"] = sum(times.values())
    return row


def test_the_summary_expects_min_step_minus_one_k_and_sets_the_first_update_apart():
    rows = [
        _row(1, 0, 2.0, 6.0, **{"time/setup": 3.0}),
        _row(2, 1, 0.5, 2.0),
        _row(3, 2, 0.5, 4.0),
        _row(4, 2, 0.5, 3.0),
    ]
    m = bench.summary(rows, k=2)
    assert m["staleness"] == m["staleness_expected"] == [0, 1, 2, 2]
    assert m["setup"] == 3.0 and m["first_update_ratio"] == pytest.approx(2.0)
    assert m["wait_share"] == pytest.approx((0.5 / 4.0 + 0.5 / 6.0 + 0.5 / 5.0) / 3)
    assert bench.summary(rows, k=1)["staleness_expected"] == [0, 1, 1, 1]


def test_staleness_is_judged_as_overlap_bounded_by_k():
    """Each asynchronous step after the first overlaps (at least 1 version old) and is never
    older than k allows; a k = 2 step one version old (its rollouts started late) still
    overlapped, a step at 0 did not."""
    rows = [_row(s, stale, 0.5, 2.0) for s, stale in ((1, 0), (2, 1), (3, 1), (4, 2))]
    assert bench.summary(rows, k=2)["staleness_ok"]
    late = [_row(s, stale, 0.5, 2.0) for s, stale in ((1, 0), (2, 1), (3, 0))]
    assert not bench.summary(late, k=1)["staleness_ok"]
    too_old = [_row(s, stale, 0.5, 2.0) for s, stale in ((1, 0), (2, 2))]
    assert not bench.summary(too_old, k=2)["staleness_ok"]


def test_the_first_update_headline_sets_apart_runs_whose_first_step_overlaps_more():
    means = {
        ("embedded", 0): {"first_update_ratio": 1.04},
        ("embedded", 1): {"first_update_ratio": 0.97},
        ("served", 1): {"first_update_ratio": 1.08},
        ("served", 2): {"first_update_ratio": 1.30},
    }
    text = bench.first_update_verdict(means)
    assert text.startswith("first update over the later ones' mean, worst run with k <= 1: 1.08")
    assert "k >= 2 (the first update overlaps k batches of rollouts, a later one 1): 1.30" in text
    assert "k >= 2" not in bench.first_update_verdict({("embedded", 0): {"first_update_ratio": 1}})


def test_docstring_examples():
    assert doctest.testmod(bench).failed == 0


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--steps", "1"], "argument --steps: must be at least 2, got 1"),
        (["--batch", "0"], "argument --batch: must be at least 1, got 0"),
        (["--group", "0"], "argument --group: must be at least 1, got 0"),
        (["--offpolicy", "-1"], "argument --offpolicy: must be at least 0, got -1"),
    ],
)
def test_flags_that_leave_nothing_to_compare_are_refused(capsys, flags, message):
    with pytest.raises(SystemExit) as stop:
        bench.parse(flags)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_k_0_is_always_run_as_the_reference():
    assert bench.parse(["--offpolicy", "2", "1"]).offpolicy == [0, 1, 2]
    assert bench.parse([]).offpolicy == [0, 1, 2]
