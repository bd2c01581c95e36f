"""The README's benchmark tables are rendered from the committed benchmark records, by a script.

No benchmark runs here: the tests read the JSON records in ``bench/results`` as committed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))

from record import Record, Run, Table, command_line  # noqa: E402
from render_readme_numbers import (  # noqa: E402
    REGION,
    MissingRecordError,
    load_records,
    region_names,
    render,
)


def test_every_readme_region_has_a_committed_record_from_a_command_in_the_repo():
    names = region_names(README.read_text(encoding="utf-8"))
    records = load_records(RESULTS)
    assert names and len(set(names)) == len(names)
    assert sorted(set(names) - set(records)) == []
    for name in names:
        rec = records[name]
        assert rec.name == name and rec.tables and rec.headline and rec.cores >= 1
        script = rec.command.removeprefix(".venv/bin/python ").split()[0]
        assert (REPO / script).is_file(), rec.command


def test_rendering_twice_changes_nothing_and_the_readme_is_what_the_records_render():
    text = README.read_text(encoding="utf-8")
    records = load_records(RESULTS)
    once = render(text, records)
    assert render(once, records) == once
    assert once == text, "README.md differs from its records: run make readme-numbers"


def test_every_table_under_performance_lies_in_a_rendered_region():
    text = README.read_text(encoding="utf-8")
    start = text.index("## Performance\n")
    end = text.index("\n## ", start + 1)
    outside = REGION.sub("", text[start:end])
    assert [line for line in outside.splitlines() if line.startswith("|")] == []


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
