"""``vlrollout eval`` stopped by SIGTERM mid-run: exit 143 with the one line, soon, keeping what
was predicted (a SIGTERM raised inside the event loop's callback used to be dropped, and the run
went on to the last item)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ITEMS = 40


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_eval_before_the_last_item(tmp_path, sig):
    data = tmp_path / "count.jsonl"
    image = REPO / "assets" / "samples" / "images"
    first = sorted(image.glob("*.png"))[0]
    data.write_text(
        "".join(
            json.dumps(
                {"id": f"c{i}", "images": [str(first)], "question": "How many?", "answer": i % 5}
            )
            + "\n"
            for i in range(ITEMS)
        )
    )
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "vlrollout.cli", "eval", "--data", str(data), "--task", "count",
        "--model", "assets/tiny-qwen2vl", "--output", str(out), "--concurrency", "1",
        "--max-new-tokens", "24", "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    predictions = out / "predictions"
    deadline = time.time() + 300
    while not (predictions.is_dir() and len(list(predictions.iterdir())) >= 2):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    assert len(list(predictions.iterdir())) < ITEMS  # stopped, not run to the end
    (line,) = [line for line in err.splitlines() if "stopped by" in line]
    assert f"stopped by {signal.Signals(sig).name}; finished predictions are kept" in line
