"""What docs/eval.md promises a new user matches what `vlrollout eval` does."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "eval.md"


def test_the_exit_statuses_include_a_stop_by_ctrl_c():
    """Ctrl-C mid-run exits 130 (SIGTERM 143) and keeps the finished predictions; the list of
    exit statuses in docs/eval.md (0, 1, 2, 3) must name it, as docs/reliability.md does."""
    text = DOC.read_text()
    statuses = text[text.index("Exit statuses:") :].split("\n\n")[0]
    assert "130" in statuses
