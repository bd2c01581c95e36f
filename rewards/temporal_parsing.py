"""Read time segments (``[start, end]``) from model output, in one linear pass.

A segment is two values joined by one separator, with nothing else between them:

==============================  =============================================================
written                         read as
==============================  =============================================================
``[1.5, 3.0]``, ``(1.5, 3)``    ``1.5`` to ``3.0`` in the task's unit (seconds or frames)
``from 1.5s to 3.0s``           seconds (``s``, ``sec``, ``second(s)``; ``ms``; ``min``)
``1.5-3.0`` / ``1.5 – 3.0 s``   dash, en dash, em dash or ``~``; a unit on one end applies to both
``between 1.5 and 3 seconds``   ``and``, ``to``, ``until``, ``till``, ``through`` join the ends
``0:01.5 - 0:03``               clock times (``m:ss`` or ``h:mm:ss``, fractions allowed): seconds
``frames 3 to 7``, ``frame 3``  frame indices (``frame``/``frames`` before or after a number)
==============================  =============================================================

A run of more than two values is several segments when its separators alternate between one
join inside each pair and another between pairs (``2-3s, 5-6s``, ``1 to 2 and 3 to 4``); any
other run (``[1, 2, 3, 4]``, a box) is not a segment: it is skipped and named in ``issues``. Brackets, unknown words and other characters end a run, so
``[1.5, 3.0] and [4, 5]`` reads as two segments and ``at 1.5 the square, at 3.0`` as none. A
dash right before a number that does not follow a value is a minus sign (``[-1, 2]``).

Why a token scan and not one regular expression: a pattern such as ``\\d+\\s*-\\s*\\d+`` that fails
after a long digit or space run is retried from every position in it (quadratic on the garbage an
RL policy emits). Here one ``finditer`` over simple token patterns feeds a small state machine,
so time is linear in the text on any input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

SECONDS, FRAMES = "seconds", "frames"
MAX_ISSUES = 16
"""At most this many ``issues`` are kept: they go into reward details and logs, and garbage output
can hold a skipped list every few characters."""

_TOKEN = re.compile(
    r"(?:(?P<clock>[0-9]+:[0-9]+(?::[0-9]+)?(?:\.[0-9]+)?)"
    r"|(?P<num>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?))"
    r"(?P<sep>[ \t]*[-,~\u2012\u2013\u2014\u2212])?"
    r"|(?P<word>[a-z]+)"
    r"|(?P<dash>[-~\u2012\u2013\u2014\u2212])"
    r"|(?P<comma>,)"
    r"|(?P<other>\S)",
    re.IGNORECASE,
)
"""Tokens; a separator right after a number is read with it (``sep``), which halves the tokens of
number lists (the commonest long garbage here)."""
_JOIN_WORDS = frozenset({"to", "and", "until", "till", "through", "thru"})
_FRAME_WORDS = frozenset({"frame", "frames"})
#: Time unit words and their factor to seconds.
_TIME_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "ms": 1e-3,
    "msec": 1e-3,
    "millisecond": 1e-3,
    "milliseconds": 1e-3,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
}


class Endpoint(NamedTuple):
    """One end of a segment as written.

    Attributes:
        value: The number; seconds already scaled by its unit word (``ms``, ``min``) when
            ``unit`` is ``"seconds"``. May be infinite (a huge number).
        unit: ``"seconds"``, ``"frames"`` or ``None`` (a bare number: the task decides).
        scale: The factor its unit word applied (``60`` for ``min``, ``1e-3`` for ``ms``; ``1``
            otherwise), which a bare number at the segment's other end takes too.
    """

    value: float
    unit: str | None = None
    scale: float = 1.0


@dataclass(frozen=True)
class ParsedSegments:
    """Segments read from one completion, in output order, plus what could not be read."""

    segments: list[tuple[Endpoint, Endpoint]] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)


def _clock_seconds(text: str) -> float:
    """``m:ss(.f)`` or ``h:mm:ss(.f)`` as seconds (``float``: a huge field is ``inf``, no error)."""
    total = 0.0
    for part in text.split(":"):
        total = total * 60.0 + float(part)
    return total


_CLOCK, _NUM, _SEP, _WORD, _DASH, _COMMA = 1, 2, 3, 4, 5, 6  # group numbers of _TOKEN
_TO_WORDS = frozenset({"to", "until", "till", "through", "thru"})

Value = tuple[float, str | None, float]
"""A value of a run: ``(value, unit, scale)``, as :class:`Endpoint` takes them."""


def _separator(text: str) -> str:
    """The kind of a separator: ``"dash"`` (any dash or ``~``), ``"to"`` (and its synonyms),
    ``"and"`` or ``","``."""
    low = text.strip().lower()
    return "to" if low in _TO_WORDS else ("dash" if low not in ("and", ",") else low)


def _run_segments(run: list[Value], separators: list[str]) -> list[tuple[Endpoint, Endpoint]]:
    """The segments a run of values holds: one pair, or pairs whose separators alternate between
    one kind inside each pair and another between pairs; none otherwise."""
    if len(run) % 2:
        return []
    inside, between = set(separators[0::2]), set(separators[1::2])
    if len(run) > 2 and (len(inside) != 1 or len(between) != 1 or inside == between):
        return []
    return [(Endpoint(*run[i]), Endpoint(*run[i + 1])) for i in range(0, len(run), 2)]


def parse_segments(text: str) -> ParsedSegments:
    """Every ``[start, end]`` segment in ``text``, left to right (see the module docstring).

    Never raises on model output; values are as written (frame indices or seconds), converted and
    checked by the reward. One pass with the state in local variables: this runs on every
    completion, and method calls per token would double its time on long garbage.

    >>> [(a.value, a.unit, b.value, b.unit) for a, b in parse_segments(
    ...     "It crosses from 1.5s to 3 s, i.e. frames [6, 12]").segments]
    [(1.5, 'seconds', 3.0, 'seconds'), (6.0, 'frames', 12.0, None)]
    >>> parse_segments("[1, 2, 3, 4]").issues
    ['a list of 4 numbers is not a segment']
    """
    out = ParsedSegments()
    run: list[Value] = []
    separators: list[str] = []  # the kind of each separator after a value of the run
    after_value = False  # the run's last token is a value (or its unit word)
    pending_sep = False  # a separator follows the run's last value
    frame_prefix = False  # "frame(s)" was just read: the next value is a frame index
    sign_end = -1  # text position right after a minus sign

    def close() -> None:
        segments = _run_segments(run, separators[: len(run) - 1]) if len(run) > 1 else []
        out.segments.extend(segments)
        if len(run) > 2 and not segments and len(out.issues) < MAX_ISSUES:
            out.issues.append(f"a list of {len(run)} numbers is not a segment")
        run.clear()
        separators.clear()

    for m in _TOKEN.finditer(str(text)):
        kind = m.lastindex
        if kind == _SEP or kind == _NUM or kind == _CLOCK:
            clock, num, sep = m.group(_CLOCK, _NUM, _SEP)
            number = float(num) if num is not None else _clock_seconds(clock)
            if sign_end == m.start():
                number = -number
            if after_value:
                close()  # two values with no separator: a new run starts here
            run.append((number, FRAMES if frame_prefix else (SECONDS if clock else None), 1.0))
            if sep is not None:
                separators.append(_separator(sep))
            after_value, pending_sep = sep is None, sep is not None
            frame_prefix, sign_end = False, -1
            continue
        if kind == _WORD:
            low = m.group().lower()
            if after_value and run[-1][1] is None:
                if low in _TIME_UNITS:
                    scale = _TIME_UNITS[low]
                    run[-1] = (run[-1][0] * scale, SECONDS, scale)
                    continue
                if low in _FRAME_WORDS:
                    run[-1] = (run[-1][0], FRAMES, 1.0)
                    continue
            if low in _FRAME_WORDS and (pending_sep or not run):
                frame_prefix = True
                continue
            kind = _COMMA if low in _JOIN_WORDS else 0
        elif kind == _DASH and not after_value:
            sign_end = m.end()  # a minus sign if a number follows at once
            continue
        if (kind == _COMMA or kind == _DASH) and after_value:
            after_value, pending_sep = False, True
            separators.append(_separator(m.group()))
            continue
        prefix = frame_prefix and m.group() in "[("  # "frames [3, 7]": applies inside
        if run:
            close()
        after_value, pending_sep, frame_prefix = False, False, prefix
    if run:
        close()
    return out
