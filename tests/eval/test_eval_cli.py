"""``vlrollout eval`` end to end on the tiny model: a refcoco-style JSONL made here, the real
refcoco task, results.json, report.html and the printed table; a rerun resumes without the model;
--compare exits 1 on a drop beyond the threshold and 0 within it; usage errors exit 2."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageDraw

from vlrollout.cli import main
from vlrollout.eval.main import build_parser, build_predictor, settings_of

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-qwen2vl"


def write_refs(folder: Path) -> Path:
    """A refcoco-style JSONL of 3 items (red boxes on white images, splits val and testA) and one
    item without boxes; returns its path."""
    rows = []
    for i, (x, y) in enumerate([(10, 10), (40, 20), (20, 50)]):
        image = Image.new("RGB", (96, 80), "white")
        ImageDraw.Draw(image).rectangle([x, y, x + 25, y + 20], fill="red")
        image.save(folder / f"{i}.png")
        rows.append(
            {
                "id": f"r{i}",
                "images": [f"{i}.png"],
                "expression": "the red box",
                "boxes": [[x, y, x + 25, y + 20]],
                "split": "val" if i < 2 else "testA",
            }
        )
    rows.append({"id": "nobox", "images": ["0.png"], "expression": "the red box"})
    data = folder / "refs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """The data file and the output folder of one evaluation shared by the module's tests."""
    tmp = tmp_path_factory.mktemp("eval")
    return write_refs(tmp), tmp / "out"


def _eval(data, out, *extra):
    argv = ["eval", "--data", str(data), "--task", "refcoco", "--model", str(TINY)]
    argv += ["--output", str(out), "--max-new-tokens", "12", "--seed", "1", "--no-progress"]
    return main([*argv, *extra])


def test_eval_writes_results_report_and_the_table(evaluated, capsys):
    data, out = evaluated
    assert _eval(data, out) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "refcoco" and results["items"] == 3
    assert results["rejected"] == {"not_scorable": 1}
    assert set(results["per_split"]) == {"val", "testA"}
    for name in ("IoU", "ACC@0.5", "Center_ACC"):
        assert name in results["metrics"] and len(results["metrics"][name]["ci95"]) == 2
    assert results["settings"]["model"] == str(TINY.resolve())
    assert len(list((out / "predictions").glob("*.json"))) == 3
    assert "ACC@0.5" in printed and "95% CI" in printed and "split val (2 items)" in printed
    page = (out / "report.html").read_text()
    assert all(f"<h3>{i}" in page for i in ("r0", "r1", "r2")) and "nobox" in page

    # a rerun scores what is on disk: the same numbers, no prediction run again
    stamps = {p: p.stat().st_mtime_ns for p in (out / "predictions").iterdir()}
    assert _eval(data, out) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "predictions").iterdir()} == stamps
    assert json.loads((out / "results.json").read_text())["metrics"] == results["metrics"]


def test_compare_exits_1_on_a_drop_and_0_within_the_threshold(evaluated, tmp_path, capsys):
    data, out = evaluated
    if not (out / "results.json").exists():
        assert _eval(data, out) == 0
    results = json.loads((out / "results.json").read_text())
    higher = json.loads(json.dumps(results))
    higher["metrics"]["IoU"]["value"] += 0.05
    (tmp_path / "higher.json").write_text(json.dumps(higher))
    assert _eval(data, out, "--compare", str(tmp_path / "higher.json")) == 1
    err = capsys.readouterr().err
    assert "IoU (all items)" in err and "regression" in err
    assert _eval(data, out, "--compare", str(tmp_path / "higher.json"), "--threshold", "0.06") == 0
    (tmp_path / "same.json").write_text(json.dumps(results))
    assert _eval(data, out, "--compare", str(tmp_path / "same.json")) == 0
    assert "differs" not in capsys.readouterr().err
    other = {**results, "data": {**results["data"], "sha256": "f" * 64}}
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert _eval(data, out, "--compare", str(tmp_path / "other.json")) == 0
    assert "note: the baseline differs in data: sha256 ffffffffffff" in capsys.readouterr().err


def test_other_settings_into_the_same_output_are_refused(evaluated, capsys):
    data, out = evaluated
    if not (out / "eval.json").exists():
        assert _eval(data, out) == 0
    assert _eval(data, out, "--max-new-tokens", "5") == 2
    assert "max_new_tokens: 12 → 5" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--task", "nope"], "--task"),
        (["--address", "127.0.0.1:1"], "--address needs --protocol"),
        (["--k", "2", "--temperature", "0"], "--temperature > 0"),
        (["--temperature", "0.7"], "--temperature needs --k > 1; --k 1 decodes greedily"),
        (["--box-format", "qwen2vl"], "unknown box format 'qwen2vl'"),
        (["--box-format", "plain"], "--box-format: 'plain' needs its frame"),
        (["--seed", "-5"], "--seed must be >= 0, got -5"),
        (["--threshold", "nan"], "--threshold must be a number >= 0, got nan"),
        (["--threshold", "inf"], "--threshold must be a number >= 0, got inf"),
        (["--k", "2", "--temperature", "nan"], "--temperature > 0, got nan"),
        (["--k", "2", "--temperature", "inf"], "--temperature > 0, got inf"),
        (["--output", ""], "--output must name a folder, got ''"),
        (["--prompt", ""], "--prompt is empty"),
        (["--served-model", "foo"], "--served-model needs --address"),
        (["--video-fps", "nan"], "--video-fps must be a positive number, got nan"),
        (["--video-fps", "-1"], "--video-fps must be a positive number, got -1.0"),
        (
            ["--video-max-frames", "4", "--address", "127.0.0.1:1", "--protocol", "openai"],
            "--video-* sample videos, which --protocol openai does not carry",
        ),
    ],
)
def test_usage_errors_exit_2_before_any_model_loads(tmp_path, capsys, extra, message):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "images": ["x.png"], "boxes": [[0, 0, 1, 1]]}\n')
    argv = ["eval", "--data", str(data), "--task", "refcoco", "--model", str(TINY)]
    assert main([*argv, "--output", str(tmp_path / "o"), *extra]) == 2
    assert message in capsys.readouterr().err


def test_nothing_scored_exits_3_with_the_reasons_and_still_writes_results(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "expression": "x"}\n{"id": "b", "expression": "y"}\n')
    assert _eval(data, tmp_path / "o") == 3
    assert "not_scorable: 2" in capsys.readouterr().err
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert results["items"] == 0 and results["rejected"] == {"not_scorable": 2}


def test_a_hugging_face_refcoco_parquet_is_evaluated_as_published(tmp_path):
    """lmms-lab/RefCOCO's layout: image structs with PNG bytes, ``answer`` a list of expressions
    (one item each), ``bbox`` x, y, w, h in pixels; no conversion step."""
    rows = []
    for i, (x, y) in enumerate([(10, 10), (40, 20)]):
        image = Image.new("RGB", (96, 80), "white")
        ImageDraw.Draw(image).rectangle([x, y, x + 25, y + 20], fill="red")
        png = io.BytesIO()
        image.save(png, format="PNG")
        rows.append(
            {
                "question_id": f"q{i}",
                "image": {"bytes": png.getvalue(), "path": f"{i}.png"},
                "answer": ["red box", "the red one"],
                "bbox": [x, y, 25, 20],
            }
        )
    data = tmp_path / "refcoco_val.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    out = tmp_path / "out"
    assert _eval(data, out, "--bootstrap", "100") == 0
    results = json.loads((out / "results.json").read_text())
    assert results["items"] == 4 and results["rejected"] == {}
    assert results["data"]["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    page = (out / "report.html").read_text()
    assert all(f"<h3>q{i}-{k}" in page for i in (0, 1) for k in (0, 1))
    assert page.count("<img src='data:image/png;base64,") == 4


@pytest.mark.parametrize("extra, deterministic", [([], True), (["--no-deterministic"], False)])
def test_the_local_engine_is_deterministic_unless_asked_otherwise(tmp_path, extra, deterministic):
    args = build_parser().parse_args(
        ["--data", "d", "--task", "refcoco", "--model", str(TINY), "--output", "o", *extra]
    )
    predictor, release = build_predictor(args)
    try:
        assert predictor.engine.deterministic is deterministic
    finally:
        release()
    assert settings_of(args)["deterministic"] is deterministic


def test_box_format_reads_a_fine_tuned_models_boxes_in_the_format_it_was_trained_on(tmp_path):
    """The tiny Qwen3-VL grounding model was trained on Qwen2-VL-style boxes: read as its family
    writes them (JSON ``bbox_2d``) nothing is a box; with ``--box-format qwen2_vl`` every
    completion's box is read, and the setting is recorded."""
    data = write_refs(tmp_path)
    model = REPO / "assets" / "tiny-qwen3vl-ground"
    runs = {}
    for name, extra in (("family", []), ("qwen2_vl", ["--box-format", "qwen2_vl"])):
        argv = ["eval", "--data", str(data), "--task", "refcoco", "--model", str(model)]
        argv += ["--output", str(tmp_path / name), "--max-new-tokens", "24", "--no-progress"]
        main([*argv, *extra])
        runs[name] = json.loads((tmp_path / name / "results.json").read_text())
    assert runs["family"]["unreadable"] == {"no_box": 3}
    # every completion now holds a box (this model's boxes on these images may still be reversed)
    assert not {"no_box", "no_box:points_only"} & set(runs["qwen2_vl"]["unreadable"])
    assert runs["qwen2_vl"]["settings"]["box_format"] == "qwen2_vl"


@pytest.mark.parametrize("extra, temperature", [([], 1.0), (["--temperature", "0.5"], 0.5)])
def test_k_samples_at_the_given_temperature_or_1(extra, temperature):
    """--temperature has no default of its own (so a typed one with --k 1 is refused, not
    ignored); --k > 1 samples at 1.0 unless it is given, and the settings record it."""
    args = build_parser().parse_args(
        ["--data", "d", "--task", "refcoco", "--model", str(TINY), "--output", "o", "--k", "2"]
        + extra
    )
    predictor, release = build_predictor(args)
    try:
        assert predictor.sampled.temperature == temperature
    finally:
        release()
    assert settings_of(args)["temperature"] == temperature


def test_a_rerun_after_an_item_changed_says_how_many_were_redone(tmp_path, capsys):
    data, out = write_refs(tmp_path), tmp_path / "out"
    extra = ("--limit", "2", "--bootstrap", "0", "--max-new-tokens", "2")
    assert _eval(data, out, *extra) == 0
    assert "redone" not in capsys.readouterr().out
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    rows[1]["expression"] = "the other box"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _eval(data, out, *extra) == 0
    assert "redone: 1 item(s) whose prompt or image changed" in capsys.readouterr().out


def test_an_unreadable_prediction_file_is_reported_once_and_run_again(tmp_path, capsys):
    data, out = write_refs(tmp_path), tmp_path / "out"
    extra = ("--limit", "2", "--bootstrap", "0", "--max-new-tokens", "2")
    assert _eval(data, out, *extra) == 0
    first = sorted(out.glob("predictions/*.json"))[0]
    first.write_text("{not json")
    capsys.readouterr()
    assert _eval(data, out, *extra) == 0
    assert capsys.readouterr().err.count(f"ignoring unreadable prediction file {first}") == 1
    assert json.loads(first.read_text())["id"]  # the item ran again and its file is whole


def test_a_family_without_a_box_format_of_its_own_evaluates_without_the_flag(tmp_path, capsys):
    """Gemma 3 (as LLaVA, SmolVLM, Mistral 3, LFM2-VL) has no box convention of its own: its
    boxes are read as lmms-eval reads them, and no task needs --box-format to start."""
    from vlrollout.testing.tiny_families import save_tiny_vlm

    model = save_tiny_vlm("gemma3", tmp_path / "gemma3")
    data = write_refs(tmp_path)
    for task in ("refcoco", "vqa"):
        out = tmp_path / task
        argv = ["eval", "--data", str(data), "--task", task, "--model", str(model)]
        argv += ["--output", str(out), "--max-new-tokens", "2", "--limit", "1", "--no-progress"]
        if task == "vqa":
            argv += ["--map", "answer=expression", "question=expression"]
        assert main(argv) == 0, capsys.readouterr().err
        assert json.loads((out / "results.json").read_text())["items"] == 1


def test_another_box_format_rescores_the_predictions_on_disk(tmp_path):
    """The box format changes how completions are read, not the completions: a rerun with
    another one rescores the saved predictions (no model run), as eval.md promises."""
    data = write_refs(tmp_path)
    model = REPO / "assets" / "tiny-qwen3vl-ground"
    argv = ["eval", "--data", str(data), "--task", "refcoco", "--model", str(model)]
    argv += ["--output", str(tmp_path / "out"), "--max-new-tokens", "24", "--no-progress"]
    assert main(argv) == 0
    first = json.loads((tmp_path / "out" / "results.json").read_text())
    saved = {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "predictions").glob("*.json")}
    assert main([*argv, "--box-format", "qwen2_vl"]) == 0
    again = json.loads((tmp_path / "out" / "results.json").read_text())
    assert first["unreadable"] == {"no_box": 3} and "no_box" not in again["unreadable"]
    assert again["settings"]["box_format"] == "qwen2_vl"
    assert {p: p.stat().st_mtime_ns for p in saved} == saved  # the completions were kept


def test_videos_are_sampled_as_the_video_flags_say(tmp_path, capsys):
    """The shipped clips take 576 tokens each at the family's default sampling, more than the
    tiny model's prompt room (prompt_too_long); four small frames fit, and the settings are
    those a resume keeps. A frame budget the processor refuses is a usage error."""
    argv = ["eval", "--data", str(REPO / "assets" / "samples" / "video.jsonl"), "--task"]
    argv += ["count", "--model", str(TINY), "--no-progress", "--max-new-tokens", "4"]
    few = ["--video-max-frames", "4", "--video-min-pixels", "3136", "--video-max-pixels", "3136"]
    assert main([*argv, "--output", str(tmp_path / "few"), *few]) == 0
    results = json.loads((tmp_path / "few" / "results.json").read_text())
    assert results["items"] == 3 and results["rejected"] == {"not_scorable": 3}  # temporal ones
    assert results["settings"]["video"] == {
        "fps": None, "max_frames": 4, "min_pixels": 3136, "max_pixels": 3136
    }  # fmt: skip
    capsys.readouterr()
    assert main([*argv, "--output", str(tmp_path / "low"), "--video-max-pixels", "3136"]) == 2
    err = capsys.readouterr().err
    assert "video max_pixels=3136 is below the processor's own min_pixels" in err
    assert "Traceback" not in err


def test_the_unknown_box_format_message_lists_only_names_that_are_taken():
    """Bare ``plain`` is refused (it needs its frame): the list of known names leaves it out."""
    from vlrollout.eval.metrics.boxes import check_box_format

    with pytest.raises(ValueError) as info:
        check_box_format("nosuch")
    known = str(info.value).split("expected one of ")[1].split(" or plain:FRAME")[0]
    assert "'plain'" not in known and "'qwen2_vl'" in known
