"""The ledger's view of one batch (:meth:`EpisodeLedger.since`) and the reasons it reports."""

from __future__ import annotations

from vlrollout.ledger import EpisodeLedger, NothingAccepted, top_reasons


def test_since_counts_only_what_came_after_the_mark():
    ledger = EpisodeLedger()
    ledger.accept()
    ledger.reject("item a", "engine_error", "gone")
    mark = ledger.mark()
    ledger.accept()
    ledger.reject("item b", "reward_error", "KeyError")
    ledger.reject("item c", "reward_error", "KeyError")
    batch = ledger.since(mark)
    assert {k: batch[k] for k in ("submitted", "accepted", "rejected")} == {
        "submitted": 3,
        "accepted": 1,
        "rejected": 2,
    }
    assert batch["rejected_by_reason"] == {"reward_error": 2}
    assert [r["item"] for r in batch["rejections"]] == ["item b", "item c"]
    assert ledger.since(ledger.mark())["rejections"] == []


def test_since_keeps_exact_counts_beyond_the_kept_records():
    ledger = EpisodeLedger(keep=2)
    mark = ledger.mark()
    for i in range(5):
        ledger.reject(f"item {i}", "image_decode", "truncated")
    batch = ledger.since(mark)
    assert batch["rejected"] == 5 and batch["rejected_by_reason"] == {"image_decode": 5}
    assert [r["item"] for r in batch["rejections"]] == ["item 3", "item 4"]


def test_top_reasons_by_count_with_the_first_example():
    rows = [
        {"item": "item a", "reason": "bad_message", "detail": "null"},
        {"item": "item b", "reason": "engine_error", "detail": "gone"},
        {"item": "item c", "reason": "engine_error", "detail": "gone"},
    ]
    assert [(r, n, e["item"]) for r, n, e in top_reasons(rows)] == [
        ("engine_error", 2, "item b"),
        ("bad_message", 1, "item a"),
    ]
    assert len(top_reasons(rows, n=1)) == 1


def test_nothing_accepted_shortens_long_details_to_one_line():
    detail = "Traceback line\n" + "x" * 500
    err = NothingAccepted("the run", 1, [{"item": "item a", "reason": "r", "detail": detail}])
    line = str(err).splitlines()[1]
    assert line.startswith("  r: 1 (e.g. item a: Traceback line xxx") and line.endswith("...)")
    assert len(line) < 200
