"""The runnable example of ``docs/workflows.md`` (the one on the embedded engine) runs and prints
what its ``# prints:`` line says."""

import contextlib
import io
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "workflows.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def test_the_embedded_engine_example_runs_one_accepted_episode(monkeypatch):
    (code,) = [block for block in BLOCKS if "LocalInferenceEngine" in block]
    monkeypatch.chdir(REPO)  # the example names assets/ relative to the checkout
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{PAGE.name} example", "exec"), {"__name__": "__example__"})
    (expected,) = [
        line.removeprefix("# prints: ") for line in code.splitlines() if "# prints:" in line
    ]
    assert out.getvalue().strip() == expected
