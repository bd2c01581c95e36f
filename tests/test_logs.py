"""Our log records reach a command's stderr even after AReaL resets logging (its ``getLogger``
replaces the root logger and manager on every call, orphaning handlers set on the old root)."""

from __future__ import annotations

import logging

from areal.utils import logging as areal_logging

from tests.records import Records
from vlrollout.logs import get_logger, log_to_stderr


def test_records_reach_stderr_through_areals_resets_once_each(capsys):
    before = get_logger("vlrollout.test_logs.before")
    logging.basicConfig(level=logging.INFO)  # a root handler too: records must not print twice
    log_to_stderr(logging.INFO)
    areal_logging.getLogger("AnAReaLModule")  # what AReaL does on import and engine builds
    after = get_logger("vlrollout.test_logs.after")
    areal_logging.getLogger("AnotherAReaLModule")
    before.info("made before the resets")
    after.warning("made after one")
    after.debug("below the level")
    err = capsys.readouterr().err
    assert err.count("INFO vlrollout.test_logs.before: made before the resets") == 1, err
    assert err.count("WARNING vlrollout.test_logs.after: made after one") == 1, err
    assert "below the level" not in err


def test_every_module_logger_of_ours_is_made_with_get_logger():
    """A module that used ``logging.getLogger`` would be back to losing its records."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    offenders = [
        str(path.relative_to(root))
        for folder in ("vlrollout", "processors", "rewards")
        for path in (root / folder).rglob("*.py")
        if path.name != "logs.py" and re.search(r"(?<!\w)logging\.getLogger\(", path.read_text())
    ]
    assert offenders == []


def test_debug_shows_the_traceback_of_a_rejection_and_its_reward_worker_note(capsys):
    """``vlrollout run --debug`` logs at DEBUG: each rejection's traceback, down to the reward
    worker's (kept as a note on the exception the worker handed back)."""
    from vlrollout.ledger import EpisodeLedger
    from vlrollout.workflows.steps import EpisodeRejected

    def reject_one(ledger: EpisodeLedger) -> None:
        cause = ValueError("no boxes")
        cause.add_note("in the reward worker:\nTraceback ... in score")
        try:
            raise EpisodeRejected("reward_error", "ValueError: no boxes") from cause
        except EpisodeRejected as e:
            ledger.reject("item q", e.reason, e.detail, error=e)

    try:
        log_to_stderr(logging.WARNING)
        reject_one(EpisodeLedger())
        quiet = capsys.readouterr().err
        log_to_stderr(logging.DEBUG)
        reject_one(EpisodeLedger())
        loud = capsys.readouterr().err
    finally:
        log_to_stderr(logging.WARNING)
    assert "rejected item q: reward_error: ValueError: no boxes" in quiet
    assert "Traceback" not in quiet
    assert "traceback of the rejection of item q" in loud
    assert "in the reward worker:" in loud and "raise EpisodeRejected" in loud


def test_a_group_failing_alike_logs_one_warning_and_counts_every_episode():
    from vlrollout.ledger import EpisodeLedger, logger

    with Records(logger) as warnings:
        ledger = EpisodeLedger()
        for _ in range(4):
            ledger.reject("item a", "image_decode", "truncated JPEG")
        ledger.reject("item b", "image_decode", "truncated JPEG")
        ledger.reject("item a", "reward_error", "KeyError: 'boxes'")
    assert warnings.text.splitlines() == [
        "rejected item a: image_decode: truncated JPEG",
        "rejected item b: image_decode: truncated JPEG",
        "rejected item a: reward_error: KeyError: 'boxes'",
    ]
    assert ledger.summary()["rejected_by_reason"] == {"image_decode": 5, "reward_error": 1}
