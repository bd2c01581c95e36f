"""Answer rewards: counting, multiple choice, numeric tolerance, math equivalence.

Each reads the gold answer from ``task_data["answer"]`` (key configurable) and, by default, only the
``<answer>...</answer>`` content when the completion has one. An answer that cannot be read scores
0 with a reason (``no_number``, ``no_choice``, ``ambiguous_choice``, ``no_boxed``,
``unparseable_answer``); a gold answer that cannot be read raises ``ValueError`` (a data bug).

The CLEVR-count and Geometry3K rewards fix weaknesses of AReaL 1.0.4's versions
(``areal/reward/clevr_count_70k.py``, ``areal/reward/geometry3k.py``):

- CLEVR count: AReaL accepts only ``[n]`` and compares strings (``"3.0" != "3"``); ours accepts
  ``[n]``, digits and number words ("three") and compares integers.
- Geometry3K: AReaL's prompt asks for ``\\boxed{}`` but its reward reads the last ``[...]`` (so
  ``\\sqrt[3]{2}`` or a cited ``[1]`` is taken as the answer) and turns every exception into a silent
  0. Ours reads the last ``\\boxed{}`` and verifies with ``math_verify.verify(gold, target)``, gold
  first: the function is not symmetric (gold ``x \\le 1`` accepts ``(-\\infty, 1]`` but not the
  reverse).
"""

from __future__ import annotations

import collections
import math
import numbers
import re
import threading
import unicodedata
from typing import Any

import numpy as np

from .result import Reward, RewardResult, option_number, require_field
from .text_extract import answer_region, last_boxed, without_reasoning
from .vqa_answers import match_choice_text, normalize_answer

_UNITS = "zero one two three four five six seven eight nine".split()
_TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
WORD_NUMBERS = {w: i for i, w in enumerate(_UNITS + _TEENS)} | {
    w: 20 + 10 * i for i, w in enumerate(_TENS)
}
MAX_COUNT_DIGITS = 18
"""Counts with more significant digits are not read (``number_too_long``): no count is that big,
and ``int()`` refuses more than 4,300 digits."""

_SIGN = "\\-+\u2212\uff0d"  # a regex character-class fragment: hyphen, plus, minus signs
_WORDS = "|".join(sorted(WORD_NUMBERS, key=len, reverse=True))
_BRACKET_INT = re.compile(r"\[\s*(\d+)(?:\.0*)?\s*\]")
# Candidates come from two regexes that each open with a character set, so the regex engine skips
# every other character in C (linear time, fast on a megabyte of spaces or prose): number words
# (first letter, then the rest) and digit runs (commas allowed, checked below). Neither may follow
# a letter, digit or joining punctuation, nor be followed by one or by a sign, so "someone",
# "3-4", "x3" and the "000" inside "1,000" are not counts. A sign just before a candidate counts
# when nothing token-like precedes it ("-3" is -3; in "+-3" and "3-4" it does not).
_TOKEN_CHARS = rf"\w.,{_SIGN}"
_WORD_REST = "|".join(sorted({w[1:] for w in WORD_NUMBERS}, key=len, reverse=True))
_WORD_FIRST = "".join(sorted({w[0] for w in WORD_NUMBERS}))
_WORD_CANDIDATE = re.compile(
    rf"[{_WORD_FIRST}](?<![\w.,].)(?:{_WORD_REST})(?:-[a-z]+)?[.,]*(?![{_TOKEN_CHARS}])"
)
_DIGIT_CANDIDATE = re.compile(rf"\d(?<![\w.,].)[\d,]*(?:\.\d+)?[.,]*(?![{_TOKEN_CHARS}])")
_TOKEN_CHAR = re.compile(rf"[{_TOKEN_CHARS}]")
_SIGNS = "-+\u2212\uff0d"
SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
"""Words that scale the number words before them: "twelve hundred", "one hundred and five"."""
_PHRASE_REACH = 160  # characters either side of a candidate searched for the rest of its phrase
_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+|\d+")
_TOO_LONG = "too long"


def _word_value(word: str) -> int | None:
    parts = word.lower().split("-")
    if len(parts) == 1:
        return WORD_NUMBERS.get(parts[0])  # None for "zne": first letter and rest both valid
    if len(parts) != 2:
        return None
    tens, unit = parts
    if tens in _TENS and unit in _UNITS[1:]:
        return WORD_NUMBERS[tens] + WORD_NUMBERS[unit]
    return None  # "one-two", "twenty-twelve": not a number


def _digits_value(digits: str) -> int | str | None:
    integral, _, frac = digits.partition(".")
    if frac.strip("0") or not _GROUPED.fullmatch(integral):
        return None  # 2.5, 1,2: not a count
    integral = integral.replace(",", "").lstrip("0") or "0"
    return _TOO_LONG if len(integral) > MAX_COUNT_DIGITS else int(integral)


def read_count(text: str) -> tuple[int | None, str | None]:
    """The count in ``text`` and, when none could be read, why (``no_number``,
    ``number_too_long``, ``not_a_count``).

    The last ``[n]`` wins; otherwise the last integer or number word (0-99; "twenty-one" and
    "twenty one" are 21), with the scale words of its phrase ("one hundred and five" is 105,
    "3 thousand" 3000). Signs are kept (``-3`` is -3, never 3), thousands separators are read
    (``1,000`` is 1000), hyphenated ranges (``3-4``) are not counts, and a decimal other than
    ``.0``, a fraction or a power (``3/4``, ``2^{10}``) as the last number is
    ``not_a_count`` (an earlier integer is not the answer either). Numbers are written one way
    first (:func:`plain_numbers`).

    >>> read_count("twenty-one"), read_count("1,000 ants"), read_count("-3"), read_count("9" * 30)
    ((21, None), (1000, None), (-3, None), (None, 'number_too_long'))
    """
    text = plain_numbers(text)
    brackets = _BRACKET_INT.findall(text)
    if brackets:
        value = _digits_value(brackets[-1])
        if value == _TOO_LONG:
            return None, "number_too_long"
        if value is not None:
            return int(value), None
    # The answer is usually near the end: read windows from the end, doubling each time, so a
    # megabyte of prose before the answer costs one short scan (geometric growth keeps the worst
    # case linear). Windows start after a character that cannot be inside a token.
    low = text.lower()
    window = 4096
    while True:
        start = max(0, len(low) - window)
        if start:
            cut = _BOUNDARY.search(low, start)
            start = cut.end() if cut else len(low)
        found = _last_count(low, start)
        if found is not None or start == 0:
            return found or (None, "no_number")
        window *= 2


_BOUNDARY = re.compile(rf"[^{_TOKEN_CHARS}]")
_DENOMINATOR = re.compile(r"\d\s*/\s*\Z")
"""What comes just before a fraction's denominator."""


def _sign(text: str, i: int) -> int | None:
    """+1/-1 for the candidate starting at ``i``; ``None`` when a sign joins it to a token."""
    if i == 0 or text[i - 1] not in _SIGNS:
        return 1
    if i >= 2 and _TOKEN_CHAR.match(text, i - 2):
        return None  # "3-4", "+-3", "x-3"
    return 1 if text[i - 1] == "+" else -1


def _last_count(text: str, start: int) -> tuple[int | None, str | None] | None:
    """The last count among the candidates in lower-cased ``text[start:]``; ``None`` to look
    further back."""
    words = list(_WORD_CANDIDATE.finditer(text, start))
    candidates = sorted(
        words + list(_DIGIT_CANDIDATE.finditer(text, start)), key=lambda m: m.start()
    )
    too_long = False
    for i in range(len(candidates) - 1, -1, -1):
        m = candidates[i]
        sign = _sign(text, m.start())
        token = m.group().rstrip(".,")
        if sign is None:
            continue
        power = raised(text, m.start())
        if power == "unit":  # "5 m^2": the exponent of a unit is not the count
            continue
        if power == "number" or _DENOMINATOR.search(text, max(0, m.start() - 40), m.start()):
            return None, "not_a_count"  # "2^{10}", "3/4": never their last digits
        if token[0].isdigit():
            value = _digits_value(token)
            if value == _TOO_LONG:
                too_long = True
                continue
            if value is None:  # the answer is a decimal: not a count, nor an earlier number
                return None, "not_a_count"
        else:
            value = _word_value(token)
            if value is not None and token in _UNITS[1:] and sign == 1:
                if i == 0 and start > 0:
                    return None  # a tens word may stand just before the window
                # "twenty one": a tens word right before a unit word is one number.
                prev = candidates[i - 1] if i > 0 else None
                gap = text[prev.end() : m.start()] if prev else ""
                if prev and prev.group() in _TENS and gap.isspace():
                    value += WORD_NUMBERS[prev.group()]
        if value is not None:
            phrase = _phrase_value(text, m)
            return sign * int(value if phrase is None else phrase), None
    if too_long:
        return None, "number_too_long"
    return None


def _phrase_value(text: str, m: re.Match) -> int | None:
    """The value of the number phrase that candidate ``m`` ends or starts when a scale word is in
    it ("one hundred and five", "twelve hundred", "3 thousand"), else ``None``: read alone, its
    last word would be a wrong count."""
    words = [m.group().rstrip(".,")]
    if m.group() == words[0]:  # no punctuation after it: the phrase may go on
        for token in text[m.end() : m.end() + _PHRASE_REACH].split():
            word = token.rstrip(".,")
            if not _in_phrase(word):
                break
            words.append(word)
            if word != token:
                break
    left = text[max(0, m.start() - _PHRASE_REACH) : m.start()].split()
    for j in range(len(left) - 1, -1, -1):  # "and" only after a scale: "five and one hundred"
        if not _in_phrase(left[j]) or (left[j] == "and" and (j == 0 or left[j - 1] not in SCALES)):
            break
        words.insert(0, left[j])
    while words and words[-1] == "and":
        words.pop()
    if not any(w in SCALES for w in words):
        return None
    total = current = 0
    for word in words:
        if word in SCALES:
            if word == "hundred":
                current = (current or 1) * 100
            else:
                total, current = total + (current or 1) * SCALES[word], 0
        elif word != "and":
            value = int(word) if word.isdigit() else _word_value(word)
            if value is None:
                return None
            current += value
    return total + current


def _in_phrase(word: str) -> bool:
    return word in SCALES or word == "and" or word.isdigit() or _word_value(word) is not None


def parse_count(text: str) -> int | None:
    """Read a count: the last ``[n]`` if any, else the last integer or number word (see
    :func:`read_count`); ``None`` when there is none.

    >>> parse_count("I see [3] objects"), parse_count("there are three cubes"), parse_count("7.0")
    (3, 3, 7)
    """
    return read_count(text)[0]


# A number must contain a digit: the old pattern made every part optional, so it matched the empty
# string at every position and its ``\s*/`` fraction part rescanned runs of spaces (quadratic).
_NUMBER = re.compile(
    r"[-+\u2212\uff0d]?(?:\d{1,3}(?:\.\d{3}){2,}(?![.\d])"  # 1.000.000: dots that group thousands
    r"|(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
    r"(?:\s*/\s*\d+(?:\.\d+)?)?"
)

_SEPARATORS = str.maketrans({"\u066b": ".", "\u066c": ",", "\uff0e": ".", "\uff0c": ","})
"""The Arabic and full-width decimal and thousands signs, which their digits are written with."""
_SPACE_GROUP = re.compile(r"(?<=\d)[\u00a0\u202f\u2009](?=\d{3}(?!\d))")
"""A no-break, narrow no-break or thin space between digit groups of three (SI style)."""
_LATEX_FRACTION = re.compile(r"\\[dt]?frac\s*\{\s*(\d[\d.,]*)\s*\}\s*\{\s*(\d[\d.,]*)\s*\}")
_TIMES_TEN = re.compile(
    r"(?<=\d)\s*(?:\u00d7|\\times|\\cdot|\*|\u00b7)\s*10\s*\^\s*\{?\s*([-+\u2212]?\d+)\s*\}?"
)


def plain_numbers(text: str) -> str:
    r"""``text`` with its numbers written one way: Arabic and full-width separators as ASCII,
    digit groups joined across no-break and thin spaces, LaTeX fractions as ``a/b`` and
    ``a \times 10^{n}`` as ``aen`` (read as one number, never by its last digits).

    >>> plain_numbers("\\frac{3}{4} or 1.5\u00d710^{3} or 1\u00a0000")
    '3/4 or 1.5e3 or 1000'
    """
    text = _SPACE_GROUP.sub("", str(text).translate(_SEPARATORS))
    text = _LATEX_FRACTION.sub(r"\1/\2", text)
    return _TIMES_TEN.sub(lambda m: "e" + m.group(1).replace("\u2212", "-"), text)


def raised(text: str, start: int) -> str | None:
    """What the number starting at ``start`` is raised on: ``"number"`` for an exponent of a
    number (``2^{10}``), ``"unit"`` for one of a word (``m^2``, ``x^2``), else ``None``."""
    before = text[max(0, start - 8) : start].rstrip(" {")
    if not before.endswith("^"):
        return None
    base = before[:-1].rstrip(" }")
    return "number" if base[-1:].isdigit() else "unit"


def _number_value(token: str) -> float | None:
    token = token.replace(",", "").replace(" ", "").replace("\u2212", "-").replace("\uff0d", "-")
    if token.count(".") > 1:  # thousands grouped by dots: no decimal has two points
        token = token.replace(".", "")
    try:
        if "/" in token:
            num, den = token.split("/")
            value = float(num) / float(den) if float(den) != 0 else None
        else:
            value = float(token)
    except (ValueError, OverflowError):
        return None
    return value if value is not None and math.isfinite(value) else None


def parse_number(text: str) -> float | None:
    """The last number in ``text``: integers, decimals, ``1,234``, ``1.000.000``, ``1e-3``,
    fractions ``3/4``, in any script's decimal digits (Arabic-Indic with its own separators).
    One dot is a decimal point, as in English: ``1.000`` is 1. Written forms are read as one
    number (:func:`plain_numbers`): LaTeX fractions, ``1.5 \\times 10^{3}``, digit groups split
    by no-break spaces or full-width commas. A power of numbers (``2^{10}``) is its value, and an
    exponent on a unit (``5 m^2``) is not the number.

    Linear time: one regex scan in C. The last number decides: one that is no finite number
    (``1e400``, ``3/0``) gives ``None``, not an earlier number. A dash joined to the word or
    number before it is no minus sign (``3-4`` ends in 4, as ``read_count`` reads it).

    >>> parse_number("about 1,234.5 m"), parse_number("x = -3/4"), parse_number("none")
    (1234.5, -0.75, None)
    """
    text = plain_numbers(text)
    last = collections.deque(_NUMBER.finditer(text), maxlen=2)
    if not last:
        return None
    match = last[-1]
    power = raised(text, match.start())
    if power == "unit":  # "5 m^2": the exponent of a unit is not the answer
        return _signed_value(text, last[0]) if len(last) == 2 else None
    if power == "number":  # "2^{10}": the power's value
        base = _signed_value(text, last[0]) if len(last) == 2 else None
        exponent = _signed_value(text, match)
        return _power(base, exponent)
    return _signed_value(text, match)  # an infinite last number is None, not the one before


def _signed_value(text: str, match: re.Match) -> float | None:
    token = match.group()
    if token[0] in _SIGNS and match.start() > 0 and text[match.start() - 1].isalnum():
        token = token[1:]  # "3-4", "x-4": a dash joined to a word is no minus sign
    return _number_value(token)


def _power(base: float | None, exponent: float | None) -> float | None:
    if base is None or exponent is None:
        return None
    try:
        value = math.pow(base, exponent)
    except (OverflowError, ValueError):  # past a float, or a negative base's fractional power
        return None
    return value if math.isfinite(value) else None


def _gold(task_data: dict[str, Any], key: str, who: str) -> Any:
    return require_field(task_data, key, who)


_WORD_NUMBER = re.compile(
    rf"(?i)\b(?:{_WORDS})(?:(?:[\s-]+|\s+and\s+)(?:{_WORDS}|{'|'.join(SCALES)}))*\b"
)
"""One number written in words: "three", "twenty-one", "one hundred and five"."""


def _number_gold(task_data: dict[str, Any], key: str, who: str) -> Any:
    """The gold of a number or count reward: a finite real number, or a string holding one
    number (``"7 cm"``). A bool, NaN (a table's null), infinity, another type (a list, a
    complex) or a string of several numbers (``"3 or 4"``, ``"three or four"``, where reading
    the last would score a right answer 0) is a data error."""
    return one_number(_gold(task_data, key, who), key)


def _finite(value: numbers.Real) -> bool:
    """Whether ``value`` is a finite number a float can hold (an int past 1.8e308 cannot)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def one_number(raw: Any, key: str = "answer") -> Any:
    """``raw`` when it is one finite number or a string holding one (see :func:`_number_gold`).

    Raises:
        ValueError: naming ``task_data[key]`` and why.
    """
    if isinstance(raw, bool) or not isinstance(raw, (str, numbers.Real)):
        raise ValueError(f"task_data[{key!r}]={raw!r} is not a number")
    if isinstance(raw, numbers.Real) and not _finite(raw):
        raise ValueError(f"task_data[{key!r}]={str(raw)[:40]!s} is not a finite number")
    if isinstance(raw, str):
        found = len(_NUMBER.findall(raw)) + len(_WORD_NUMBER.findall(raw))
        if found > 1:
            raise ValueError(
                f"task_data[{key!r}]={raw!r} holds several numbers; give the one answer"
            )
    return raw


def count_gold(raw: Any, key: str = "answer") -> int:
    """The true count of a count reward or eval task: an integer, an integral float (a table
    column with a null becomes float), or a string holding one whole count (``"3"``, ``"three"``,
    ``"3 cubes"``).

    Raises:
        ValueError: naming ``task_data[key]``: not one finite number, not whole (``2.5``,
            ``"1/2"``), or a string the count reader does not read.
    """
    raw = one_number(raw, key)
    if isinstance(raw, numbers.Real):
        if not isinstance(raw, numbers.Integral) and float(raw) != int(raw):
            raise ValueError(f"task_data[{key!r}]={raw!r} is not a whole count")
        gold = int(raw)
    else:
        gold = parse_count(raw)
        value = parse_number(raw)
        if gold is None or (value is not None and value != gold):
            raise ValueError(f"task_data[{key!r}]={raw!r} is not a count: give one whole number")
    if gold < 0:
        raise ValueError(f"task_data[{key!r}]={raw!r} is not a count: a count is 0 or more")
    return gold


class CountReward(Reward):
    """1.0 when the predicted count is within ``tolerance`` of the gold count, else 0.0.

    >>> CountReward()("p", "<answer>three</answer>", [], [], answer="3")
    1.0
    """

    def __init__(
        self, tolerance: int = 0, *, answer_key: str = "answer", use_answer_tag: bool = True
    ):
        self.tolerance = option_number(tolerance, "tolerance", 0)
        self.answer_key = answer_key
        self.use_answer_tag = use_answer_tag
        self.name = "count"

    def compute(self, prompt, completions, prompt_ids, completion_ids, **task_data) -> RewardResult:
        gold = count_gold(_gold(task_data, self.answer_key, type(self).__name__), self.answer_key)
        pred, why = read_count(answer_region(completions, self.use_answer_tag))
        if pred is None:
            return RewardResult(0.0, why)
        return RewardResult(
            1.0 if abs(pred - gold) <= self.tolerance else 0.0, None, {"pred": pred}
        )


_LETTER_PATTERNS = [
    r"^\s*\(?([A-Za-z])\)?\s*[.:)]?\s*$",  # the whole answer is a letter: "B", "(b)", "B."
    # "the answer is (b)", "Answer: B": a bare letter mid-text must be a capital, so the article
    # in "the answer is a blue car" is not read as choice A.
    r"(?i:answer\s*(?:is|:)?)\s*[:\-]?\s*\(([A-Za-z])\)",
    # ... and not the word "A" or "I" starting a sentence ("Answer: I think it is C").
    r"(?i:answer\s*(?:is|:)?)\s*[:\-]?\s*(?![AI]\s+[a-z])([A-Z])\b",
    r"(?i:answer\s*(?:is|:)?)\s*[:\-]?\s*([a-z])\s*[.)]?\s*$",  # "the answer is b" at the end
    # "\boxed{B}", "\boxed{(b)}", "\boxed{\text{B}}"
    r"\\boxed\{\s*(?:\\(?:text|textbf|mathrm|mathbf)\s*\{\s*)?\(?([A-Za-z])\)?\s*\}?\s*\}",
    # "The correct option is B", "Option B": a capital letter, not followed by a lower-case word
    r"(?i:option)\s*(?i:is)?\s*[:\-]?\s*\(?(?![AI]\s+[a-z])([A-Z])\b\)?",
    r"(?i:option)\s*(?i:is)?\s*[:\-]?\s*([a-z])\s*[.)]?\s*$",  # "option b" at the end
    # An answer that starts with its letter goes before an option the explanation names after it
    r"^\s*\(?([A-Z])[.):]?[ \t]*\n",  # the first line is the letter: "B\n\nExplanation: ..."
    r"^\s*([A-Z])[.):]\s",  # "B. because ...", "B) Paris. Not (A)."
    r"\(([A-Z])\)",  # "(B)" anywhere
]
"""How a letter is read, first rule first, from the answer's text in NFKC form (full-width
letters and colons as ASCII) without Markdown emphasis (``**B**``). A lower-case letter that is
a choice's own text (``a`` among the, a, an) is that choice."""

_EMPHASIS = re.compile(r"\*\*|__|(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])")


def _choice_list(task_data: dict[str, Any]) -> list[Any]:
    """``task_data["choices"]`` as a list (empty when absent). A string is refused: read as a
    sequence it would be one option per character."""
    raw = task_data.get("choices")
    if raw is None:
        return []
    if not isinstance(raw, (list, tuple, np.ndarray)):
        raise ValueError(
            f"task_data['choices'] is a {type(raw).__name__} ({str(raw)[:40]!r}); give a list "
            "of 2 to 26 option texts"
        )
    choices = list(raw)
    _check_choices(choices)
    return choices


def choice_text_letter(raw: str, choices: list[Any]) -> str | None:
    """The letter of the one choice whose text ``raw`` is: equal, else equal after the VQA answer
    normalisation (``" paris "`` names ``"Paris"``); ``None`` when none or several are."""
    if raw in choices:
        return chr(ord("A") + choices.index(raw))
    text = normalize_answer(raw)
    same = [i for i, c in enumerate(choices) if text and normalize_answer(str(c)) == text]
    return chr(ord("A") + same[0]) if len(same) == 1 else None


def _check_choices(choices: list[Any]) -> None:
    """Refuse the options ``vlrollout eval --task mc`` refuses: fewer than 2 or more than 26, or
    two alike (an answer naming it could not be told apart)."""
    if not 2 <= len(choices) <= 26:
        raise ValueError(
            f"task_data['choices'] has {len(choices)} options; give 2 to 26 option texts"
        )
    first: dict[str, int] = {}
    for k, choice in enumerate(map(str, choices), 1):
        if choice in first:
            raise ValueError(
                f"task_data['choices']: choices {first[choice]} and {k} are both {choice!r}; "
                "fix the item"
            )
        first[choice] = k


def _letter(found: str, choices: list[Any]) -> str:
    """The choice letter a read letter names: a lower-case one that is a choice's text is that
    choice ("a" among the, a, an is B)."""
    if found.islower() and found in choices:
        return chr(ord("A") + choices.index(found))
    return found.upper()


def letter_text_clash(raw: str, letter: str, choices: list[Any]) -> str | None:
    """The letter of the other choice whose text a one-letter gold ``raw`` also is (``"a"``
    among ``the, a, an`` is letter A and the text of choice B), else ``None``."""
    by_text = choice_text_letter(raw, choices)
    return by_text if by_text is not None and by_text != letter else None


def _check_letter_text_clash(raw: str, letter: str, choices: list[Any], key: str) -> None:
    if other := letter_text_clash(raw, letter, choices):
        raise ValueError(
            f"task_data[{key!r}]={raw!r} is both the letter of choice {letter} and the text of "
            f"choice {other}; give the gold as a 0-based index"
        )


class ChoiceReward(Reward):
    """Multiple choice, read as ``vlrollout eval --task mc`` reads it. Gold: a letter, a 0-based
    index, or a choice's text in ``choices``.

    The answer's letter (``B``, ``(B)``, ``**B**``, ``the answer is B``), limited to the number
    of ``task_data["choices"]`` when present (else A-Z); several different letters in ``(X)``
    form give ``ambiguous_choice``. With ``choices`` and no letter, the one choice whose text the
    answer gives (:func:`~vlrollout.rewards.vqa_answers.match_choice_text`): a model answering
    "Paris" is scored as the evaluator scores it.

    >>> ChoiceReward()("p", "The answer is (B).", [], [], answer="B")
    1.0
    """

    def __init__(self, *, answer_key: str = "answer", use_answer_tag: bool = True):
        self.answer_key = answer_key
        self.use_answer_tag = use_answer_tag
        self.name = "choice"

    def compute(self, prompt, completions, prompt_ids, completion_ids, **task_data) -> RewardResult:
        raw = _gold(task_data, self.answer_key, type(self).__name__)
        choices = _choice_list(task_data)
        n = len(choices) or 26
        valid = {chr(ord("A") + i) for i in range(n)}
        gold = self._gold_letter(raw, choices, n)
        region = answer_region(completions, self.use_answer_tag)
        text = _EMPHASIS.sub("", unicodedata.normalize("NFKC", region))
        for pattern in _LETTER_PATTERNS:
            found = [_letter(x, choices) for x in re.findall(pattern, text)]
            letters = [x for x in found if x in valid]
            if not letters:
                continue
            if len(set(letters)) > 1:
                return RewardResult(0.0, "ambiguous_choice", {"letters": sorted(set(letters))})
            return RewardResult(1.0 if letters[0] == gold else 0.0, None, {"pred": letters[0]})
        texts = [str(c) for c in choices]
        index = match_choice_text(region, texts) if choices else None
        if index is None:
            alike = [
                i for i, c in enumerate(texts) if normalize_answer(c) == normalize_answer(region)
            ]
            if len(alike) > 1:  # "cat" among Cat, cat: the text names two options
                letters = [chr(ord("A") + i) for i in alike]
                return RewardResult(0.0, "ambiguous_choice", {"letters": letters})
            return RewardResult(0.0, "no_choice")
        pred = chr(ord("A") + index)
        return RewardResult(1.0 if pred == gold else 0.0, None, {"pred": pred})

    def _gold_letter(self, raw: Any, choices: list[Any], n: int) -> str:
        """The gold's letter from a letter, a 0-based index or a choice's text; anything that
        names no choice of the ``n`` is refused (a letter past them would never be read)."""
        letter = None
        if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
            raw = self._digit_index(raw, choices, n)  # AI2D writes its 0-based index as text
        if isinstance(raw, numbers.Integral) and not isinstance(raw, bool):
            letter = chr(ord("A") + int(raw)) if 0 <= raw < n else None
        elif isinstance(raw, str) and len(key := raw.strip().strip("().").upper()) == 1:
            letter = key if "A" <= key < chr(ord("A") + n) else None
            if letter is not None and choices:
                _check_letter_text_clash(raw, letter, choices, self.answer_key)
        if letter is None and isinstance(raw, str) and choices:
            letter = choice_text_letter(raw, choices)
        if letter is None and not choices and isinstance(raw, str):
            raise ValueError(
                f"task_data[{self.answer_key!r}]={raw!r} is no letter or index, and "
                "task_data['choices'] is missing, so it names no choice: add the item's choices"
            )
        if letter is None or ord(letter) - ord("A") >= n:
            last = chr(ord("A") + n - 1)
            raise ValueError(
                f"task_data[{self.answer_key!r}]={raw!r} is not one of the {n} choices: give a "
                f"letter A-{last}, a 0-based index below {n} or the text of a choice"
            )
        return letter

    def _digit_index(self, raw: str, choices: list[Any], n: int) -> int | str:
        """A digit string's 0-based index, as ``vlrollout eval``'s mc reads it; the string itself
        when it is no index (past the choices: maybe a choice's text).

        Raises:
            ValueError: it is the index of one choice and the text of another.
        """
        index = int(raw)
        if index >= n:
            return raw
        text = choices.index(raw) if raw in choices else None
        if text is not None and text != index:
            a, b = chr(ord("A") + index), chr(ord("A") + text)
            raise ValueError(
                f"task_data[{self.answer_key!r}]={raw!r} is both the 0-based index of choice {a} "
                f"and the text of choice {b}; give the gold as a letter"
            )
        return index


class NumericReward(Reward):
    """1.0 when the last number in the answer is within tolerance of the gold number.

    ``math.isclose(pred, gold, rel_tol=rel_tol, abs_tol=abs_tol)``.

    >>> NumericReward(rel_tol=0.01)("p", "<answer>about 99.5</answer>", [], [], answer="100")
    1.0
    """

    def __init__(
        self,
        rel_tol: float = 1e-6,
        abs_tol: float = 0.0,
        *,
        answer_key: str = "answer",
        use_answer_tag: bool = True,
    ):
        self.rel_tol, self.abs_tol = (
            option_number(rel_tol, "rel_tol", 0),
            option_number(abs_tol, "abs_tol", 0),
        )
        self.answer_key = answer_key
        self.use_answer_tag = use_answer_tag
        self.name = "numeric"

    def compute(self, prompt, completions, prompt_ids, completion_ids, **task_data) -> RewardResult:
        raw = _number_gold(task_data, self.answer_key, type(self).__name__)
        gold = float(raw) if isinstance(raw, (int, float)) else parse_number(str(raw))
        if gold is None:
            raise ValueError(f"task_data[{self.answer_key!r}]={raw!r} is not a number")
        pred = parse_number(answer_region(completions, self.use_answer_tag))
        if pred is None:
            return RewardResult(0.0, "no_number")
        ok = math.isclose(pred, gold, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        return RewardResult(1.0 if ok else 0.0, None, {"pred": pred})


_PROSE_WORD = re.compile(r"(?<!\\)\b[A-Za-z]{3,}\b")


def _parse_math(text: str, timeout: int | None, trusted: bool) -> list[Any]:
    """``math_verify.parse`` of ``text``; bare LaTeX is wrapped in ``$...$`` first.

    Untrusted (model) text is wrapped only when it has no prose words (three or more letters not
    following a backslash), so "no idea" does not parse as the product n*o*i*d*e*a.
    """
    from math_verify import parse

    text = text.strip()
    delimited = "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text
    if not delimited and (trusted or not _PROSE_WORD.search(text)):
        return parse(f"${text}$", parsing_timeout=timeout)
    return parse(text, parsing_timeout=timeout)


class MathReward(Reward):
    """Math equivalence with ``math_verify``: ``verify(parse(gold), parse(prediction))``.

    The prediction is the last ``\\boxed{}`` when present (required if ``require_boxed``), else the
    ``<answer>`` content, else the whole completion. ``math_verify``'s signal-based timeouts only
    work in a main thread, so they are disabled elsewhere.

    >>> MathReward()("p", r"so \\boxed{\\frac{1}{2}}", [], [], answer="0.5")
    1.0
    """

    def __init__(
        self,
        *,
        require_boxed: bool = False,
        answer_key: str = "answer",
        use_answer_tag: bool = True,
        timeout_seconds: int = 5,
    ):
        self.require_boxed = require_boxed
        self.answer_key = answer_key
        self.use_answer_tag = use_answer_tag
        self.timeout_seconds = timeout_seconds
        self.name = "math"

    def compute(self, prompt, completions, prompt_ids, completion_ids, **task_data) -> RewardResult:
        from math_verify import verify

        given = _gold(task_data, self.answer_key, type(self).__name__)
        if isinstance(given, bool) or not isinstance(given, (str, numbers.Real)):
            raise ValueError(
                f"task_data[{self.answer_key!r}]={given!r:.60} is a {type(given).__name__}: "
                "give the answer as one string or number"
            )  # a list would be scored as its text, brackets and quotes included
        raw = str(given)
        timeout = (
            self.timeout_seconds if threading.current_thread() is threading.main_thread() else None
        )
        gold = _parse_math(last_boxed(raw) or raw, timeout, trusted=True)
        if not gold:
            raise ValueError(f"task_data[{self.answer_key!r}]={raw!r} is not parseable math")
        boxed = last_boxed(without_reasoning(str(completions)))
        if boxed is None:
            if self.require_boxed:
                return RewardResult(0.0, "no_boxed")
            target_text = answer_region(completions, self.use_answer_tag)
        else:
            target_text = boxed
        target = _parse_math(target_text, timeout, trusted=False)
        if not target:
            return RewardResult(0.0, "unparseable_answer")
        ok = verify(gold, target, timeout_seconds=timeout)
        return RewardResult(1.0 if ok else 0.0, None, {"pred": str(target[-1])})


_CLEVR = CountReward(tolerance=0)
_GEOMETRY3K = MathReward(require_boxed=True)


def clevr_count_reward(prompt, completions, prompt_ids, completion_ids, **task_data) -> float:
    """CLEVR-count reward (AReaL signature): exact integer count, ``[n]``/digits/words."""
    return _CLEVR(prompt, completions, prompt_ids, completion_ids, **task_data)


def geometry3k_reward(prompt, completions, prompt_ids, completion_ids, **task_data) -> float:
    """Geometry3K reward (AReaL signature): last ``\\boxed{}`` verified against the gold answer."""
    return _GEOMETRY3K(prompt, completions, prompt_ids, completion_ids, **task_data)
