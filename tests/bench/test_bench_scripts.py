"""The benchmark scripts run with one command (``--quick`` here), print their table with the
headline last, and write the same headline into their JSON record."""

from __future__ import annotations

import importlib
import io
import json
import re
import subprocess
import sys
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from PIL import Image

from tests.train.procs import run_side_by_side

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def _run_quick(script: str, timeout_s: int, record_dir: Path) -> list[str]:
    """The script's non-empty stdout lines; its record (in ``record_dir``, never the committed
    ``bench/results``) holds the quick command and the same last line."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick", "--record-dir", str(record_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    (path,) = record_dir.glob("*.json")
    written = json.loads(path.read_text())
    assert written["command"] == f".venv/bin/python bench/{script} --quick"
    assert written["headline"] == lines[-1] and written["mode"].startswith("quick")
    return lines


QUICK_RUNS = {
    "test_engine_quick_prints_ratios_tokens_and_http_overhead": ("bench_engine.py", 400),
    "test_workflow_overhead_quick_prints_every_input_class_and_engine_and_the_worst_last": (
        "bench_workflow_overhead.py",
        900,
    ),
    "test_eval_quick_gives_the_served_model_the_local_models_metrics": ("bench_eval.py", 600),
    "test_processor_call_quick_prints_identical_outputs_and_the_headline": (
        "bench_processor_call.py",
        300,
    ),
    "test_decode_step_quick_shows_both_paths_bit_identical_and_the_sampling_costs": (
        "bench_decode_step.py",
        300,
    ),
    "test_prompt_memory_quick_runs_and_prints_the_headline": ("bench_prompt_memory.py", 300),
    "test_reward_pool_quick_prints_both_sizes_and_the_headline": ("bench_reward_pool.py", 300),
    "test_packaging_quick_prints_every_case_and_the_headline": ("bench_packaging.py", 120),
    "test_engine_image_codecs_quick_prints_every_image_and_codec": (
        "bench_engine_image_codecs.py",
        120,
    ),
}
"""Per test, the script it runs with ``--quick`` and its time limit in seconds (longest first)."""


@dataclass(frozen=True)
class QuickRun:
    """A script's ``--quick`` run, started (:func:`_run_quick`)."""

    record_dir: Path
    future: Future[list[str]]

    def lines(self) -> list[str]:
        """Its non-empty stdout lines, once it has ended."""
        return self.future.result()


@pytest.fixture(scope="module")
def quick(request, tmp_path_factory) -> dict[str, QuickRun]:
    """Per script, the ``--quick`` run of each test this session runs, all started at once so
    they share the machine's cores (``run_side_by_side``; the tests check what the scripts
    print and record, never their timings)."""
    selected = {getattr(item, "originalname", None) for item in request.session.items}
    record_dirs, jobs = {}, []
    for test, (script, timeout_s) in QUICK_RUNS.items():
        if test in selected:
            record_dirs[script] = tmp_path_factory.mktemp(Path(script).stem)
            jobs.append(partial(_run_quick, script, timeout_s, record_dirs[script]))
    futures = run_side_by_side(jobs)
    return {s: QuickRun(d, f) for (s, d), f in zip(record_dirs.items(), futures, strict=True)}


ENGINES = ("local", "sglang", "vllm")


@pytest.mark.slow
def test_workflow_overhead_quick_prints_every_input_class_and_engine_and_the_worst_last(quick):
    lines = quick["bench_workflow_overhead.py"].lines()
    assert any(line.startswith("One episode, ms") for line in lines)
    assert any(line.startswith("Group of 8") for line in lines)
    for name in ("RGB JPEG", "grey PNG", "RGBA PNG", "palette GIF", "PIL input", "small <=336^2"):
        rows = [line for line in lines if line.startswith(f"{name} (fast)")]
        # One row per engine in the episode and group tables (the tensor-reading one and AReaL's
        # two remote clients), and one per remote client in the split of a remote group's time.
        assert len(rows) == 8, lines
        counts = {engine: sum(f" {engine} " in row for row in rows) for engine in ENGINES}
        assert counts == {"local": 2, "sglang": 3, "vllm": 3}, rows
    assert lines[-1].startswith("headline (worst class and engine)") and "AReaL/ours" in lines[-1]
    assert "ours/floor*" in lines[-1] and "bound AReaL/floor*" in lines[-1]
    (header,) = [line for line in lines if line.startswith("input class") and "subject" in line]
    assert "AReaL/floor*" in header and "engine" in header


def test_a_single_episode_miss_says_when_the_floor_puts_the_target_out_of_reach(monkeypatch):
    """Every workflow pays at least the floor, so AReaL/floor bounds AReaL/ours: a miss where
    that bound is itself under the target is marked as such, a reachable miss is a plain MISS."""
    monkeypatch.syspath_prepend(str(BENCH))
    from bench_workflow_overhead import TARGET_AREAL, verdict_vs_areal

    assert verdict_vs_areal(TARGET_AREAL, 5.0) == "ok"
    assert verdict_vs_areal(TARGET_AREAL - 0.5, 5.0) == "MISS"
    assert verdict_vs_areal(1.0, TARGET_AREAL - 0.1) == "MISS (bound)"


def test_subjects_differ(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from images import SUBJECTS, subject_photo

    pictures = [subject_photo(s, 64, 48).tobytes() for s in SUBJECTS]
    assert len(set(pictures)) == len(SUBJECTS)


def test_packaging_quick_prints_every_case_and_the_headline(quick):
    lines = quick["bench_packaging.py"].lines()
    for case in ("single-turn", "single-turn + mm ids", "multi-turn 4 gen + 3 obs"):
        rows = [line for line in lines if re.match(rf"{re.escape(case)}\s+\d+k\s", line)]
        assert len(rows) == 2, lines  # 1k and 8k
    assert lines[-1].startswith("headline") and "ours/AReaL" in lines[-1]


def test_bench_photos_are_jpegs_of_the_requested_sizes(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from images import bench_photos, derive, synthetic_photo

    photos = bench_photos(tmp_path, sizes=[(64, 48), (30, 90)], include_samples=False)
    assert [(p.width, p.height) for p in photos] == [(64, 48), (30, 90)]
    for p in photos:
        with Image.open(p.path) as im:
            assert im.format == "JPEG" and im.size == (p.width, p.height) and im.mode == "RGB"
    # Scale-to-cover then centre crop: never padded, always exactly the requested size.
    assert derive(synthetic_photo(50, 20), 40, 40).size == (40, 40)


@pytest.mark.slow
def test_engine_quick_prints_ratios_tokens_and_http_overhead(quick):
    lines = quick["bench_engine.py"].lines()
    compiled_title = [i for i, line in enumerate(lines) if "compile_decode=True" in line]
    assert len(compiled_title) == 1 and "decode steps compiled;" in lines[compiled_title[0]]
    tables = {"default": lines[: compiled_title[0]], "compiled": lines[compiled_title[0] :]}
    for table, rows in tables.items():
        bound = r"\d+\.\d\dx" if table == "default" else "-"
        for name, n in (("equal", 8), ("mixed", 8), ("queued", 32)):
            (row,) = [line for line in rows if line.startswith(name)]
            # Greedy tokens identical to generate, and the ratio judged against its target.
            assert re.search(
                rf"\d+\.\d\dx\s+{n}/{n}\s+{bound}\s+1\.[05]x (ok|MISS|MISS \(bound\))$", row
            ), row
        (sampled,) = [line for line in rows if line.startswith("sampled")]
        assert re.search(rf"\d+\.\d\dx\s+\(sampled\)\s+{bound}\s+-$", sampled), sampled
    assert any(line.startswith("HTTP") and "ms/request" in line for line in lines)
    assert lines[-1].startswith("headline engine/generate")
    assert "compile_decode " in lines[-1] and "default " in lines[-1]


def test_decode_step_quick_shows_both_paths_bit_identical_and_the_sampling_costs(quick):
    lines = quick["bench_decode_step.py"].lines()
    assert sum(line.startswith("decode step, ") for line in lines) == 2
    (saved,) = [line for line in lines if line.startswith("decode step saved")]
    assert saved.endswith("logits bit-identical: True"), saved
    kinds = [line for line in lines if line.startswith("sample_batch, ")]
    assert len(kinds) == 4 and all(re.search(r"median\s+\d+\.\d us", k) for k in kinds)


def test_processor_call_quick_prints_identical_outputs_and_the_headline(quick):
    lines = quick["bench_processor_call.py"].lines()
    rows = [line for line in lines if re.match(r"\d+x\d+ \w+ \((fast|slow)\)", line)]
    assert len(rows) == 6 and all(row.endswith("True") for row in rows), lines
    assert lines[-1].startswith("headline") and lines[-1].endswith("outputs identical: True")


def test_engine_image_codecs_quick_prints_every_image_and_codec(quick):
    lines = quick["bench_engine_image_codecs.py"].lines()
    for size in ("336x252", "800x600", "1411x1411"):
        rows = [line for line in lines if line.lstrip().startswith(size)]
        assert len(rows) == 3, lines
        assert [r for r in rows if "(ours)" in r], rows
    assert lines[-1].startswith("least client time for the group: 336x252 ")


def test_a_codec_that_changes_the_pixels_is_refused(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from bench_engine_image_codecs import Codec, measure

    def jpeg(image: Image.Image) -> bytes:
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=90)
        return buf.getvalue()

    picture = Image.effect_noise((32, 24), 40).convert("RGB")
    with pytest.raises(RuntimeError, match="does not decode to the image's pixels"):
        measure(picture, Codec("JPEG", jpeg), reps=1)
    lossless = measure(picture, Codec("PNG", lambda im: _png(im)), reps=1)
    assert lossless["body_bytes"] > len(_png(picture))  # the body carries the image


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def test_a_benchmark_stopped_with_ctrl_c_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    from entry import run

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as stop:
        run(interrupted)
    assert stop.value.code == 130
    err = capsys.readouterr().err
    assert err.strip().endswith("interrupted, no result") and "Traceback" not in err
    with pytest.raises(SystemExit) as done:
        run(lambda: None)
    assert done.value.code == 0


def test_workflow_overhead_refuses_an_unknown_processor_kind(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    from bench_workflow_overhead import main

    with pytest.raises(SystemExit) as stop:
        main(["--processors", "fast,medium"])
    assert stop.value.code == 2 and "fast,medium" in capsys.readouterr().err


@pytest.mark.parametrize(
    "script, args, named",
    [
        ("bench_engine.py", ["--batch", "0"], "--batch: must be at least 1"),
        ("bench_engine.py", ["--repeat", "x"], "--repeat: expected a whole number"),
        ("bench_decode_step.py", ["--rows", "0"], "--rows: must be at least 1"),
    ],
)
def test_engine_benchmarks_refuse_counts_below_one_in_one_line(
    script, args, named, monkeypatch, capsys
):
    """In this process (the script's own imports are this suite's): argparse's exit 2."""
    monkeypatch.syspath_prepend(str(BENCH))
    main = importlib.import_module(Path(script).stem).main
    monkeypatch.setattr(sys, "argv", [script, *args])
    with pytest.raises(SystemExit) as stop:
        main()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and named in err and "Traceback" not in err


def test_prompt_memory_quick_runs_and_prints_the_headline(quick):
    """Its rollout coroutine and bench/entry's ``run`` are different names: one module-level
    ``run`` would be rebound by the other when the script starts."""
    lines = quick["bench_prompt_memory.py"].lines()
    assert lines[-1].startswith("headline: prepared prompts peak")


def test_reward_pool_quick_prints_both_sizes_and_the_headline(quick):
    """It once ended in a TypeError: the module's own ``run`` was shadowed by bench/entry's."""
    lines = quick["bench_reward_pool.py"].lines()
    rows = [line.split() for line in lines if re.match(r"\s*\d+\s", line)]
    assert [int(r[0]) for r in rows] == [12, 500]
    assert lines[-1].startswith("headline: RewardCaller per call")


def test_update_rows_leaves_out_each_runs_first_step(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from bench_update_rows import update_times

    runs = [
        [{"time/update": 9.0}, {"time/update": 2.0}],
        [{"time/update": 8.0}, {"time/update": 3.0}],
    ]
    assert update_times(runs) == [2.0, 3.0]


def test_update_rows_reads_a_recipe_from_another_folder(tmp_path, monkeypatch):
    """The recipe's ``actor.path`` is relative to the repository root, where the runs start; the
    recipe is read from there too, so the benchmark works from any folder."""
    monkeypatch.syspath_prepend(str(BENCH))
    from bench_update_rows import recipe_setting

    monkeypatch.chdir(tmp_path)
    assert recipe_setting(str(BENCH.parent / "examples" / "train_count.yaml")) == (2048, True)
    assert Path.cwd() == tmp_path


@pytest.mark.parametrize(
    "script", ["bench_learning.py", "bench_vs_trl.py", "bench_offpolicy_learning.py"]
)
def test_a_kept_folder_holding_earlier_runs_is_refused(tmp_path, script):
    """Training runs resume from the checkpoints in their folder: a ``--keep`` folder that holds
    an earlier run would make the record report that run as this measurement."""
    kept = tmp_path / "kept"
    (kept / "trained-seed1").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--keep", str(kept), "--record-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"argument --keep: {kept} is not a new or empty folder" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("*.json")), "no record is written"
    assert [p.name for p in kept.iterdir()] == ["trained-seed1"]


def test_a_new_or_empty_kept_folder_is_accepted(tmp_path):
    sys.path.insert(0, str(BENCH))
    import record

    assert record.fresh_folder(str(tmp_path / "new")) == tmp_path / "new"
    assert record.fresh_folder(str(tmp_path)) == tmp_path  # empty
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match="not a new or empty folder"):
        record.fresh_folder(str(tmp_path / "file"))


def test_a_relative_kept_folder_is_made_absolute(tmp_path, monkeypatch):
    """The training runs start in the repository root, the benchmark wherever it was called: a
    relative ``--keep`` must name the same folder for both."""
    sys.path.insert(0, str(BENCH))
    import record

    monkeypatch.chdir(tmp_path)
    assert record.fresh_folder("runs") == tmp_path.resolve() / "runs"


def test_eval_quick_gives_the_served_model_the_local_models_metrics(quick):
    """``vlrollout eval`` on a local model and on the same model behind a ``vlrollout serve``
    process reached as any OpenAI-compatible server: the same metrics, or the script exits 1."""
    run = quick["bench_eval.py"]
    lines = run.lines()
    assert "identical metrics" in lines[-1]
    numbers = json.loads(next(run.record_dir.glob("*.json")).read_text())["numbers"]
    assert numbers["items"] == 8 and numbers["split"] == "test"
    accs = [f"ACC@{t}" for t in (0.1, 0.3, 0.5, 0.7, 0.9)]
    assert set(numbers["local"]) == {"IoU", *accs, "Center_ACC"}
    assert numbers["local"] == numbers["served"]
