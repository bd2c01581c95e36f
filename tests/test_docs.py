"""The README is a short guide and the docs pages hold the rest, with no typed-in numbers.

Rules checked on the committed pages, each with a planted violation showing that the check fails:

- the README has at most :data:`README_MAX_LINES` lines and the quick-start commands;
- every page under ``docs/`` has a title and ``##`` headings, and the docs index links every page;
- in ``docs/results/``, every number in prose sits inside a rendered ``bench:`` region (see
  :func:`prose_numbers` for what counts as a number);
- no commit hash outside rendered regions, in the README or the docs;
- every relative link (and its ``#anchor``) in the README and the docs resolves, and every
  repository path written as code (``vlrollout/train/config.py``) exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from render_readme_numbers import REGION  # noqa: E402

README = REPO / "README.md"
DOCS = REPO / "docs"
INDEX = DOCS / "README.md"
README_MAX_LINES = 250
QUICK_START = ("make demo", "make test", "make train")

_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
_HEADING = re.compile(r"^(#{1,6}) +(.+?) *$", re.M)
# A number in prose: digits with a decimal point (a three-part version such as 1.0.4 is not one),
# a percentage, or a ratio written as digits followed by x or × (a "4x4 grid" is not one).
_NUMBER = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?\s?%"  # 29%, 7.6 %
    r"|(?<![\w.])\d+(?:\.\d+)?[x×](?!\w)"  # 0.84x, 3×
    r"|(?<![\w.])\d+\.\d+(?![\w.]*\d)"  # 0.174, 2.5 (not 1.0.4)
)
_HASH = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")


def pages() -> list[Path]:
    """The README and every Markdown page under ``docs/``."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def outside_regions(text: str) -> str:
    """``text`` without the rendered ``bench:`` regions (what a person wrote)."""
    return REGION.sub("", text)


def prose(text: str) -> str:
    """``text`` as prose: rendered regions, fenced code blocks, code spans and link targets out.

    Code (commands, keys, paths) and link targets are not prose: ``--lr 3e-4`` or
    ``bench/results/learning_grounding.json`` state what to run or where to look, not a result.
    """
    text = outside_regions(text)
    text = _FENCE.sub("", text)
    text = _CODE_SPAN.sub("", text)
    return _LINK_TARGET.sub("]", text)


def prose_numbers(text: str) -> list[str]:
    """The numbers in ``text``'s prose that only a measurement could give: digits with a decimal
    point (not a version like ``1.0.4``), percentages, and ratios like ``0.84x``. Integers stay
    allowed (step counts, seeds, sizes in a heading or a sentence), as do numbers in code."""
    return _NUMBER.findall(prose(text))


def commit_hashes(text: str) -> list[str]:
    """Hex words of 7-40 characters with a digit and a letter outside rendered regions."""
    return _HASH.findall(outside_regions(text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation out, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of the headings of ``text`` (outside code blocks)."""
    return {slug(m[2]) for m in _HEADING.finditer(_FENCE.sub("", text))}


def broken_links(page: Path, text: str) -> list[str]:
    """The relative links of ``page`` whose file (or heading anchor) does not exist."""
    broken = []
    for target in _LINK.findall(_FENCE.sub("", text)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve()
        if path and not file.exists():
            broken.append(target)
        elif anchor and (not path or file.suffix == ".md"):
            if anchor not in anchors(file.read_text() if path else text):
                broken.append(target)
    return broken


_REPO_PATH = re.compile(
    r"`((?:vlrollout|processors|rewards|tests|bench|scripts|examples|assets|docs)/[\w./-]*)`"
)


def missing_paths(text: str, repo: Path = REPO) -> list[str]:
    """Repository paths written as code outside rendered regions that do not exist in ``repo``
    (a page that names a moved module has drifted from the code)."""
    return [p for p in _REPO_PATH.findall(outside_regions(text)) if not (repo / p).exists()]


def heading_problems(text: str) -> list[str]:
    """What a page lacks: a ``#`` title on its first line (after a leading HTML comment, such as a
    generated page's banner), and ``##`` headings below it."""
    problems = []
    levels = [len(m[1]) for m in _HEADING.finditer(_FENCE.sub("", text))]
    if not re.sub(r"^\s*(<!--.*?-->\s*)*", "", text, flags=re.S).startswith("# "):
        problems.append("no '# title' on the first line")
    if levels.count(1) != 1:
        problems.append(f"{levels.count(1)} '#' titles")
    if 2 not in levels:
        problems.append("no '##' heading")
    return problems


def unlinked_pages(index: Path, docs: Path) -> list[str]:
    """Pages under ``docs`` that ``index`` does not link."""
    linked = {
        (index.parent / t.partition("#")[0]).resolve() for t in _LINK.findall(index.read_text())
    }
    return [
        str(p.relative_to(docs))
        for p in sorted(docs.rglob("*.md"))
        if p != index and p not in linked
    ]


# The committed pages.


def test_the_readme_is_a_short_guide_with_the_quick_start_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    quick_start = text[text.index("## Quick start") :]
    quick_start = quick_start[: quick_start.index("\n## ")]
    assert [c for c in QUICK_START if c not in quick_start] == []


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_docs_page_has_a_title_and_sections(page):
    assert heading_problems(page.read_text(encoding="utf-8")) == []


def test_the_docs_index_links_every_page():
    assert INDEX.is_file()
    assert unlinked_pages(INDEX, DOCS) == []


def test_numbers_in_the_results_pages_come_from_rendered_records():
    found = {
        str(p.relative_to(REPO)): prose_numbers(p.read_text(encoding="utf-8"))
        for p in sorted((DOCS / "results").glob("*.md"))
    }
    assert found and {p: n for p, n in found.items() if n} == {}


def test_no_commit_hash_in_the_prose():
    found = {
        str(p.relative_to(REPO)): commit_hashes(p.read_text(encoding="utf-8")) for p in pages()
    }
    assert {p: h for p, h in found.items() if h} == {}


def test_every_relative_link_resolves():
    found = {
        str(p.relative_to(REPO)): broken_links(p, p.read_text(encoding="utf-8")) for p in pages()
    }
    assert {p: b for p, b in found.items() if b} == {}


def test_every_repository_path_the_pages_name_exists():
    found = {
        str(p.relative_to(REPO)): missing_paths(p.read_text(encoding="utf-8")) for p in pages()
    }
    assert {p: m for p, m in found.items() if m} == {}


# Each check fails on a planted violation.

REGION_TEXT = "<!-- bench:demo -->\n\nmean 0.174 at 12.5% and 0.84x, commit 1a2b3c4d\n\n<!-- /bench:demo -->\n"


def test_a_long_readme_or_one_without_the_quick_start_fails(tmp_path, monkeypatch):
    text = README.read_text(encoding="utf-8")
    for planted in (text + "line\n" * README_MAX_LINES, text.replace("make train", "make trian")):
        (tmp_path / "README.md").write_text(planted, encoding="utf-8")
        monkeypatch.setattr(sys.modules[__name__], "README", tmp_path / "README.md")
        with pytest.raises(AssertionError):
            test_the_readme_is_a_short_guide_with_the_quick_start_commands()


def test_a_page_without_sections_and_an_unlinked_page_are_found(tmp_path):
    assert heading_problems("# Title\n\ntext\n") == ["no '##' heading"]
    assert heading_problems("text\n## a\n") == ["no '# title' on the first line", "0 '#' titles"]
    assert heading_problems("# T\n\n```\n# not a heading\n```\n## a\n") == []
    assert heading_problems("<!-- generated -->\n\n# T\n\n## a\n") == []
    (tmp_path / "results").mkdir()
    (tmp_path / "README.md").write_text("# I\n\n## P\n\n[a](a.md)\n")
    (tmp_path / "a.md").write_text("# A\n")
    (tmp_path / "results" / "b.md").write_text("# B\n")
    assert unlinked_pages(tmp_path / "README.md", tmp_path) == ["results/b.md"]


def test_a_typed_in_number_in_results_prose_is_found_and_a_rendered_one_is_not():
    assert prose_numbers(REGION_TEXT) == []
    planted = REGION_TEXT + "Trained ends at 0.174, 12.5% better, 0.84x the time.\n"
    assert prose_numbers(planted) == ["0.174", "12.5%", "0.84x"]
    allowed = "## Step 30\n\nAReaL 1.0.4, a 4x4 grid, 12 seeds, `--lr 0.5`, [r](a/b0.5.json).\n"
    assert prose_numbers(allowed) == []


def test_a_commit_hash_outside_a_rendered_region_is_found():
    assert commit_hashes(REGION_TEXT) == []
    assert commit_hashes(REGION_TEXT + "the record at commit c1e2807 (a0015f0).\n") == [
        "c1e2807",
        "a0015f0",
    ]
    assert commit_hashes("a decade, 1003520 pixels, bench/results/x.json, deadbeef\n") == []


def test_a_missing_file_or_anchor_is_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Quick start: `make demo`\n")
    text = (
        "[ok](other.md#quick-start-make-demo) [web](https://example.com/x) [self](#top)\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere)\n\n# Top\n"
    )
    assert broken_links(page, text) == ["missing.md", "other.md#nowhere"]


def test_a_path_that_does_not_exist_is_found():
    text = "`vlrollout/train/config.py`, `vlrollout/train/gone.py`, `bench/results/<name>.json`\n"
    assert missing_paths(text) == ["vlrollout/train/gone.py"]
