"""Every Python example of ``docs/other_trainers.md`` runs, and prints what its ``# prints:``
lines say (``...`` matches anything, as in doctests)."""

import contextlib
import doctest
import io
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "other_trainers.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def test_the_page_has_an_example_per_trainer():
    code = "\n".join(BLOCKS)
    for name in (
        "GRPOTrainer",
        "compute_score = VerlReward",
        ".easyr1",
        "PlainReward",
        "model_inputs",
    ):
        assert name in code, name


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs_and_prints_what_it_says(index, tmp_path, monkeypatch):
    code = BLOCKS[index].replace("/tmp/trl-vlrollout", str(tmp_path / "trl"))
    monkeypatch.chdir(REPO)  # the examples name assets/tiny-qwen2vl relative to the repository
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{PAGE.name} example {index + 1}", "exec"), {"__name__": "__example__"})
    expected = [
        line.removeprefix("# prints: ")
        for line in code.splitlines()
        if line.startswith("# prints: ")
    ]
    if expected:
        checker = doctest.OutputChecker()
        want, got = "\n".join(expected) + "\n", out.getvalue()
        assert checker.check_output(want, got, doctest.ELLIPSIS), (
            f"printed:\n{got}\nexpected:\n{want}"
        )
    assert os.getcwd() == str(REPO)
