"""PTB-compatible caption tokenizer in pure Python: what pycocoevalcap's ``PTBTokenizer`` outputs.

The COCO caption toolkit (``pycocoevalcap/tokenizer/ptbtokenizer.py``) writes the captions one
per line (newlines inside a caption become spaces), runs Stanford CoreNLP 3.4.1's
``PTBTokenizer -preserveLines -lowerCase`` on them in Java, drops the tokens in its
``PUNCTUATIONS`` list and joins the rest with spaces; its metrics split that text on whitespace
again. Scores of CIDEr-D, BLEU and ROUGE-L on raw captions depend on that tokenization (``1,000``
and ``3.5-acre`` are one token, ``$5`` two, ``(red)`` becomes ``-lrb- red -rrb-`` because the
filter lists ``-LRB-`` in upper case while the tokens are lower-cased, ``gonna`` is ``gon na``,
an emoji is deleted). :func:`ptb_tokenize` gives the same tokens without a JVM: the lexer rules
are :mod:`.ptb_lexer`'s port of CoreNLP's, and this module runs them over a caption, lower-cases
each token, applies the toolkit's filter and splits tokens that hold a (non-breaking) space, as
``1 1/2`` is one Java token, written ``1\\u00a01/2``.

A caption is tokenized as Java tokenizes it when a line follows that starts with a lower-case
letter. Java's scanner looks across the line break in two rare cases, so there a caption's
tokens also depend on the caption after it in the toolkit's batch: a caption ending in a single
letter and a period (``... the letter B.``) keeps the period (``b.``) here, while Java splits it
off when the next caption starts with one of PTBLexer's sentence-start words (``A``, ``The``,
``He`` ...); and a caption ending in ``No.``, ``Fig.``, ``ca.`` ... keeps its period in Java only
when the next caption starts with a digit. Line separators other than ``\\n`` (``\\r``,
``\\u2028`` ...) end a line in Java, which misaligns the toolkit's captions; here they are spaces.

Speed: the text is cut at spaces into chunks. An ASCII-letter chunk is one token (``gonna``
and ``cannot`` split); other chunks go through the lexer and are memoised, keyed by the chunk
and, for the last chunk, the spaces after it. A chunk whose tokens can depend on the next chunk
(it ends in a digit, ``)`` or ``.`` and the next chunk starts with what a rule could continue
with, or it holds ``<``) is lexed in place every time. Chunks that differ only in their ASCII
digits (``dog12,`` ``dog345,``: one digit shape) are lexed once per shape: the others take the
same slices (:func:`_shape_key` says when that is exact). A chunk of a common word shape (``(dog)``,
``man's,`` ``$hat.`` ``co-op;``) is not lexed: its pieces are its tokens
(:func:`_word_shape_tokens` says when).

>>> ptb_tokenize('A man with 1,000 dollars at 10:30, $5 (red) -- gonna win!')
['a', 'man', 'with', '1,000', 'dollars', 'at', '10:30', '$', '5', '-lrb-', 'red', '-rrb-', 'gon', 'na', 'win']
>>> ptb_tokenize("A 3.5-acre lot, man_with a hat \U0001f600 at 5 o'clock.")
['a', '3.5-acre', 'lot', 'man_with', 'a', 'hat', 'at', '5', "o'clock"]
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import itemgetter

from .java_lowercase import java_lower
from .ptb_lexer import RuleTable, lex, table_for
from .ptb_rules import ABBREVIATION_WORDS, SPACE_CHARS

# pycocoevalcap/tokenizer/ptbtokenizer.py, verbatim (the bracket names never match lower case).
PUNCTUATIONS = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-",
     ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)  # fmt: skip

# PTBLexer splits these whole words (any case): "gonna" -> "gon" "na".
_ASSIMILATIONS = {
    "gonna": ("gon", "na"),
    "wanna": ("wan", "na"),
    "gotta": ("got", "ta"),
    "lemme": ("lem", "me"),
    "gimme": ("gim", "me"),
    "cannot": ("can", "not"),
}
_NOT_LETTER = re.compile("[^A-Za-z ]")
_SPLIT = frozenset(_ASSIMILATIONS)
_ASTRAL = re.compile("[\U00010000-\U0010ffff]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_WHITESPACE = re.compile(r"\s")
# After a chunk ending in ".", a next chunk starting with one of these cannot change its tokens
# (no sentence-start word, digit, "ltd"/"lim", ". . ." or second space begins with them).
_QUIET_AFTER_PERIOD = frozenset("abcdefghijkmnopqrstuvwxyz")

# Lower-cased tokens of a chunk, the kept ones, when the next chunk matters (_next_matters).
_Tokens = tuple[tuple[str, ...], tuple[str, ...], int]
# chunk, or for the last chunk (chunk, the spaces after it) -> its tokens
_CHUNK_CACHE: dict[str | tuple[str, str], _Tokens] = {}
_CHUNK_CACHE_SIZE = 1 << 16

# Digit shapes (see _shape_key): a function picking each token's slice of the lower-cased chunk,
# the (index, token) of tokens without digits that are not their slice, the indices of the kept
# tokens (None: all), when the next chunk matters. None: a token with digits is not a slice.
_Template = tuple[
    Callable[[str], tuple[str, ...]], tuple[tuple[int, str], ...], tuple[int, ...] | None, int
]
_SHAPE_CACHE: dict[str | tuple[str, str], _Template | None] = {}
_MISSING = object()
_DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")
_ASCII_DIGIT = re.compile("[0-9]")
# Rules name a digit only right after an apostrophe ('90s, &apos;90s), in S&P-500 and in .mp3:
# chunks with these, or with any character but printable ASCII, are lexed by themselves.
_NO_SHAPE = re.compile("[^!-~]|'[0-9]|&|[mM][pP]")

# Word shapes (see _word_shape_tokens): "(" or "$", a word of two or more ASCII letters (or two
# such joined by a hyphen), a clitic the lexer's REDAUX names, ")" and one of ",", ".", ";" (each
# but the word optional).
_WORD_SHAPE = re.compile(
    r"([($]?)([A-Za-z]{2,}(?:-[A-Za-z]{2,})?)('(?:[msdMSD]|[rR][eE]|[vV][eE]|[lL][lL]))?(\)?[,.;]?)"
)
_MARKS = {"": (), "(": ("-lrb-",), "$": ("$",), ",": (",",), ".": (".",), ";": (";",),
          ")": ("-rrb-",)}  # fmt: skip


# How a chunk's tokens can depend on the text after its space (see :func:`_next_matters`).
_NEVER, _IF_DIGIT, _IF_PERIOD, _IF_NOT_QUIET, _ALWAYS = 0, 1, 2, 3, 4


def _next_matters(chunk: str) -> int:
    """When the text after ``chunk`` can change its tokens: after a letter and a period, unless
    the next chunk starts with a lower-case letter other than ``l`` (sentence-start words after
    ``U.S.``, ``No. 5``, ``Pty. Ltd``, ``. . .``, a second space); after another period, when
    the next chunk starts with one (``. . .``); after a digit or ``)``, when the next chunk
    starts with a digit (fractions ``1 1/2``, phone numbers); always with ``<`` (SGML tags hold
    spaces); never otherwise."""
    if "<" in chunk:
        return _ALWAYS
    last = chunk[-1]
    if last == ".":
        return _IF_NOT_QUIET if len(chunk) > 1 and chunk[-2].isalpha() else _IF_PERIOD
    return _IF_DIGIT if last == ")" or last.isdigit() else _NEVER


def _utf16(text: str) -> str:
    """``text`` with each character outside the BMP written as its two UTF-16 surrogates, the
    units Java's scanner sees (an emoji after ``http://`` is two characters there)."""
    return _ASTRAL.sub(lambda m: "".join(map(_surrogate_pair, m.group())), text)


def _surrogate_pair(c: str) -> str:
    o = ord(c) - 0x10000
    return chr(0xD800 + (o >> 10)) + chr(0xDC00 + (o & 0x3FF))


def _from_utf16(token: str) -> str:
    """Surrogate pairs joined again (no rule splits a pair: both halves match the same
    classes)."""
    return token.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _finish(raw: list[str], matters: int) -> _Tokens:
    """Lower-cased tokens, those the toolkit keeps (filtered, then split at whitespace), and
    when the next chunk matters to the chunk they come from (:func:`_next_matters`)."""
    joined = "".join(raw)
    if "\u03a3" in joined or _SURROGATE.search(joined) or _WHITESPACE.search(joined):
        low = [java_lower(_from_utf16(t) if _SURROGATE.search(t) else t) for t in raw]
        kept = [p for t in low if t not in PUNCTUATIONS for p in t.split()]
    else:
        low = [t.lower() for t in raw]
        kept = [t for t in low if t not in PUNCTUATIONS]
    return tuple(low), tuple(kept), matters


def _tokens(text: str, filtered: bool) -> list[str]:
    """The tokens of one caption: all of them lower-cased, or (``filtered``) the kept ones."""
    text = str(text)
    if "\n" in text:
        text = text.replace("\n", " ")
    if not text.isascii() and _ASTRAL.search(text):
        text = _utf16(text)
    other = _NOT_LETTER.search(text)
    if other is None:
        return _plain(text)
    return _mixed(text, other, 1 if filtered else 0)


def _plain(words: str) -> list[str]:
    """The tokens of ``words``, ASCII letters and spaces only: one token a word, but ``gonna``
    and ``cannot`` (any case) split."""
    low = words.lower().split()
    if _SPLIT.isdisjoint(low):
        return low
    return [t for word in low for t in _ASSIMILATIONS.get(word, (word,))]


def _mixed(text: str, other: re.Match[str], which: int) -> list[str]:
    """Tokens of a caption with characters other than ASCII letters and spaces (``other``,
    the first of them); ``which``: 0 for all tokens, 1 for the kept ones."""
    line = text + "\n"
    n = len(text)
    end_of_words = len(text.rstrip(" "))
    out: list[str] = []
    table: RuleTable | None = None
    cache = _CHUNK_CACHE
    pos = 0
    while other is not None:
        # The chunk (text between spaces) around a character other than a letter or a space.
        start = text.rfind(" ", pos, other.start()) + 1
        end = text.find(" ", other.end())
        if end < 0:
            end = n
        if start > pos:
            if start - 1 > pos:
                out += _plain(text[pos:start])
            if text[start] in SPACE_CHARS:
                # Java's run of spaces started at the ASCII space and took these along.
                while start < end and text[start] in SPACE_CHARS:
                    start += 1
        else:
            start = pos
        if start < end:
            chunk = text[start:end]
            if end < end_of_words:
                tokens = cache.get(chunk)
                matters = _next_matters(chunk) if tokens is None else tokens[2]
                if matters:
                    after = text[end + 1]
                    if matters == _IF_DIGIT:
                        matters = after.isdigit()
                    elif matters == _IF_PERIOD:
                        matters = after == "."
                    elif matters == _IF_NOT_QUIET:
                        matters = after not in _QUIET_AFTER_PERIOD
                if matters:  # lexed in place: the next chunk changes the tokens
                    if table is None:
                        table = table_for(text)
                    raw: list[str] = []
                    end = lex(line, start, end, table, raw)
                    tokens = _finish(raw, _NEVER)
                elif tokens is None:
                    tokens, end = _lex_chunk(line, start, end, chunk, chunk)
            else:
                key = (chunk, text[end:])
                tokens = cache.get(key)
                if tokens is None:
                    tokens, end = _lex_chunk(line, start, end, chunk, key)
            out += tokens[which]
        pos = end
        other = _NOT_LETTER.search(text, pos)
    if pos < n:
        out += _plain(text[pos:])
    return out


def _lex_chunk(
    line: str, start: int, end: int, chunk: str, key: str | tuple[str, str]
) -> tuple[_Tokens, int]:
    """The tokens of ``chunk`` (``line[start:end]``), memoised under ``key``, and where the
    lexer stopped (``end`` unless a token ran on past it; then nothing is memoised).

    A chunk of the same digit shape as one lexed before (``dog12,`` after ``dog345,``) takes
    its tokens from that one's template instead of the lexer (see :func:`_shape_key`), and a
    word shape (``(dog)``, ``man's,``) its tokens from :func:`_word_shape_tokens`."""
    low = _word_shape_tokens(chunk)
    if low is not None:
        tokens = (tuple(low), tuple(t for t in low if t not in PUNCTUATIONS), _next_matters(chunk))
        _remember(_CHUNK_CACHE, key, tokens)
        return tokens, end
    shape = _shape_key(chunk, key)
    template = _MISSING if shape is None else _SHAPE_CACHE.get(shape, _MISSING)
    if template is not _MISSING and template is not None:
        return _from_template(chunk, template), end  # type: ignore[arg-type]
    raw: list[str] = []
    starts: list[int] | None = None if template is not _MISSING or shape is None else []
    stop = lex(line, start, end, table_for(chunk), raw, starts)
    tokens = _finish(raw, _next_matters(chunk))
    if stop == end:
        _remember(_CHUNK_CACHE, key, tokens)
        if starts is not None:
            _remember(
                _SHAPE_CACHE, shape, _template(chunk, raw, [s - start for s in starts], tokens)
            )
    return tokens, stop


def _word_shape_tokens(chunk: str) -> list[str] | None:
    """The lower-cased tokens of a word-shaped ``chunk`` (followed by a space or the end of the
    line), or ``None`` when the chunk is not one or the lexer could read it otherwise.

    A word shape is ``(`` or ``$``, a word of two or more ASCII letters or two such joined by a
    hyphen (``co-op``), a clitic (``'s``, ``'re`` ...), ``)`` and one of ``,`` ``.`` ``;``, each
    but the word optional. Its pieces are its tokens (brackets written ``-lrb-``, ``-rrb-``):
    at each piece the longest match of any rule (the first on ties) is that piece.

    - ``(``: PHONE needs a digit next, ASIANSMILEY ``(xx)`` is the one letters-only face;
      ``$`` is a token whatever follows (``SINGLES_ASCII``).
    - the word: ``gonna``, ``cannot`` ... split (left out). Before a clitic WORD/REDAUX matches
      the word and the clitic, the most any rule can but APOWORD's ``cont'd.`` (left out; the
      other APOWORD forms, THING, ``y'``, ``c'est`` need a one-letter word or a letter after
      the apostrophe, ``n't`` a ``t``). Before ``.`` an
      abbreviation (``etc.``, ``Mr.``) is left out, as the lexer's ``_plain_period`` leaves it;
      before ``,`` the same test passes every word; no rule runs on past a word with ``;``,
      ``)``, a space or the line end (``JOINS``; the tests check it). A hyphenated word is
      HTHING (ACRO2, the one part that takes a period, needs one inside; no abbreviation holds a
      hyphen).
    - the clitic before a non-letter is REDAUX; ``)`` is a token by itself; ``,`` ``;`` ``.``
      before a space or the line end are INSENTP and PERIOD (NUMBER needs a digit after them, a
      smiley a bracket after ``;``, an ellipsis more periods, and the callers lex a chunk in
      place when the chunk after it starts with a digit or a period).
    """
    m = _WORD_SHAPE.fullmatch(chunk)
    if m is None:
        return None
    pre, word, clitic, post = m.groups()
    low = word.lower()
    if (
        low in _SPLIT
        or (pre == "(" and post[:1] == ")" and low == "xx")
        or (clitic is None and post[:1] == "." and low in ABBREVIATION_WORDS)
        or (clitic is not None and low == "cont")
    ):
        return None
    out = [*_MARKS[pre], low]
    if clitic is not None:
        out.append(clitic.lower())
    for mark in post:
        out += _MARKS[mark]
    return out


def _remember(cache: dict, key: object, value: object) -> None:
    if len(cache) >= _CHUNK_CACHE_SIZE:
        cache.clear()
    cache[key] = value


def _shape_key(chunk: str, key: str | tuple[str, str]) -> str | tuple[str, str] | None:
    """``key`` with every ASCII digit of the chunk written ``0``, for a chunk of printable ASCII
    with digits whose tokens cannot depend on which digits they are; else ``None``.

    Every rule treats the ASCII digits as one class but the three that name a digit, which
    ``_NO_SHAPE`` keeps out (``tests/rewards/test_ptb_digit_shapes.py`` checks the rules for
    others), so two chunks of one shape are scanned alike: the same rules match the same spans,
    and each token is the same slice of its chunk, or the same text where it holds no digit.
    """
    shape = chunk.translate(_DIGITS_TO_ZERO)
    if (shape == chunk and "0" not in chunk) or _NO_SHAPE.search(chunk):
        return None
    return shape if isinstance(key, str) else (shape, key[1])


def _template(chunk: str, raw: list[str], starts: list[int], tokens: _Tokens) -> _Template | None:
    """How the tokens of ``chunk`` (``raw``, starting at ``starts``) are made from any chunk of
    its shape, or ``None`` when a token with digits is not a slice of the chunk."""
    low, kept, matters = tokens
    if not raw:
        return None
    slices, consts = [], []
    for i, (token, s) in enumerate(zip(raw, starts, strict=True)):
        e = starts[i + 1] if i + 1 < len(starts) else len(chunk)
        if e <= s or token != chunk[s:e]:
            if _ASCII_DIGIT.search(token) or _ASCII_DIGIT.search(chunk, s, max(s, e)):
                return None
            consts.append((i, low[i]))
        slices.append(slice(s, max(s, e)))
    pick = itemgetter(*slices) if len(slices) > 1 else lambda text, one=slices[0]: (text[one],)
    keep = (
        None
        if len(kept) == len(low)
        else tuple(i for i, t in enumerate(low) if t not in PUNCTUATIONS)
    )
    return pick, tuple(consts), keep, matters


def _from_template(chunk: str, template: _Template) -> _Tokens:
    """The tokens of ``chunk`` by its shape's template (ASCII: lower-casing is per character)."""
    pick, consts, keep, matters = template
    low = list(pick(chunk.lower()))
    for i, text in consts:
        low[i] = text
    tokens = tuple(low)
    return tokens, tokens if keep is None else tuple(low[i] for i in keep), matters


def clear_caches() -> None:
    """Forget every memoised chunk and shape (benchmarks time cold calls with it)."""
    _CHUNK_CACHE.clear()
    _SHAPE_CACHE.clear()


def ptb_raw_tokens(text: str) -> list[str]:
    """PTB tokens of ``text`` before pycocoevalcap's punctuation filter, lower-cased (a token
    may hold a non-breaking space: ``1\\u00a01/2``)."""
    return _tokens(text, filtered=False)


def ptb_rouge_tokenize(text: str) -> list[str]:
    """Tokens of ``text`` as pycocoevalcap's ROUGE-L reads them: :func:`ptb_tokenize`'s, but
    split at spaces only, as its ``Rouge`` splits the tokenizer's lines, so a token the Java
    tokenizer joined with a non-breaking space (``1\u00a01/2``, a phone number) stays one."""
    return [t for t in _tokens(text, filtered=False) if t not in PUNCTUATIONS]


def ptb_tokenize(text: str) -> list[str]:
    """Tokens of ``text`` as pycocoevalcap's ``PTBTokenizer`` gives them (Java not needed).

    Args:
        text: A raw caption; non-strings are converted with ``str``.

    Returns:
        Lower-cased tokens with the toolkit's punctuation tokens removed, split at whitespace
        as the toolkit's metrics split its output.
    """
    return _tokens(text, filtered=True)
