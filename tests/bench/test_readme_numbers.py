"""The benchmark tables of the README and the docs are rendered from the committed benchmark
records, by a script.

No benchmark runs here: the tests read the JSON records in ``bench/results`` as committed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))

from record import Record, Run, Table, command_line  # noqa: E402
from render_readme_numbers import (  # noqa: E402
    LONG_TABLE_ROWS,
    REGION,
    MissingRecordError,
    charts,
    load_records,
    pages,
    region_names,
    render,
)


def _regions() -> list[tuple[Path, str]]:
    """Every region of every page, as (page, tag)."""
    return [(p, m["tag"]) for p in pages() for m in REGION.finditer(p.read_text(encoding="utf-8"))]


def test_every_region_has_a_committed_record_from_a_command_in_the_repo():
    tags = [tag for _, tag in _regions()]
    names = [tag.split(":")[0] for tag in tags]
    records = load_records(RESULTS)
    assert tags and len(set(tags)) == len(tags), "a record is shown in full once, its headline once"
    assert sorted(set(names) - set(records)) == []
    for name in names:
        rec = records[name]
        if "/" not in name:  # a record in a folder (levers/...) is an earlier run, named apart
            assert rec.name == name
        assert rec.tables and rec.headline and rec.cores >= 1
        script = rec.command.removeprefix(".venv/bin/python ").split()[0]
        assert (REPO / script).is_file(), rec.command


def test_rendering_twice_changes_nothing_and_every_page_is_what_the_records_render():
    records = load_records(RESULTS)
    for page in pages():
        text = page.read_text(encoding="utf-8")
        once = render(text, records, page)
        assert render(once, records, page) == once
        assert once == text, f"{page} differs from its records: run make readme-numbers"
        for chart, svg in charts(text, records).items():
            assert chart.read_text(encoding="utf-8") == svg, f"{chart}: run make readme-numbers"


def test_every_table_in_the_results_pages_lies_in_a_rendered_region():
    for page in sorted((REPO / "docs" / "results").glob("*.md")):
        outside = REGION.sub("", page.read_text(encoding="utf-8"))
        assert [line for line in outside.splitlines() if line.startswith("|")] == [], page


def _record(name: str = "demo", headline: str = "headline: 2.0x") -> Record:
    run = Run(name, ["--quick", "--record-dir", "/tmp/x"], script=str(REPO / "bench" / "b.py"))
    table = Table(["case", "ratio"], [["a|b", "2.0x"]], title="best of 3")
    return run.record([table], headline, {"ratio": 2.0}, mode="quick: 1 run")


def test_a_record_names_its_command_without_where_it_was_written_and_reads_back_equal():
    rec = _record()
    assert rec.command == ".venv/bin/python bench/b.py --quick"
    assert command_line("bench/setup_footprint.sh", []) == "bench/setup_footprint.sh"
    assert Record.from_json(rec.to_json()) == rec


def test_only_region_bodies_change_and_a_region_without_a_record_is_refused():
    text = "intro *kept* 1.5x\n<!-- bench:demo -->\nhand-typed 9.9x\n<!-- /bench:demo -->\nend\n"
    out = render(text, {"demo": _record()})
    assert out.startswith("intro *kept* 1.5x\n<!-- bench:demo -->\n") and out.endswith(
        "<!-- /bench:demo -->\nend\n"
    )
    assert "9.9x" not in out and "`.venv/bin/python bench/b.py --quick`" in out
    assert "| a\\|b | 2.0x |" in out and "Not the default run: quick: 1 run." in out
    assert "a \\*b\\* <= 1 \\<point>" in render(
        "<!-- bench:demo -->\n<!-- /bench:demo -->",
        {"demo": _record(headline="a *b* <= 1 <point>")},
    )
    assert render(out, {"demo": _record(headline="headline: 3.0x")}).count("3.0x") == 1
    with pytest.raises(MissingRecordError, match="demo"):
        render(text, {})


def test_a_table_row_must_fit_its_columns():
    with pytest.raises(ValueError, match="3 cells for 2 columns"):
        Table(["a", "b"], [["1", "2", "3"]])


def test_rendered_tables_are_markdown_tables_with_one_header_rule():
    out = render("<!-- bench:demo -->\n<!-- /bench:demo -->\n", {"demo": _record()})
    lines = out.splitlines()
    rule = lines.index("|---|---|")
    assert lines[rule - 1] == "| case | ratio |" and lines[rule - 2] == ""
    assert re.search(r"^best of 3:$", out, re.M)


def test_a_headline_region_holds_the_last_line_and_a_link_to_the_record():
    text = "<!-- bench:demo:headline -->\n<!-- /bench:demo:headline -->\n"
    out = render(text, {"demo": _record(headline="headline: 2.0x")}, REPO / "docs" / "x.md")
    assert "2.0x ([record](../bench/results/demo.json))" in out
    assert "headline:" not in out and "Printed by" not in out and "| a" not in out
    assert region_names(out) == ["demo"]
    kept = "<!-- bench:levers/demo:headline -->\n<!-- /bench:levers/demo:headline -->\n"
    out = render(kept, {"levers/demo": _record()}, REPO / "docs" / "results" / "x.md")
    assert "([record](../../bench/results/levers/demo.json))" in out
    assert region_names(out) == ["levers/demo"]


def test_a_long_per_step_table_is_drawn_and_linked_not_printed():
    rows = [[str(i), f"{i / 10:.2f}", f"{i / 20:.2f}"] for i in range(1, LONG_TABLE_ROWS + 2)]
    long = Table(["step", "ours reward", "TRL reward"], rows, title="per step")
    run = Run("demo", [], script=str(REPO / "bench" / "b.py"))
    rec = run.record([long], "headline: 1.0", {"split": "test", "eval_seed": 7001})
    text = "<!-- bench:demo -->\n<!-- /bench:demo -->\n"
    out = render(text, {"demo": rec}, REPO / "docs" / "results" / "x.md")
    assert "| 1 | 0.10 |" not in out
    assert "![per step](charts/demo-1.svg)" in out
    assert "[the record](../../bench/results/demo.json)" in out
    assert "Evaluated on the test split (eval_seed 7001)." in out
    ((path, svg),) = charts(text, {"demo": rec}).items()
    assert path.name == "demo-1.svg" and svg.count("<polyline") == 2
    short = run.record([Table(long.columns, rows[:LONG_TABLE_ROWS])], "headline: 1.0", {})
    out = render(text, {"demo": short})
    assert "| 1 | 0.10 |" in out and "split" not in out and charts(text, {"demo": short}) == {}
