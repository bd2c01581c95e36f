"""Java's ``String.toLowerCase(Locale.ENGLISH)`` in Python, for PTB tokens.

It equals Python's ``str.lower`` except for capital sigma (``Σ``): both write it ``ς`` at the
end of a word and ``σ`` elsewhere, but Java decides "end of a word" with its word
``BreakIterator`` (a word is letters, digits and mid-word punctuation such as ``-``, ``_`` or
``.`` between letters; ``Σ`` is final when that word has a cased letter before it and none
after it), while Python follows Unicode's context rule (only case-ignorable characters may sit
between ``Σ`` and the letters around it). So ``ΟΔΟΣ4x4`` lower-cases to ``οδοσ4x4`` in Java and
``οδος4x4`` in Python. :func:`java_lower` applies Java's rule.

The word segmentation is the JDK's ``WordBreakRules`` (``sun.text.resources.BreakIteratorRules``)
for the characters PTB tokens hold: letters and spacing marks with their combining marks,
numbers with mid-number punctuation, a leading currency sign or ``#`` and a trailing ``%``/``&``,
a final danda, format characters (Cf) ignored; kana and kanji are not letters there (the JDK
segments their runs on their own).

>>> java_lower("ΟΔΟΣ4x4"), java_lower("ΟΔΟΣ"), java_lower("a_Σ"), java_lower("ΟΔΟΣ1_a")
('οδοσ4x4', 'οδος', 'a_ς', 'οδος1_a')
"""

from __future__ import annotations

import re
import unicodedata

_SIGMA = "\u03a3"
_MID_WORD = frozenset("\u00ad\u2027\"'.")  # and dash (Pd) and connector (Pc) punctuation
_MID_NUM = frozenset("\"',\u066b.")
_POST_NUM = frozenset("%&\u00a2\u066a\u2030\u2031")
# Kanji, katakana, hiragana and CJK sound marks: the JDK segments them on their own, not as letters.
_CJK = re.compile(
    "[\u3005\u4e00-\u9fa5\uf900-\ufa2d\u30a1-\u30fa\u30fd\u30fe\u3041-\u3094"
    "\u309d\u309e\u3099-\u309c\u30fb\u30fc]"
).fullmatch
_OTHER_CASED = ((0x02B0, 0x02B8), (0x02C0, 0x02C1), (0x02E0, 0x02E4), (0x0345, 0x0345),
                (0x037A, 0x037A), (0x1D2C, 0x1D61), (0x2160, 0x217F), (0x24B6, 0x24E9))  # fmt: skip


def _cased(c: str) -> bool:
    """Java's ``ConditionalSpecialCasing.isCased``: Ll, Lu, Lt, Other_Lowercase/Uppercase."""
    if unicodedata.category(c) in ("Ll", "Lu", "Lt"):
        return True
    o = ord(c)
    return any(a <= o <= b for a, b in _OTHER_CASED)


def _marks(s: str, i: int) -> int:
    """``i`` past the combining marks (Mn, Me) at ``i``."""
    while i < len(s) and unicodedata.category(s[i]) in ("Mn", "Me"):
        i += 1
    return i


def _base(c: str, kind: str) -> bool:
    """A letter base (letters and spacing marks but kana and kanji) for ``kind`` "L", a digit
    base ("N")."""
    cat = unicodedata.category(c)
    if kind == "N":
        return cat[0] == "N"
    return (cat[0] == "L" or cat == "Mc") and _CJK(c) is None


def _mid(c: str, kind: str) -> bool:
    if kind == "N":
        return c in _MID_NUM
    return c in _MID_WORD or unicodedata.category(c) in ("Pd", "Pc")


def _run(s: str, i: int, kind: str) -> int:
    """End of the word (``kind`` "L": letters, single mid-word marks between them) or number
    ("N": digits, single mid-number marks between them) starting at ``i``; ``i`` if none."""
    end = j = i
    while j < len(s) and _base(s[j], kind):
        j = end = _marks(s, j + 1)
        if j + 1 < len(s) and _mid(s[j], kind) and _base(s[j + 1], kind):
            j += 1
    if kind == "L" and i < end < len(s) and s[end] in "\u0964\u0965":  # a final danda
        end += 1
    return end


def _words_and_numbers(s: str, e: int) -> int:
    """End of ``(number word)* {number {post-num}}`` from ``e``."""
    while True:
        n = _run(s, e, "N")
        if n == e:
            return e
        w = _run(s, n, "L")
        if w == n:
            return n + (n < len(s) and s[n] in _POST_NUM)
        e = w


def _segment_end(s: str, i: int) -> int:
    """End of the JDK word-break segment starting at ``i``: the longest of ``{word}(number
    word)*{number{post-num}}``, a pre-number sign (currency but ``¢``, ``#``, ``.``) followed by
    ``(number word)*{number{post-num}}``, and one character with its combining marks."""
    best = max(_marks(s, i + 1), _words_and_numbers(s, _run(s, i, "L")))
    c = s[i]
    if c in "#." or (unicodedata.category(c) == "Sc" and c != "\u00a2"):
        best = max(best, _words_and_numbers(s, i + 1))
    return best


def java_lower(token: str) -> str:
    """``token.toLowerCase(Locale.ENGLISH)`` as Java 17 computes it."""
    if _SIGMA not in token:
        return token.lower()
    # The break rules ignore format characters (Cf); they are never cased, so drop them.
    visible = "".join(c for c in token if unicodedata.category(c) != "Cf")
    bounds = [0]
    while bounds[-1] < len(visible):
        bounds.append(_segment_end(visible, bounds[-1]))
    finals = []
    seg = 0
    for i, c in enumerate(visible):
        if c != _SIGMA:
            continue
        while bounds[seg + 1] <= i:
            seg += 1
        before = any(_cased(x) for x in visible[bounds[seg] : i])
        after = any(_cased(x) for x in visible[i + 1 : bounds[seg + 1]])
        finals.append(before and not after)
    sigmas = iter(finals)
    return "".join(
        ("\u03c2" if next(sigmas) else "\u03c3") if c == _SIGMA else c.lower() for c in token
    )
