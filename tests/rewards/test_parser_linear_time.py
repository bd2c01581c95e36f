"""The box parsers and text extractors take time linear in the length of hostile model output.

The inputs are the benchmark's (``bench/bench_parsers.py``: each case's unit repeated, built by
its ``case_text``), at 10 KB and 100 KB. Linear time grows about 10x between the two, a quadratic
scan 100x; the bound, 100 KB within ``RATIO`` times 10 KB plus ``SLACK_S``, sits well between,
so a loaded machine does not fail it while a quadratic parser does. Each time is the fastest of
several calls (other processes only ever add time), and a case over the bound is measured once
more before it fails. The benchmark itself measures up to 1 MB and fits the growth exponent.
"""

from __future__ import annotations

import time
from pathlib import Path

RATIO = 20.0
SLACK_S = 0.02
SMALL, LARGE = 10_000, 100_000
BENCH = Path(__file__).resolve().parents[2] / "bench"


def _fastest(fn, text: str) -> float:
    """The fastest of at least 3 calls and 50 ms in all; one call when it alone takes 2 s."""
    best, total, runs = float("inf"), 0.0, 0
    while runs < 3 or total < 0.05:
        start = time.perf_counter()
        fn(text)
        took = time.perf_counter() - start
        best, total, runs = min(best, took), total + took, runs + 1
        if took > 2.0:
            break
    return best


def _over_bound(fn, small_text: str, large_text: str) -> tuple[float, float] | None:
    """``(small_s, large_s)`` when the large input takes longer than the bound, else ``None``."""
    small, large = _fastest(fn, small_text), _fastest(fn, large_text)
    return (small, large) if large > RATIO * small + SLACK_S else None


def test_parsers_take_linear_time_on_hostile_output(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from bench_parsers import PARSER_CASES, case_text

    assert len(PARSER_CASES) >= 20  # every box format and extractor of the benchmark
    slow = []
    for name, fn, unit in PARSER_CASES:
        texts = case_text(unit, SMALL), case_text(unit, LARGE)
        times = _over_bound(fn, *texts) and _over_bound(fn, *texts)  # measured again to fail
        if times:
            small, large = times
            slow.append(
                f"{name}: {large * 1000:.1f} ms at {LARGE // 1000} KB > {RATIO:g} x "
                f"{small * 1000:.1f} ms at {SMALL // 1000} KB + {SLACK_S * 1000:.0f} ms"
            )
    assert slow == [], "superlinear parsers:\n" + "\n".join(slow)


#: Hostile units for the temporal segment parser (not in the benchmark's cases): number lists,
#: dangling separators and minus signs, unclosed clocks, unit and frame words, brackets.
SEGMENT_UNITS = ["1,", "[1, 2]", "-1", "1s to 2s ", "0:", "frames ", "["]


def test_segment_parser_takes_linear_time_on_hostile_output():
    from vlrollout.rewards.temporal_parsing import parse_segments

    slow = []
    for unit in SEGMENT_UNITS:
        texts = (unit * (SMALL // len(unit)), unit * (LARGE // len(unit)))
        times = _over_bound(parse_segments, *texts) and _over_bound(parse_segments, *texts)
        if times:
            slow.append(f"{unit!r}: {times[1] * 1000:.1f} ms vs {times[0] * 1000:.1f} ms")
    assert slow == [], "superlinear segment parsing:\n" + "\n".join(slow)
