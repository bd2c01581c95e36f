"""Render the benchmark regions of the README and the docs from the benchmarks' latest JSON records.

Each region between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``, in ``README.md`` or any
page under ``docs/``, is replaced by what ``bench/results/NAME.json`` holds (written by the
benchmark when it ran, see ``bench/record.py``): the command that printed the numbers, when, on how
many cores under what load, the evaluation split when the record names one, its tables and its
last line. A region ``<!-- bench:NAME:headline -->`` ... ``<!-- /bench:NAME:headline -->`` holds
the record's last line only, with a link to the record (for a headline in the README). NAME may
name a record in a folder of ``bench/results`` (``levers/grounding_group_sd_learning``: an earlier
run of a benchmark, kept for what it measured).

A per-step table longer than :data:`LONG_TABLE_ROWS` rows (the sampled reward at every step) is not
printed: the region shows it as an SVG line chart, written to ``docs/results/charts/`` by the same
run, and links the record that holds every row. A record whose ``numbers`` hold ``charts`` (chart
specs: a title, axis labels and series of points, as ``bench/bench_scaling.py`` writes) gets each
drawn as a log-log SVG chart there too, shown after its tables.

Nothing outside the regions changes, and rendering an already rendered page gives it back
unchanged. A region without a record is an error: a number with no command behind it does not
belong in the docs.

    .venv/bin/python scripts/render_readme_numbers.py           # rewrite the pages (make readme-numbers)
    .venv/bin/python scripts/render_readme_numbers.py --check   # exit 1 if a page or chart is stale
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from record import RESULTS, Record, Table, read  # noqa: E402
from scaling_charts import loglog_chart  # noqa: E402

from vlrollout.charts import line_chart  # noqa: E402

README = REPO / "README.md"
DOCS = REPO / "docs"
CHARTS = DOCS / "results" / "charts"
LONG_TABLE_ROWS = 12
"""A table whose first column is ``step`` and which has more rows than this is drawn, not printed."""
REGION = re.compile(
    r"<!-- bench:(?P<tag>(?P<name>[a-z0-9_]+(?:/[a-z0-9_]+)*)(?::(?P<view>headline))?) -->\n"
    r"(?P<body>.*?)<!-- /bench:(?P=tag) -->",
    re.S,
)
_ESCAPED = re.compile(r"([\\|*`]|<(?=[A-Za-z/!?]))")


class MissingRecordError(LookupError):
    """A region names a record that does not exist."""


def region_names(text: str) -> list[str]:
    """The names of the records the regions in ``text`` show, in order (a name appears once per
    region, so a headline region and a full region of one record give it twice)."""
    return [m["name"] for m in REGION.finditer(text)]


def escape(text: str) -> str:
    """``text`` as literal Markdown inside a paragraph or a table cell: the characters that would
    format, split a cell or open an HTML tag are backslash-escaped (``<=`` stays as it is)."""
    return _ESCAPED.sub(r"\\\1", text)


def is_long(table: Table) -> bool:
    """Whether ``table`` is a per-step table too long to print (it is drawn instead)."""
    return bool(table.columns) and table.columns[0] == "step" and len(table.rows) > LONG_TABLE_ROWS


def chart_path(name: str, index: int) -> Path:
    """Where the chart of table ``index`` (0-based) of record ``name`` is written."""
    return CHARTS / f"{name.replace('/', '-')}-{index + 1}.svg"


def curve_path(name: str, index: int) -> Path:
    """Where chart spec ``index`` (0-based) of record ``name``'s ``numbers["charts"]`` is drawn."""
    return CHARTS / f"{name.replace('/', '-')}-curve-{index + 1}.svg"


def curve_specs(rec: Record) -> list[dict]:
    """The record's chart specs (``numbers["charts"]``), none for most records."""
    return list(rec.numbers.get("charts") or [])


def _link(target: Path, page: Path) -> str:
    return Path(os.path.relpath(target, page.parent)).as_posix()


def _number(cell: str) -> float | None:
    try:
        return float(cell.split(" ±")[0].replace(",", ""))
    except ValueError:
        return None


def chart(table: Table) -> str:
    """SVG line charts of a per-step table, stacked: the columns are grouped by their name after
    the first word (``ours sampled reward`` with ``TRL sampled reward``, ``ours s`` with ``TRL s``)
    and each group is one chart with a line per column; a cell that is not a number is a gap."""
    steps = [float(row[0]) for row in table.rows]
    groups: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for i, column in enumerate(table.columns[1:], start=1):
        quantity = column.split(" ", 1)[-1]
        quantity = "seconds per step" if quantity == "s" else quantity
        values = [_number(row[i]) for row in table.rows]
        groups.setdefault(quantity, {})[column] = list(zip(steps, values, strict=True))
    charts = [line_chart(quantity, series) for quantity, series in groups.items()]
    height = 220 * len(charts)
    inner = "".join(f'<g transform="translate(0,{220 * i})">{c}</g>' for i, c in enumerate(charts))
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="520" height="{height}">{inner}</svg>\n'


def render_table(table: Table) -> str:
    lines = []
    if table.title:
        lines += [escape(table.title) + ":", ""]
    lines.append("| " + " | ".join(escape(c) for c in table.columns) + " |")
    lines.append("|" + "---|" * len(table.columns))
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def render_long_table(rec: Record, index: int, page: Path, name: str) -> str:
    """A long per-step table as its chart and a link to the record holding every row."""
    table = rec.tables[index]
    title = escape(table.title) if table.title else "per step"
    record = _link(RESULTS / f"{name}.json", page)
    return (
        f"{title} ({len(table.rows)} steps; every row in [the record]({record})):\n\n"
        f"![{title}]({_link(chart_path(name, index), page)})"
    )


def split_line(rec: Record) -> str:
    """Which held-out items the record was evaluated on, when the record says ('' when not)."""
    split = rec.numbers.get("split")
    if not split:
        return ""
    seed = rec.numbers.get("eval_seed")
    return f"Evaluated on the {escape(str(split))} split" + (
        f" (eval_seed {seed})." if seed is not None else "."
    )


def render_record(rec: Record, page: Path = README, name: str | None = None) -> str:
    """A region's body: where the numbers come from, then the tables, notes and last line.
    ``name`` is the record's path under ``bench/results`` without ``.json`` (default: its name)."""
    name = name or rec.name
    date = rec.date.replace("T", " ").removesuffix("+00:00")
    code = f"commit {rec.commit}" + (" with uncommitted changes" if rec.dirty else "")
    source = (
        f"Printed by `{rec.command}` on {date} UTC at {code}, in {rec.seconds:.0f} s on "
        f"{rec.cores} CPU cores (load average {rec.load_start:.1f} at the start, "
        f"{rec.load_end:.1f} at the end)."
    )
    if rec.mode != "default":
        source += f" Not the default run: {escape(rec.mode)}."
    if split_line(rec):
        source += " " + split_line(rec)
    parts = [source]
    parts += [
        render_long_table(rec, i, page, name) if is_long(t) else render_table(t)
        for i, t in enumerate(rec.tables)
    ]
    parts += [
        f"![{escape(spec['title'])}]({_link(curve_path(name, i), page)})"
        for i, spec in enumerate(curve_specs(rec))
    ]
    parts += [escape(n) for n in rec.notes]
    parts.append("Last line: " + escape(rec.headline))
    return "\n\n".join(parts) + "\n"


def render_headline(rec: Record, page: Path = README, name: str | None = None) -> str:
    """A headline region's body: the record's last line, its split, and a link to the record."""
    record = _link(RESULTS / f"{name or rec.name}.json", page)
    said = " split" in rec.headline  # the benchmark's own last line names it already
    split = f" {split_line(rec)}" if split_line(rec) and not said else ""
    line = re.sub(r"^headline:\s*", "", rec.headline, flags=re.I)
    return f"{escape(line)}{split} ([record]({record}))\n"


def render(text: str, records: Mapping[str, Record], page: Path = README) -> str:
    """``text`` (the page at ``page``, for relative links) with every region rendered.

    Raises:
        MissingRecordError: a region has no record.
    """
    missing = [name for name in region_names(text) if name not in records]
    if missing:
        raise MissingRecordError(
            f"regions of {page.name} without a record in bench/results: {', '.join(missing)} "
            "(run the benchmark, or take the region out)"
        )

    def body(match: re.Match[str]) -> str:
        name, tag = match["name"], match["tag"]
        rec = records[name]
        inner = (
            render_headline(rec, page, name) if match["view"] else render_record(rec, page, name)
        )
        return f"<!-- bench:{tag} -->\n\n{inner}\n<!-- /bench:{tag} -->"

    return REGION.sub(body, text)


def charts(text: str, records: Mapping[str, Record]) -> dict[Path, str]:
    """The chart files the full regions in ``text`` link to, by path."""
    out: dict[Path, str] = {}
    for match in REGION.finditer(text):
        if match["view"] or match["name"] not in records:
            continue
        name = match["name"]
        for i, table in enumerate(records[name].tables):
            if is_long(table):
                out[chart_path(name, i)] = chart(table)
        for i, spec in enumerate(curve_specs(records[name])):
            out[curve_path(name, i)] = loglog_chart(spec)
    return out


def load_records(directory: Path = RESULTS) -> dict[str, Record]:
    """Every record in ``directory`` and its folders, by path without ``.json``: ``engine`` for
    the latest engine record, ``levers/grounding_group_sd_learning`` for a record kept in
    ``levers/`` (an earlier run of a benchmark, named after what it measured)."""
    return {
        path.relative_to(directory).with_suffix("").as_posix(): read(path)
        for path in sorted(directory.rglob("*.json"))
    }


def pages(repo: Path = REPO) -> list[Path]:
    """The pages that may hold regions: the README and every Markdown page under ``docs/``."""
    return [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]


def _stale(files: Iterable[tuple[Path, str]]) -> list[Path]:
    return [p for p, text in files if not p.is_file() or p.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pages", type=Path, nargs="*", help="pages to render (default: README.md and docs/**)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale")
    args = parser.parse_args(argv)
    records = load_records(args.results)
    rendered: dict[Path, str] = {}
    drawn: dict[Path, str] = {}
    shown: set[str] = set()
    for page in args.pages or pages():
        text = page.read_text(encoding="utf-8")
        try:
            rendered[page] = render(text, records, page.resolve())
        except MissingRecordError as e:
            print(f"error: {page}: {e}", file=sys.stderr)
            return 2
        drawn.update(charts(text, records))
        shown.update(region_names(text))
    unused = sorted(set(records) - shown)
    if unused:
        print(f"note: records no page shows: {', '.join(unused)}", file=sys.stderr)
    stale = _stale([*rendered.items(), *drawn.items()])
    if args.check:
        for path in stale:
            print(f"{path} is stale: run make readme-numbers", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered.get(path, drawn.get(path, "")), encoding="utf-8")
        print(f"rendered {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    if not stale:
        print("every page is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
