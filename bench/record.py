"""One benchmark run as a small JSON record: the command that printed the numbers, when, on what
machine, and the tables the README shows.

The README's benchmark tables are rendered from these records by
``scripts/render_readme_numbers.py`` (``make readme-numbers``), never typed by hand, so every
number there is one that a command in this repository printed, with the command beside it. A
benchmark writes ``<record dir>/<name>.json`` when it finishes; ``--record-dir`` (default
``bench/results``) lets the tests run benchmarks without rewriting the committed records.

A record keeps the load average at the start and the end of the run (these machines are shared,
and a number measured under load is only comparable with its load beside it) and the commit the
code was at, saying whether tracked files differed from it (a number measured on someone's
unfinished change is not the commit's).

    >>> run = Run("demo", ["--quick"], script="bench/bench_demo.py")
    >>> rec = run.record([Table(["case", "ms"], [["a", "1.0"]])], "headline: 1.0 ms", {"a_ms": 1.0})
    >>> rec.command, Record.from_json(rec.to_json()) == rec
    ('.venv/bin/python bench/bench_demo.py --quick', True)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PYTHON = ".venv/bin/python"


@dataclass(frozen=True)
class Table:
    """A table as the README shows it: column names and rows of already formatted cells."""

    columns: list[str]
    rows: list[list[str]]
    title: str = ""

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"row {row} has {len(row)} cells for {len(self.columns)} columns")

    def text(self) -> str:
        """The title, then the columns right-aligned, one line per row (a terminal's view).

        >>> print(Table(["k", "s"], [["0", "1.5"], ["10", "2"]], title="t").text())
        t
         k    s
         0  1.5
        10    2
        """
        widths = [
            max([len(c), *(len(r[i]) for r in self.rows)]) for i, c in enumerate(self.columns)
        ]
        lines = [self.title] if self.title else []
        for row in [self.columns, *self.rows]:
            lines.append("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
        return "\n".join(lines)


@dataclass(frozen=True)
class Record:
    """What one benchmark run printed, and the conditions it ran under.

    Attributes:
        name: The record's name: the file is ``<name>.json``, the README region ``bench:<name>``.
        command: The command line that produced it, runnable from the repository root.
        date: When the run finished (UTC, ISO 8601, seconds).
        commit: The commit checked out when it ran (12 hex digits; ``"unknown"`` outside git).
        dirty: Tracked files differed from ``commit`` (uncommitted changes were measured too).
        cores: CPU cores of the machine (``os.cpu_count()``).
        load_start, load_end: 1-minute load average when the run started and finished.
        seconds: Wall time of the run.
        mode: ``"default"``, or what a shortened run left out (``"quick: ..."``).
        tables: What the README shows, formatted by the benchmark itself.
        headline: The benchmark's last printed line.
        numbers: The same results unformatted, for anyone comparing runs.
        notes: Lines the README prints under the tables (conditions of this run).
    """

    name: str
    command: str
    date: str
    commit: str
    dirty: bool
    cores: int
    load_start: float
    load_end: float
    seconds: float
    mode: str
    tables: list[Table]
    headline: str
    numbers: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Record:
        raw = json.loads(text)
        raw["tables"] = [Table(**t) for t in raw["tables"]]
        return cls(**raw)


def command_line(script: str, argv: list[str]) -> str:
    """The command as someone would type it at the repository root, without ``--record-dir``
    (where the record went does not change the numbers)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--record-dir":
            skip = True
        elif not arg.startswith("--record-dir="):
            kept.append(arg)
    path = Path(script)
    if path.is_absolute() and path.is_relative_to(REPO):
        path = path.relative_to(REPO)
    prefix = [] if path.suffix == ".sh" else [PYTHON]
    return shlex.join([*prefix, str(path), *kept])


def source_state(repo: Path = REPO) -> tuple[str, bool]:
    """The commit ``repo`` has checked out, and whether its tracked files differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        return git("rev-parse", "--short=12", "HEAD"), bool(
            git("status", "--porcelain", "--untracked-files=no")
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True


def _load() -> float:
    return round(os.getloadavg()[0], 2)


class Run:
    """Started when a benchmark starts; :meth:`record` makes its record when it ends.

    Args:
        name: The record's name (``bench_rewards.py`` records ``rewards``).
        argv: The benchmark's arguments (``sys.argv[1:]`` when ``None``).
        script: The benchmark's path (``sys.argv[0]`` when ``None``).
    """

    def __init__(self, name: str, argv: list[str] | None = None, script: str | None = None):
        self.name = name
        self.command = command_line(
            script or sys.argv[0], list(sys.argv[1:] if argv is None else argv)
        )
        self.commit, self.dirty = source_state()
        self.load_start = _load()
        self._t0 = time.perf_counter()

    def record(
        self,
        tables: list[Table],
        headline: str,
        numbers: dict[str, Any] | None = None,
        mode: str = "default",
        notes: list[str] | None = None,
    ) -> Record:
        return Record(
            name=self.name,
            command=self.command,
            date=datetime.now(UTC).replace(microsecond=0).isoformat(),
            commit=self.commit,
            dirty=self.dirty,
            cores=os.cpu_count() or 1,
            load_start=self.load_start,
            load_end=_load(),
            seconds=round(time.perf_counter() - self._t0, 1),
            mode=mode,
            tables=tables,
            headline=headline,
            numbers=dict(numbers or {}),
            notes=list(notes or []),
        )


def add_record_dir(parser: argparse.ArgumentParser) -> None:
    """``--record-dir DIR``: where the run's record goes (default ``bench/results``)."""
    parser.add_argument(
        "--record-dir",
        type=Path,
        default=RESULTS,
        help="write the run's JSON record here (default bench/results, which the README uses)",
    )


def fresh_folder(value: str) -> Path:
    """An argparse ``type`` for a folder that training runs will write to: new or empty, made
    absolute (the runs start in the repository root, the benchmark wherever it was called).

    ``vlrollout train`` resumes from the checkpoints it finds in its output folder, so a folder
    holding an earlier run would make the benchmark report that run's numbers as this command's
    measurement (under this commit and this machine's load).
    """
    path = Path(value).resolve()  # the runs write it from the repository root
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise argparse.ArgumentTypeError(
            f"{value} is not a new or empty folder; its runs would resume from the checkpoints in "
            "it and the record would report them as this measurement"
        )
    return path


def add_keep(parser: argparse.ArgumentParser) -> None:
    """``--keep DIR``: keep the training runs' folders there (new or empty, see ``fresh_folder``)."""
    parser.add_argument(
        "--keep",
        type=fresh_folder,
        default=None,
        help="keep run folders under this folder (new or empty: every run starts from nothing)",
    )


def write(record: Record, directory: Path = RESULTS) -> Path:
    """Write ``<directory>/<name>.json`` (replacing it whole: the latest run is the record)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{record.name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(record.to_json(), encoding="utf-8")
    tmp.replace(path)
    print(f"record: {path}", file=sys.stderr)
    return path


def read(path: Path) -> Record:
    return Record.from_json(path.read_text(encoding="utf-8"))
