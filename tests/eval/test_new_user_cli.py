"""`vlrollout eval` driven as a new user drives it: a wrong flag found before a long run."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from vlrollout.cli import main

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-qwen2vl"


def _refs(folder: Path, n: int = 2) -> Path:
    Image.new("RGB", (40, 30), "white").save(folder / "a.png")
    rows = [
        {
            "id": f"r{i}",
            "images": [str(folder / "a.png")],
            "expression": "x",
            "boxes": [[1, 1, 9, 9]],
        }
        for i in range(n)
    ]
    data = folder / "refs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def test_a_compare_baseline_of_another_task_is_refused_before_any_prediction(tmp_path):
    """docs/eval.md: every check that needs no model runs first, the --compare file included. A
    caption baseline given to a refcoco run must stop it with exit 2 before the model runs, not
    after the whole evaluation."""
    baseline = tmp_path / "base.json"
    baseline.write_text(json.dumps({"task": "caption", "metrics": {}, "per_split": {}}))
    out = tmp_path / "out"
    argv = ["eval", "--data", str(_refs(tmp_path)), "--task", "refcoco", "--model", str(TINY)]
    argv += ["--output", str(out), "--max-new-tokens", "2", "--no-progress", "--bootstrap", "0"]
    assert main([*argv, "--compare", str(baseline)]) == 2
    assert not list(out.glob("predictions/*.json"))


def test_a_temperature_without_k_is_not_silently_greedy(tmp_path, capsys):
    """`--temperature 0.7` with the default `--k 1` decodes greedily and records no temperature:
    the flag the user typed does nothing. It is refused (exit 2) or at least said."""
    out = tmp_path / "out"
    argv = ["eval", "--data", str(_refs(tmp_path, 1)), "--task", "refcoco", "--model", str(TINY)]
    argv += ["--output", str(out), "--max-new-tokens", "2", "--no-progress", "--bootstrap", "0"]
    rc = main([*argv, "--temperature", "0.7"])
    said = capsys.readouterr()
    assert rc == 2 or "--temperature" in said.out + said.err


def test_a_rerun_after_the_data_file_changed_does_not_reuse_stale_predictions(tmp_path):
    """Same command, same --output, but the data file was edited (a new referring expression, so
    a new prompt): the saved prediction answers the old prompt. docs/eval.md: a setting that shapes
    the predictions, data included, is refused (exit 2) unless --overwrite; or the item is run
    again. Reusing it silently scores an answer to another question."""
    data, out = _refs(tmp_path, 1), tmp_path / "out"
    argv = ["eval", "--data", str(data), "--task", "refcoco", "--model", str(TINY)]
    argv += ["--output", str(out), "--max-new-tokens", "2", "--no-progress", "--bootstrap", "0"]
    assert main(argv) == 0
    (saved,) = out.glob("predictions/*.json")
    record = json.loads(saved.read_text())
    saved.write_text(json.dumps({**record, "completions": ["STALE"]}))
    row = json.loads(data.read_text())
    data.write_text(json.dumps({**row, "expression": "the other box"}) + "\n")
    rc = main(argv)
    reused = any("STALE" in p.read_text() for p in out.glob("predictions/*.json"))
    assert rc == 2 or not reused


def test_a_prompt_template_with_a_stray_brace_is_a_usage_error_naming_the_fix(tmp_path, capsys):
    """`--prompt 'Locate {expression} {'` is not a template str.format reads: a usage error
    (exit 2) naming --prompt, not an internal error that exits 1, the status --compare gives a
    regression."""
    argv = ["eval", "--data", str(_refs(tmp_path, 1)), "--task", "refcoco", "--model", str(TINY)]
    argv += ["--output", str(tmp_path / "out"), "--no-progress", "--max-new-tokens", "2"]
    assert main([*argv, "--prompt", "Locate {expression} {"]) == 2
    assert "--prompt" in capsys.readouterr().err


def test_a_prompt_with_literal_json_braces_is_told_to_double_them(tmp_path, capsys):
    """A grounding prompt showing the answer format, `{"bbox_2d": [...]}`, reads `"bbox_2d"` as a
    field; the message must say to write literal braces as `{{` and `}}`, not only to map a column."""
    argv = ["eval", "--data", str(_refs(tmp_path, 1)), "--task", "refcoco", "--model", str(TINY)]
    argv += ["--output", str(tmp_path / "out"), "--no-progress", "--max-new-tokens", "2"]
    prompt = 'Locate {expression}. Answer as {"bbox_2d": [x1, y1, x2, y2]}'
    assert main([*argv, "--prompt", prompt]) == 2
    assert "{{" in capsys.readouterr().err


def test_the_report_puts_the_worst_of_equally_failed_items_first(tmp_path):
    """ACC@0.5 is 0 or 1, so most failed items tie on the headline metric; "worst items first"
    must then rank them by the other values (IoU), not by file order. Item `near` (IoU 0.4,
    hand-derived: 160 x 400 over 400 x 400 in 0-1000 units) comes first in the file; item `none`
    (no box at all) must come first in the report."""
    Image.new("RGB", (100, 100), "white").save(tmp_path / "a.png")
    rows = [
        {
            "id": i,
            "images": [str(tmp_path / "a.png")],
            "expression": "x",
            "boxes": [[10, 10, 50, 50]],
        }
        for i in ("near", "none")
    ]
    data = tmp_path / "refs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    argv = ["eval", "--data", str(data), "--task", "refcoco", "--model", str(TINY)]
    argv += ["--output", str(out), "--max-new-tokens", "2", "--no-progress", "--bootstrap", "0"]
    assert main(argv) == 0
    answers = {"near": "<|box_start|>(100,100),(260,500)<|box_end|>", "none": "no idea"}
    for saved in out.glob("predictions/*.json"):
        record = json.loads(saved.read_text())
        saved.write_text(json.dumps({**record, "completions": [answers[record["id"]]]}))
    assert main(argv) == 0
    page = (out / "report.html").read_text()
    assert page.index("<h3>none") < page.index("<h3>near")


def test_too_few_bootstrap_resamples_for_a_95_interval_are_refused(tmp_path, capsys):
    """One or two resamples printed a "95% CI" that did not hold the value."""
    import pytest

    data = _refs(tmp_path)
    for n in ("1", "2", "99"):
        argv = ["eval", "--data", str(data), "--task", "refcoco", "--model", str(TINY)]
        argv += ["--output", str(tmp_path / "o"), "--bootstrap", n]
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert "--bootstrap" in capsys.readouterr().err


def test_a_split_named_0_is_its_own_split():
    from vlrollout.eval.tasks import get_task

    score = get_task("count").score
    item = {"id": "x", "question": "q", "answer": 3}
    assert score({**item, "split": 0}, "3", [], "qwen2_vl").split == "0"
    assert score(item, "3", [], "qwen2_vl").split == "all"
