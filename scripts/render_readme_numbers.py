"""Render the README's benchmark tables from the benchmarks' latest JSON records.

Each README region between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` is replaced by
what ``bench/results/NAME.json`` holds (written by the benchmark when it ran, see
``bench/record.py``): the command that printed the numbers, when, on how many cores under what
load, its tables and its last line. Nothing outside the regions changes, and rendering an already
rendered README gives it back unchanged. A region without a record is an error: a number with no
command behind it does not belong in the README.

    .venv/bin/python scripts/render_readme_numbers.py           # rewrite README.md (make readme-numbers)
    .venv/bin/python scripts/render_readme_numbers.py --check   # exit 1 if README.md is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from record import RESULTS, Record, Table, read  # noqa: E402

README = REPO / "README.md"
REGION = re.compile(
    r"<!-- bench:(?P<name>[a-z0-9_]+) -->\n(?P<body>.*?)<!-- /bench:(?P=name) -->", re.S
)
_ESCAPED = re.compile(r"([\\|*`]|<(?=[A-Za-z/!?]))")


class MissingRecordError(LookupError):
    """A README region names a record that does not exist."""


def region_names(text: str) -> list[str]:
    """The names of the regions in ``text``, in order."""
    return [m["name"] for m in REGION.finditer(text)]


def escape(text: str) -> str:
    """``text`` as literal Markdown inside a paragraph or a table cell: the characters that would
    format, split a cell or open an HTML tag are backslash-escaped (``<=`` stays as it is)."""
    return _ESCAPED.sub(r"\\\1", text)


def render_table(table: Table) -> str:
    lines = []
    if table.title:
        lines += [escape(table.title) + ":", ""]
    lines.append("| " + " | ".join(escape(c) for c in table.columns) + " |")
    lines.append("|" + "---|" * len(table.columns))
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def render_record(rec: Record) -> str:
    """A region's body: where the numbers come from, then the tables, notes and last line."""
    date = rec.date.replace("T", " ").removesuffix("+00:00")
    code = f"commit {rec.commit}" + (" with uncommitted changes" if rec.dirty else "")
    source = (
        f"Printed by `{rec.command}` on {date} UTC at {code}, in {rec.seconds:.0f} s on "
        f"{rec.cores} CPU cores (load average {rec.load_start:.1f} at the start, "
        f"{rec.load_end:.1f} at the end)."
    )
    if rec.mode != "default":
        source += f" Not the default run: {escape(rec.mode)}."
    parts = [source]
    parts += [render_table(t) for t in rec.tables]
    parts += [escape(n) for n in rec.notes]
    parts.append("Last line: " + escape(rec.headline))
    return "\n\n".join(parts) + "\n"


def render(text: str, records: Mapping[str, Record]) -> str:
    """``text`` with every region's body rendered from its record.

    Raises:
        MissingRecordError: a region has no record.
    """
    missing = [name for name in region_names(text) if name not in records]
    if missing:
        raise MissingRecordError(
            f"README regions without a record in bench/results: {', '.join(missing)} "
            "(run the benchmark, or take the region out)"
        )

    def body(match: re.Match[str]) -> str:
        name = match["name"]
        return f"<!-- bench:{name} -->\n\n{render_record(records[name])}\n<!-- /bench:{name} -->"

    return REGION.sub(body, text)


def load_records(directory: Path = RESULTS) -> dict[str, Record]:
    """Every record in ``directory``, by name."""
    return {path.stem: read(path) for path in sorted(directory.glob("*.json"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--check", action="store_true", help="exit 1 if the README is stale")
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    records = load_records(args.results)
    try:
        rendered = render(text, records)
    except MissingRecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    unused = sorted(set(records) - set(region_names(text)))
    if unused:
        print(f"note: records no README region shows: {', '.join(unused)}", file=sys.stderr)
    if args.check:
        if rendered != text:
            print(f"{args.readme} is stale: run make readme-numbers", file=sys.stderr)
            return 1
        return 0
    if rendered != text:
        args.readme.write_text(rendered, encoding="utf-8")
        print(f"rendered {len(region_names(text))} regions into {args.readme}")
    else:
        print(f"{args.readme} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
