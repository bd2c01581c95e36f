"""``bench/scaling_trainer.py``'s measuring parts, without a train run.

The train runs themselves take tens of seconds each; what is checked here is what turns a run
into points: the peak-memory reader on children that allocate known amounts, the phase means of
a ``metrics.jsonl``, the overrides that make the two modes differ only by
``encode_images_once``, and the points' contract (``bench/bench_scaling.py``).
"""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import scaling_trainer  # noqa: E402
from scaling_trainer import (  # noqa: E402
    PHASES,
    Measured,
    Settings,
    high_water_mark,
    phase_means,
    ratio_points,
    read_metrics,
    run_measured,
    to_points,
    train_overrides,
    trainer_points,
)

MiB = 2**20
ALLOCATE = "import sys, time; b = b'x' * ({} * 2**20); del b; time.sleep(0.3); sys.exit({})"
"""Touches MiB, frees them (the peak, not the current size, is read), exits with a status."""


@dataclass(frozen=True)
class FakeShape:
    name: str
    trainable: bool = True
    lora: bool = False
    dtype: str = "float32"


def _peak(mib: int, status: int = 0) -> tuple[int, int]:
    code, peak, _ = run_measured(
        [sys.executable, "-c", ALLOCATE.format(mib, status)],
        env=dict(os.environ),
        cwd=REPO,
        timeout_s=60,
    )
    return code, peak


def test_the_peak_rss_is_the_childs_high_water_mark_in_bytes():
    # This process's own size (pytest, torch) must not leak into the child's number.
    _, base = _peak(0)
    assert base < 100 * MiB
    code, peak = _peak(200, status=3)
    assert code == 3
    assert 190 * MiB <= peak - base <= 230 * MiB, (base, peak)


def test_the_high_water_mark_stays_after_the_memory_is_freed():
    code = (
        "import time; b = b'x' * (200 * 2**20); del b; print('freed', flush=True); time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "freed"
        assert high_water_mark(proc.pid) >= 200 * MiB
    finally:
        proc.kill()
        proc.wait()
    assert high_water_mark(proc.pid) == 0  # reaped: nothing to read


def test_a_child_past_its_timeout_is_killed():
    code, _, _ = run_measured(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env=dict(os.environ),
        cwd=REPO,
        timeout_s=0.5,
    )
    assert code == -9


def test_phase_means_leave_out_the_first_step(tmp_path):
    rows = [{"step": i + 1, **{p: float(t) for p in PHASES}} for i, t in enumerate([10, 1, 3])]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    means = phase_means(read_metrics(path))
    assert means == {p: 2.0 for p in PHASES}


def test_phase_means_refuse_a_single_step_or_a_missing_phase():
    row = {p: 1.0 for p in PHASES}
    with pytest.raises(ValueError, match="1 step"):
        phase_means([row])
    with pytest.raises(ValueError, match="time/logp"):
        phase_means([row, {k: v for k, v in row.items() if k != "time/logp"}])


def _values(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


def test_the_two_modes_differ_only_by_encode_images_once(tmp_path):
    s = Settings(image_tokens=256, max_new_tokens=8)
    args = (tmp_path / "model", tmp_path / "items.jsonl", tmp_path / "out", s, 16)
    once = _values(train_overrides(*args, once=True, lora=False, device="cpu", dtype="bfloat16"))
    copies = _values(train_overrides(*args, once=False, lora=False, device="cpu", dtype="bfloat16"))
    assert once["vlrollout.encode_images_once"] == "true"
    assert copies.pop("vlrollout.encode_images_once") == "false"
    once.pop("vlrollout.encode_images_once")
    assert once == copies
    # A whole group of 16 sequences (256 image tokens each and more) fits one micro-batch.
    assert int(once["actor.mb_spec.max_tokens_per_mb"]) >= 16 * (256 + 8)
    assert once["gconfig.n_samples"] == "16" and once["actor.recompute_logprob"] == "true"
    assert once["actor.dtype"] == "float32"  # the CPU trains in float32


def test_on_a_gpu_the_engine_runs_there_in_the_shapes_dtype(tmp_path):
    s = Settings()
    out = train_overrides(
        tmp_path, tmp_path, tmp_path, s, 2, once=True, lora=True, device="cuda", dtype="bfloat16"
    )
    v = _values(out)
    assert v["vlrollout.engine.device"] == "cuda" and v["actor.dtype"] == "bfloat16"
    assert v["actor.use_lora"] == "true"


def test_points_follow_the_contract():
    m = Measured({p: 1.0 for p in PHASES}, peak_rss=3 * 2**30, seconds=20.0)
    copies = Measured({p: 2.0 for p in PHASES}, peak_rss=4 * 2**30, seconds=30.0)
    fixed = {"tokens": 256, "images": 1, "encode_images_once": True}
    points = to_points(m, "20m", "group", 8, fixed) + ratio_points("20m", 8, m, copies, fixed)
    keys = {"path", "shape", "axis", "x", "metric", "value", "unit", "fixed"}
    assert all(set(p) == keys and p["path"] == "train" and p["x"] == 8.0 for p in points)
    by_metric = {p["metric"]: p for p in points}
    assert set(by_metric) == {*PHASES, "peak_rss", "peak_rss_per_copy", "peak_rss_ratio"}
    assert by_metric["peak_rss"]["value"] == 3 * 2**30 and by_metric["peak_rss"]["unit"] == "bytes"
    assert by_metric["peak_rss_per_copy"]["value"] == 4 * 2**30
    assert by_metric["peak_rss_ratio"]["value"] == 0.75
    json.dumps(points)  # plain JSON
    on_gpu = Measured({p: 1.0 for p in PHASES}, 2**30, 20.0, peak_device=5 * 2**30)
    by_metric = {p["metric"]: p for p in to_points(on_gpu, "20m", "group", 8, fixed)}
    assert by_metric["peak_device"]["value"] == 5 * 2**30
    # On a GPU the encode-once saving is judged on the device's memory too.
    copies_gpu = Measured({p: 2.0 for p in PHASES}, 2**30, 30.0, peak_device=10 * 2**30)
    by_metric = {p["metric"]: p for p in ratio_points("20m", 8, on_gpu, copies_gpu, fixed)}
    assert by_metric["peak_device_per_copy"]["value"] == 10 * 2**30
    assert by_metric["peak_device_ratio"]["value"] == 0.5
    assert by_metric["peak_rss_ratio"]["value"] == 1.0


def test_quick_mode_and_a_spent_budget_run_nothing_and_say_why(capsys):
    shapes = [
        FakeShape("tiny"),
        FakeShape("20m"),
        FakeShape("big", trainable=False),
        FakeShape("smolvlm-256m"),
    ]
    assert trainer_points(shapes, [1, 2, 4, 8], quick=True, device="cpu") == []
    assert "skipped in --quick" in capsys.readouterr().out
    assert trainer_points(shapes, [1, 2, 4, 8], quick=False, device="cpu", budget_s=0) == []
    out = capsys.readouterr().out
    assert "train smolvlm-256m: skipped on the CPU (LoRA on a group needs" in out
    skipped = [line.split(" (")[0] for line in out.splitlines() if "budget is spent" in line]
    # GRPO needs a group of 2; the smallest and largest groups first, then the sizes (tiny's
    # is the group sweep's run at group 2), then the middle group; "big" is not trainable.
    assert skipped == [
        "train tiny group 2 once",
        "train tiny group 2 per-copy",
        "train tiny group 8 once",
        "train tiny group 8 per-copy",
        "train 20m group 2 once",
        "train tiny group 4 once",
        "train tiny group 4 per-copy",
    ]


def test_docstring_examples():
    assert doctest.testmod(scaling_trainer).failed == 0
