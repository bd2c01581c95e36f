"""The word-shape fast path of :mod:`vlrollout.rewards.ptb_tokenizer` against the lexer and Java.

Chunks such as ``(dog)``, ``man's,`` or ``$hat.`` are tokenized without the lexer; the generator
here mixes those shapes with the neighbours that must fall back (abbreviations, split words,
one-letter words, ``n't``, ``Yahoo!``, ``(xx)``, ``www.``, digits, Unicode letters, URLs,
emoticons, hyphens ...) and compares the tokens with every rule tried at every position, and
(slow) with pycocoevalcap's Java ``PTBTokenizer``.
"""

import importlib
import random
import string
from functools import cache

import pytest

from vlrollout.rewards.java_lowercase import java_lower
from vlrollout.rewards.ptb_lexer import RuleTable, lex, table_for
from vlrollout.rewards.ptb_rules import ABBREVIATION_WORDS

from .test_ptb_tokenize import _java_tokens_alone, needs_java

# The module (the package exports its function under the same name).
ptb = importlib.import_module("vlrollout.rewards.ptb_tokenizer")

_WORDS = [
    "dog", "Dog", "DOG", "is", "it", "xx", "XX", "xy", "www", "WWW", "gonna", "Cannot", "wanna",
    "don", "can", "cap", "yahoo", "Yahoo", "jeopardy", "no", "No", "fig", "etc", "Mr", "Ltd",
    "pty", "a", "I", "d", "o", "l", "y", "c", "twas", "tis", "em", "cause", "til", "dunkin",
    "goa", "GOA", "ab1", "caf\u00e9", "na\u00efve", "\u03a3\u03bf\u03c6\u03b9\u03b1", "com", "mp",
    "anti", "pro", "s", "ca", "vs", "Calif", "Inc", "Jan", "US", "ok", "hmm", "xox", "x-ray",
    "anti-war", "Pro-life", "e-mail", "co-op", "gonna-be", "ab-cd", "xx-xx", "US-led", "Inc-co",
    "no-go", "www-x", "s-p", "a-b", "well-to-do", "cont", "CONT", "ol", "li", "nat", "somethin", "nor", "ev",
]  # fmt: skip
_PREFIXES = ["", "", "(", "$", "[", "'", '"', "`", "-", "#", "US$", "((", ":", "<"]
_CLITICS = ["", "", "'s", "'S", "'d", "'m", "'re", "'RE", "'ve", "'ll", "'Ll", "'t", "'n",
            "'em", "\u2019s", "'", "'x", "n't"]  # fmt: skip
_SUFFIXES = ["", "", ",", ".", ";", ")", "!", "?", ":", "-", "'", "..", ".)", "),", ";)", ":)",
             ".com", "-b", "-ab", "-1", "s", "1", "/", ","]  # fmt: skip
_NEXT = ["x", "the", "The", "A", "ltd", "1", "(", ".", ". .", "a", "l", ""]


def _chunk(rng: random.Random) -> str:
    words = _WORDS + [rng.choice(sorted(ABBREVIATION_WORDS))]
    return (rng.choice(_PREFIXES) + rng.choice(words) + rng.choice(_CLITICS)
            + rng.choice(_SUFFIXES))  # fmt: skip


def word_shape_captions(n: int, seed: int) -> list[str]:
    """``n`` captions of word-shaped chunks and the chunks next to the fast path's limits."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [_chunk(rng) for _ in range(rng.randint(1, 6))]
        text = " ".join(parts) + rng.choice(["", " ", " " + rng.choice(_NEXT)])
        out.append(text + rng.choice(["", "", " ", "  "]))
    return out


@cache
def _exhaustive_table() -> RuleTable:
    return RuleTable(amp=True, at=True, url=True, exhaustive=True)


def _exhaustive(text: str) -> list[str]:
    """Tokens of ``text`` with every rule tried at every position."""
    raw: list[str] = []
    lex(text + "\n", 0, len(text), _exhaustive_table(), raw)
    return [java_lower(t) for t in raw]


_MARKS = ["", ",", ".", ";", ")", ").", "),", "'s.", "'s", "'d.", "'ll,", ".)"]


def _word_and_mark(word: str, marks: list[str]) -> list[str]:
    """``word`` before each of ``marks``, inside a caption and at its end, after ``(`` or not."""
    return [f"{p}{word}{m}{end}" for p in ("", "(") for m in marks for end in (" x", "", " ")]


def test_word_shapes_equal_the_exhaustive_lexer():
    ptb.clear_caches()
    abbreviations = [f"{p}{w}" for w in ABBREVIATION_WORDS if w.isalpha() for p in ("", "Ab-")]
    texts = word_shape_captions(400, seed=3)
    texts += [t for w in _WORDS for t in _word_and_mark(w, _MARKS)]
    texts += [t for w in sorted(abbreviations) for t in _word_and_mark(w, [".", ".)"])]
    differ = [t for t in texts if ptb.ptb_raw_tokens(t) != _exhaustive(t)]
    assert differ == []


def test_no_rule_runs_on_past_a_word_with_the_marks_a_shape_takes_as_they_are():
    """A run of ASCII letters before ``;``, ``)``, a space or the line end is WORD: no rule
    that starts with a letter can continue with them (the word-shape fast path relies on it)."""
    table = table_for("")
    joined = {
        (a, c) for a in string.ascii_letters for c in ";) \n" if table.candidates_after_run(a, c)
    }
    assert joined == set()


@pytest.mark.parametrize(
    "text",
    [
        "(dog) man's, $hat. cat; it's) x",
        "Dog's. tree",
        "(Yahoo) GOA'S; wall",
        "big (tree), co-op; dog",
    ],
)
def test_common_word_shapes_are_not_lexed(text, monkeypatch):
    """Plain words with a bracket, ``$``, a clitic or one trailing mark skip the lexer."""
    ptb.clear_caches()
    expected = _exhaustive(text)
    ptb.clear_caches()

    def no_lex(*args, **kwargs):
        raise AssertionError(f"lexed: {args[0]!r}")

    monkeypatch.setattr(ptb, "lex", no_lex)
    assert ptb.ptb_raw_tokens(text) == expected


@pytest.mark.slow
@needs_java
def test_word_shapes_equal_java():
    ptb.clear_caches()
    texts = word_shape_captions(3000, seed=4)
    java = _java_tokens_alone(texts)
    differ = [
        f"{t!r}\n  java: {j}\n  ours: {ptb.ptb_tokenize(t)}"
        for t, j in zip(texts, java, strict=True)
        if ptb.ptb_tokenize(t) != j
    ]
    assert differ[:10] == []
