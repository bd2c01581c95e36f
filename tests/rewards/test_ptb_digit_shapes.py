"""Chunks that differ only in their digits (``dog12,`` ``dog345,``) share one lexing: their tokens
equal the exhaustive lexer's and Java's, also where a rule names a digit (``'90s``, ``S&P-500``,
``.mp3``)."""

from __future__ import annotations

import importlib
import random
import re
import shutil
import sys
from pathlib import Path

import pytest

from vlrollout.rewards.java_lowercase import java_lower
from vlrollout.rewards.ptb_lexer import RuleTable, lex
from vlrollout.rewards.ptb_rules import rules

ptb = importlib.import_module("vlrollout.rewards.ptb_tokenizer")
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
SHAPES = (
    "w{}x's dog{}, ({}) (red{}) ${} {},000. a{}-b {}/{} {}/{}/{} {}:{} {}.{} {}-{}-{} ({}){}-{} "
    "No.{} {}x{} #{} {}% {}th {}s {}. {}.. U.S.{} &#{}; '{}0s '{}s S&P-{} s&p-{} song{}.mp{} "
    "x.mp{} {}.mp{} file{}.jpg {}.{}.{}.{} +{}-{} {}-{}-{}-{} {}:{}:{} {}.{}-acre {}-year-old 1{}-{}d "
    "www.a{}.com a{}@b.org <h{}> {}... {}.- {}'{} {}-- --{} {}%% ${}.{} {}/{}s {}'s"
).split()
DIGITS = ("0", "1", "2", "3", "5", "9", "10", "90", "99", "123", "500", "2014", "0555")
AFTER = ("x", "The", "5", "1/2", ".", "...", "(", "a.", "")


def _chunks(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = rng.choice(SHAPES).split("{}")
        out.append(parts[0] + "".join(rng.choice(DIGITS) + p for p in parts[1:]))
    return out


def _texts(seed: int) -> list[str]:
    """Every shape with several digit fillings, each followed by each kind of next chunk, and
    as the last chunk."""
    rng = random.Random(seed)
    chunks = [c for shape in SHAPES for c in _chunks(1, hash(shape) % 1000) + _chunks(3, seed)]
    rng.shuffle(chunks)
    return [
        " ".join(f"{c} {rng.choice(AFTER)}" for c in chunks[i : i + 40])
        for i in range(0, len(chunks), 40)
    ]


# Escapes and counted repeats, and the whole digit range: digits there name no single digit.
_NOT_A_DIGIT = re.compile(r"\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|\{\d+(?:,\d*)?\}|0-9")


def test_only_the_guarded_rules_name_a_digit():
    """The shape memo's guard (``_NO_SHAPE``) covers every rule that names a single digit."""
    named = {
        r.name
        for amp in (False, True)
        for r in rules(amp)
        for p in r.patterns
        if re.search("[0-9]", _NOT_A_DIGIT.sub("", p))
    }
    assert named == {"apoword", "tbspec", "filename_ctx"}  # '[2-9]0s, S&P-500, .mp3


def _exhaustive(text: str) -> list[str]:
    raw: list[str] = []
    lex(text + "\n", 0, len(text), RuleTable(amp=True, at=True, url=True, exhaustive=True), raw)
    return [java_lower(t) for t in raw]


def test_digit_variants_give_the_exhaustive_lexers_tokens():
    ptb.clear_caches()
    texts = _texts(0) + [" ".join(_chunks(60, 1)), " ".join(_chunks(60, 1)[::-1])]
    differ = [t for t in texts if ptb.ptb_raw_tokens(t) != _exhaustive(t)]
    assert differ == []
    for text in texts:  # chunk by chunk, each the last one of its text
        for chunk in text.split(" "):
            assert ptb.ptb_raw_tokens(chunk) == _exhaustive(chunk), chunk


def test_chunks_differing_only_in_digits_are_lexed_once_per_shape(monkeypatch):
    ptb.clear_caches()
    calls = []
    monkeypatch.setattr(ptb, "lex", lambda *a, **k: calls.append(1) or lex(*a, **k))
    text = " ".join(f"dog{i}, (red{i}) ${i} a{i}-b {i},000." for i in range(2000))
    tokens = ptb.ptb_tokenize(text)
    assert tokens[:9] == ["dog0", "-lrb-", "red0", "-rrb-", "$", "0", "a0-b", "0,000", "dog1"]
    assert len(tokens) == 8 * 2000
    assert len(calls) <= 5 * 4 + 1  # per shape and count of digits (1-4), and the last chunk


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="needs java (apt install default-jre)")
def test_digit_variants_equal_java():
    sys.path.insert(0, str(SCRIPTS))
    try:
        from make_ptb_fixture import java_tokens
    finally:
        sys.path.remove(str(SCRIPTS))
    texts = _texts(2) + [" ".join(_chunks(3000, 3))]
    java = java_tokens([line for t in texts for line in (t, "x")])[0::2]
    ptb.clear_caches()
    differ = [t for t, j in zip(texts, java, strict=True) if ptb.ptb_tokenize(t) != j]
    assert differ == []
