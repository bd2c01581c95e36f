"""Our log records reach a command's stderr even after AReaL resets logging (its ``getLogger``
replaces the root logger and manager on every call, orphaning handlers set on the old root);
under ``vlrollout train`` AReaL's and other libraries' INFO lines go to the run's log file, and
the terminal keeps our lines and warnings (everything with ``--debug``)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from areal.utils import logging as areal_logging
from tqdm import tqdm

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


def test_our_lines_are_written_above_a_progress_bar_not_into_it(capsys):
    """A record printed while a ``tqdm`` bar is on the terminal starts a line of its own: the bar
    is cleared before it and redrawn after it."""

    logger = get_logger("vlrollout.test_logs.bar")
    try:
        log_to_stderr(logging.INFO)
        with tqdm(total=3, file=sys.stderr, mininterval=0) as bar:
            bar.update(1)
            logger.info("held-out eval at step 1: mean 0.2")
            bar.update(1)
    finally:
        log_to_stderr(logging.WARNING)
    err = capsys.readouterr().err
    (line,) = [x for x in err.split("\n") if "held-out eval at step 1" in x]
    assert line.split("\r")[-1].endswith(
        "INFO vlrollout.test_logs.bar: held-out eval at step 1: mean 0.2"
    )
    assert re.match(r"\d{4}-\d\d-\d\d ", line.split("\r")[-1]), repr(line)
    assert "2/3" in err.split("held-out eval at step 1")[1]  # the bar, redrawn below


RUN_LOG_SCRIPT = """
import logging, sys, warnings
from pathlib import Path

library = logging.getLogger("a_library")  # made before AReaL resets logging, as on import
from areal.utils import logging as areal_logging
from vlrollout.logs import get_logger, log_run_to, log_to_stderr

engine = areal_logging.getLogger("[FSDPEngine Rank 0]")  # made before the run's logging
log_to_stderr(logging.WARNING)  # what `vlrollout train` sets before the trainer runs
ours = get_logger("vlrollout.train.evaluation")
for mode, debug in (("quiet", False), ("debug", True)):
    print(f"=== {mode}", file=sys.stderr, flush=True)
    log_run_to(Path(sys.argv[1]) / f"{mode}.log", debug)
    actor = areal_logging.getLogger(f"PPOActor {mode}")  # made after (an actor's build)
    orphan = logging.getLogger(f"late_library_{mode}")  # under one of AReaL's replacement roots
    engine.info(f"Microbatch #tokens (rank 0): [12] {mode}")
    actor.info(f"actor info {mode}")
    actor.warning(f"actor warning {mode}")
    library.info(f"library info {mode}")
    library.warning(f"library warning {mode}")
    orphan.warning(f"late library warning {mode}")
    ours.info(f"held-out eval at step 0: mean 0.1 {mode}")
    ours.debug(f"our debug {mode}")
    warnings.warn(f"a library's warning {mode}", UserWarning)
    from transformers.utils import logging as transformers_logging
    print(f"progress bars {transformers_logging.is_progress_bar_enabled()} {mode}", flush=True)
"""


@pytest.fixture(scope="module")
def run_log(tmp_path_factory) -> tuple[dict[str, str], Path]:
    """The terminal (stdout and stderr) of a process that logs as ``vlrollout train`` does,
    once quietly and once with ``--debug``, split by mode; and the folder of its log files."""
    folder = tmp_path_factory.mktemp("run_log")
    done = subprocess.run(
        [sys.executable, "-u", "-c", RUN_LOG_SCRIPT, str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=True,
    )
    _, quiet, debug = re.split(r"^=== (?:quiet|debug)\n", done.stdout, flags=re.M)
    return {"quiet": quiet, "debug": debug}, folder


def test_areals_and_libraries_info_go_to_the_run_log_not_the_terminal(run_log):
    terminal, folder = run_log
    quiet, filed = terminal["quiet"], (folder / "quiet.log").read_text()
    for line in ("Microbatch #tokens (rank 0): [12]", "actor info", "library info"):
        assert line not in quiet, quiet
        assert f"{line} quiet" in filed, filed
    for line in ("actor warning", "library warning", "late library warning"):
        assert f"{line} quiet" in quiet and f"{line} quiet" in filed
    assert "(AReaL)" not in quiet  # AReaL's own handlers print nothing
    assert "UserWarning: a library's warning quiet" in quiet
    assert "WARNING py.warnings: <string>" in filed and "a library's warning quiet" in filed
    assert "progress bars False quiet" in quiet  # transformers' per-step weight bars
    assert "our debug" not in quiet + filed
    assert quiet.count("actor warning") == 1, quiet  # once, through our handler only


def test_our_evaluation_info_line_reaches_the_terminal_and_the_run_log(run_log):
    terminal, folder = run_log
    line = "INFO vlrollout.train.evaluation: held-out eval at step 0: mean 0.1 quiet"
    assert line in terminal["quiet"] and line in (folder / "quiet.log").read_text()


def test_debug_shows_areals_info_lines_on_the_terminal_too(run_log):
    terminal, folder = run_log
    debug, filed = terminal["debug"], (folder / "debug.log").read_text()
    for line in ("Microbatch #tokens (rank 0): [12]", "actor info", "library info", "our debug"):
        assert f"{line} debug" in debug and f"{line} debug" in filed, debug
    assert "[12] debug" not in (folder / "quiet.log").read_text()  # the file moved
    assert "progress bars True debug" in debug
