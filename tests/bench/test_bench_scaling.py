"""The scaling benchmark (bench/bench_scaling.py): its quick run writes a record of the contract's
points, growth exponents that match a refit of those points, goals and chart specs; the results
page renders its charts from the record alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO / "scripts"))

import render_readme_numbers as render  # noqa: E402
from bench_scaling import PLANS, parse, run_mode, specs  # noqa: E402
from record import Record, Table  # noqa: E402
from scaling_growth import exponent  # noqa: E402
from scaling_report import summarise  # noqa: E402

POINT_KEYS = {"path", "shape", "axis", "x", "metric", "value", "unit", "fixed"}


def _quick(tmp_path: Path, *extra: str) -> tuple[list[str], dict]:
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_scaling.py"),
            "--quick",
            "--record-dir",
            str(tmp_path),
            "--paths",
            "engine",
            "generate",
            "serve",
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return lines, json.loads((tmp_path / "scaling.json").read_text())


def _check_record(lines: list[str], rec: dict) -> None:
    assert rec["headline"] == lines[-1] and rec["mode"].startswith("quick")
    numbers = rec["numbers"]
    points = numbers["points"]
    assert points and all(set(p) == POINT_KEYS for p in points)
    assert numbers["failures"] == []
    assert {p["path"] for p in points} == {"engine", "generate", "prompt", "serve"}
    assert {p["axis"] for p in points} == {"tokens", "group", "images", "size"}
    # Every group prepared its prompt once; generate encoded one copy per sample. (The engine
    # encodes a group's image once per prefill round: once when the group's requests reach the
    # same round, twice when the first one's prefill starts before the rest arrive, which
    # depends on the load, so the count is the benchmark's to report, not asserted here.)
    assert numbers["goals"]["once_per_group"]["prepared_once"]
    encoded = {
        (p["path"], p["axis"], p["x"]): p["value"]
        for p in points
        if p["metric"] == "images_encoded" and p["axis"] == "group"
    }
    assert encoded["generate", "group", 2] == 2 and 1 <= encoded["engine", "group", 2] <= 2
    # The recorded exponents are the least-squares slopes of the recorded points.
    fit = next(
        f
        for f in numbers["fits"]
        if (f["path"], f["metric"], f["axis"]) == ("engine", "time/total", "tokens")
    )
    series = sorted(
        (p["x"], p["value"])
        for p in points
        if (p["path"], p["metric"], p["axis"]) == ("engine", "time/total", "tokens")
    )
    assert fit["exponent"] == pytest.approx(
        exponent([x for x, _ in series], [y for _, y in series]), abs=1e-3
    )
    assert [f for f in numbers["fits"] if f["flagged"]] == numbers["flags"]
    assert numbers["charts"] and all(c["series"] for c in numbers["charts"][:3])
    assert numbers["largest"]["engine"]["shape"] == "tiny"
    assert "worst engine/generate" in rec["headline"]


@pytest.mark.slow
def test_quick_run_writes_the_contracts_points_exponents_goals_and_charts(tmp_path):
    lines, rec = _quick(tmp_path)
    _check_record(lines, rec)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_quick_run_on_cuda(tmp_path):
    lines, rec = _quick(tmp_path, "--device", "cuda")
    _check_record(lines, rec)
    assert "on cuda, " in rec["mode"]
    points = rec["numbers"]["points"]
    hosts = {(p["path"], p["axis"], p["x"]) for p in points if p["metric"] == "peak_rss"}
    devices = {(p["path"], p["axis"], p["x"]) for p in points if p["metric"] == "peak_device"}
    assert hosts and devices == hosts


@pytest.mark.parametrize(
    "device, message",
    [("tpu", "--device must be cpu, cuda or cuda:N, got 'tpu'"), ("cuda:x", "got 'cuda:x'")]
    + [("cuda", "--device cuda: CUDA is not available here")] * (not torch.cuda.is_available()),
)
def test_a_device_the_engine_cannot_use_is_refused_before_any_point(capsys, device, message):
    with pytest.raises(SystemExit) as stop:
        parse(["--device", device])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--paths", "engin"], "argument --paths: invalid choice: 'engin'"),
        (["--threads", "0"], "--threads must be >= 1, got 0"),
    ],
)
def test_a_flag_that_would_measure_nothing_is_refused(capsys, flags, message):
    with pytest.raises(SystemExit) as stop:
        parse(flags)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_a_goal_with_no_points_is_not_measured_rather_than_missed():
    _, headline, numbers, _ = summarise([], [], [], {})
    assert "prompt prepared once per group: not measured" in headline, headline
    assert "images encoded once per group: not measured" in headline, headline
    once = numbers["goals"]["once_per_group"]
    assert once["prepared_once"] is None and once["encoded_once"] is None


def test_a_run_of_some_paths_says_so_in_its_mode():
    assert run_mode(parse(["--paths", "engine", "generate"])) == "paths engine generate only"
    assert run_mode(parse(["--shapes", "tiny", "--paths", "serve"])) == (
        "shapes tiny only; paths serve only"
    )
    assert run_mode(parse([])) == "default"
    assert run_mode(parse(["--quick"])).startswith("quick: ")


def test_a_gpu_run_names_its_device_in_its_mode(monkeypatch):
    # A GPU record rendered as "on 2 CPU cores", with no word of the GPU, reads as a CPU run.
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"NVIDIA H100 ({device})")
    args = parse([])
    args.device = "cuda:1"
    assert run_mode(args) == "on cuda:1, NVIDIA H100 (cuda:1)"


def test_every_axis_is_swept_with_the_others_fixed_and_every_shape_has_the_size_point():
    for name, plan in PLANS.items():
        points = specs(plan)
        for axis in ("tokens", "group", "images"):
            swept = [p for p in points if p["axis"] == axis]
            assert [p[axis] for p in swept] == plan[axis]["values"], name
            others = plan[axis]["at"]
            assert set(others) == {"tokens", "group", "images"} - {axis}
            assert all(all(p[k] == v for k, v in others.items()) for p in swept), name
        (size,) = [p for p in points if p["axis"] == "size"]
        assert (size["tokens"], size["group"], size["images"]) == (64, 4, 1), name
    assert PLANS["tiny"]["tokens"]["values"] == [64, 256, 1024, 4096]
    assert PLANS["tiny"]["group"]["values"] == [1, 2, 4, 8, 16]


def test_a_record_with_chart_specs_renders_them_as_charts_under_its_tables(tmp_path):
    spec = {
        "title": "Seconds per group",
        "x": "group size",
        "y": "s",
        "series": {"tiny engine": [[1, 0.5], [4, 1.0]], "tiny generate": [[1, 0.6], [4, 2.0]]},
    }
    rec = Record(
        "scaling",
        "cmd",
        "2026-01-01T00:00:00+00:00",
        "abc",
        False,
        2,
        1.0,
        1.0,
        1.0,
        "default",
        [Table(["a"], [["1"]])],
        "headline: x",
        {"charts": [spec]},
    )
    page = REPO / "docs" / "results" / "scaling.md"
    body = render.render_record(rec, page)
    assert "![Seconds per group](charts/scaling-curve-1.svg)" in body
    assert body.index("| a |") < body.index("![Seconds per group]")
    text = "<!-- bench:scaling -->\n<!-- /bench:scaling -->"
    ((path, svg),) = render.charts(text, {"scaling": rec}).items()
    assert path == render.CHARTS / "scaling-curve-1.svg"
    assert svg.count("<polyline") == 2 and "stroke-dasharray" in svg


def _longest_prompt(plan: dict) -> int:
    """Image tokens of the plan's largest prompt, plus its new tokens and a chat template's text."""
    one_image = max(plan["tokens"]["values"] or [0])
    several = plan["images"]["at"]["tokens"] * max(plan["images"]["values"] or [1])
    return max(one_image, several) + plan["new_tokens"] + 64


@pytest.mark.parametrize("name", list(PLANS))
def test_every_shapes_context_holds_its_sweeps_longest_prompt(tmp_path, name):
    """The engine and the server stop at the model's context, so a shape whose config holds
    fewer positions than a point's prompt measures nothing there (the shipped tiny model has
    512)."""
    from scaling_shapes import build_config, build_model, build_processor, shape
    from transformers import AutoConfig

    from vlrollout.families import context_length

    s = shape(name)
    if name == "tiny":
        config = AutoConfig.from_pretrained(build_model(s, tmp_path))
    else:
        config = build_config(s, build_processor(s))
    assert context_length(config) >= _longest_prompt(PLANS[name])


def test_a_gpu_points_memory_is_judged_on_the_device_not_the_host():
    # On a GPU the host's resident memory says little of what the device holds.
    from scaling_report import compare_table

    m = {("engine", "tokens_per_s"): 2.0, ("generate", "tokens_per_s"): 1.0}
    m |= {(side, "time/prefill"): 0.1 for side in ("engine", "generate")}
    m |= {(side, "time/decode_per_token"): 0.01 for side in ("engine", "generate")}
    m |= {(side, "images_encoded"): 1 for side in ("engine", "generate")}
    m |= {("engine", "peak_rss"): 100.0, ("generate", "peak_rss"): 100.0}
    key = ("tiny", "group", 4, (("images", 1), ("tokens", 64)))
    _, judged = compare_table({key: m})
    assert judged[0]["memory_ratio"] == 1.0
    m |= {("engine", "peak_device"): 300.0, ("generate", "peak_device"): 200.0}
    _, judged = compare_table({key: m})
    assert judged[0]["memory_ratio"] == 1.5
