"""Stanford CoreNLP 3.4.1's ``PTBLexer`` scanning loop over :mod:`.ptb_rules`.

JFlex's semantics: at each position the rule with the longest match wins, ties go to the rule
listed first, a rule ``r1/r2`` counts its trailing context ``r2`` in the match length but only
emits ``r1``, and an action may push characters back to be scanned again (``gonna`` ->
``gon`` + ``na``; ``U.S.`` then ``.``). :func:`lex` applies the rules that way, so its tokens
equal Java's; :func:`_emit` writes a rule's token (``(`` as ``-LRB-``, a closing ``"`` as two
apostrophes ...).

Fast paths, all exact: patterns are dispatched on the first character; a run of letters and
digits is WORD (or THING) unless a rule can run on past it with the character that follows
(``JOINS``), which most words before a space, comma or period are not; runs of ``SINGLES`` are
emitted without matching. ``RuleTable(..., exhaustive=True)`` turns all of them off and is the
reference the tests compare them with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from itertools import chain

from .ptb_rules import (
    ABBREVIATION_WORDS,
    EXPLICIT_FROM_3000,
    JOINS,
    LETTER_EXTRA,
    SINGLES_ASCII,
    SINGLES_NO_URL,
    rules,
    unicode_classes,
)

_LATEX_QUOTES = str.maketrans(
    {
        "\u0091": "`", "\u2018": "`", "\u201b": "`", "\u2039": "`",
        "\u0092": "'", "\u2019": "'", "\u203a": "'",
        "\u0093": "``", "\u201c": "``", "\u00ab": "``",
        "\u0094": "''", "\u201d": "''", "\u00bb": "''",
    }
)  # fmt: skip
_AMP_ENTITY = re.compile(r"(?i:&amp;)")
_FRACTIONS = str.maketrans({"\u00bc": "1/4", "\u00bd": "1/2", "\u00be": "3/4",
                            "\u2153": "1/3", "\u2154": "2/3"})  # fmt: skip
_CURRENCY = str.maketrans({"\u00a2": "cents", "\u00a3": "#", "\u0080": "$", "\u00a4": "$",
                           "\u20a0": "$", "\u20ac": "$"})  # fmt: skip
_PARENS = str.maketrans({"(": "-LRB-", ")": "-RRB-"})
_FIXED = {"mdash": "--", "ellipsis": "...", "lt": "<", "gt": ">", "lcb": "-LCB-",
          "rcb": "-RCB-", "lsb": "-LSB-", "rsb": "-RSB-", "lrb": "-LRB-", "rrb": "-RRB-"}  # fmt: skip


def _quotes(text: str, left: bool) -> str:
    """PTBLexer's ``latexQuotes``: ASCII quotes (and the entities ``&apos;``/``&quot;``, lower
    case only: Java's patterns for them are case-sensitive although the rules matching them are
    not) by the side they are probably on, curly ones by their own side (``‘`` is a backquote,
    ``’`` an apostrophe)."""
    if "&" in text:
        text = text.replace("&apos;", "'").replace("&quot;", '"')
    if left:
        text = text.replace("'", "`").replace('"', "``")
    else:
        text = text.replace('"', "''")
    return text.translate(_LATEX_QUOTES)


def _emit(action: str, text: str, out: list[str]) -> None:
    """Append the token a rule's action makes of ``text`` (nothing for deleted text)."""
    if action == "text":
        out.append(text)
    elif action == "softhyph":
        if "\u00ad" in text:
            text = text.replace("\u00ad", "") or "-"
        out.append(text)
    elif action in _FIXED:
        out.append(_FIXED[action])
    elif action == "rquote" or action == "lquote":
        out.append(_quotes(text, action == "lquote"))
    elif action == "amp":
        out.append(_AMP_ENTITY.sub("&", text))
    elif action == "nbsp":
        out.append(text.replace(" ", "\u00a0"))
    elif action == "phone":
        out.append(text.replace(" ", "\u00a0").translate(_PARENS))
    elif action == "parens":
        out.append(text.translate(_PARENS))
    elif action == "hyphens":
        out.append("--" if 3 <= len(text) <= 4 else text)
    elif action == "frac2":
        out.append(text.translate(_FRACTIONS))
    elif action == "currency":
        out.append(text.translate(_CURRENCY))
    elif action != "delete":
        raise ValueError(f"unknown action {action}")


@dataclass(frozen=True)
class _Compiled:
    """A rule ready to match: priority, patterns (and whether each has trailing context)."""

    index: int
    name: str
    patterns: tuple[tuple[re.Pattern[str], bool], ...]
    action: str


def _joins_pattern(name: str) -> re.Pattern[str] | None:
    """The characters that can follow a leading run of letters and digits in a longer match
    of rule ``name``: a pattern, one that never matches, or ``None`` when any can."""
    if name not in JOINS:
        return None
    return re.compile(f"[{JOINS[name]}]" if JOINS[name] else "(?!)")


class RuleTable:
    """The rules that can apply to a text, compiled, with first-character dispatch.

    ``amp``/``at``/``url``: the text has ``&`` / ``@`` / something URL-like; rules that need them
    (entities, e-mail addresses, ``www.`` and ``.com`` addresses) are left out otherwise, which is
    exact (those rules cannot match without them) and saves trying them on every word.
    ``exhaustive``: try every rule at every position, without dispatch or the shortcuts of
    :func:`lex` (slow; the reference the fast paths are tested against).
    """

    _DISPATCH_LIMIT = 16384

    def __init__(self, amp: bool, at: bool, url: bool, exhaustive: bool = False) -> None:
        chosen = [r for r in rules(amp) if r.needs == "" or (at if r.needs == "at" else url)]
        self.rules = [
            _Compiled(
                i, r.name, tuple((re.compile(p), "(?P<t>" in p) for p in r.patterns), r.action
            )
            for i, r in enumerate(chosen)
        ]
        # A caseless literal's first letter may also be "İ", "ı", "ſ" or the Kelvin sign.
        self._firsts = [
            tuple(
                re.compile(f"[{f}\u0130\u0131\u017f\u212a]") if f and not exhaustive else None
                for f in (r.firsts or (r.first,) * len(r.patterns))
            )
            for r in chosen
        ]
        self._joins = [_joins_pattern(r.name) for r in chosen]
        self._dispatch: dict[str, list[_Compiled]] = {}
        self._after_run: dict[tuple[str, str], list[_Compiled]] = {}
        by_name = {r.name: r for r in self.rules}
        self.word, self.thing = by_name["word"], by_name["thing"]
        # The shortcuts; e-mail and URL rules run on over almost any character.
        u = unicode_classes()
        fast = not (at or url or exhaustive)
        self.word_run = re.compile(f"[{u['L']}{u['D']}]+").match if fast else None
        singles = SINGLES_ASCII if url else SINGLES_ASCII + SINGLES_NO_URL
        self.single_run = re.compile("(?!)" if exhaustive else f"[{singles}]+").match
        self.single_tokens = _SingleTokens(self)
        # "'s", "'re" ... before a non-letter: no other rule starting with an apostrophe matches
        # as much (the quote rules match less, the others need other letters after it), but for
        # LIKELYURL, which may start with a curly apostrophe ("’ll.com").
        clitic = r"['\u0092\u2019](?:[msdMSD]|(?i:re|ve|ll))(?![A-Za-z])"
        self.clitic = re.compile("(?!)" if exhaustive or url else clitic).match
        self.digit = re.compile(f"[{u['D']}]").match
        self._letter = re.compile(f"[{u['L']}]").match
        self._explicit = re.compile(f"[{EXPLICIT_FROM_3000}]").match
        self.word_char = re.compile(f"[{u['L']}{u['D']}{LETTER_EXTRA}&,;:\u3001]").match

    def _key(self, ch: str) -> str:
        """``ch``, or for a character from U+3000 up that no rule names (a CJK letter ...) its
        kind: rules treat all of a kind alike there."""
        if ch < "\u3000" or self._explicit(ch) is not None:
            return ch
        return "\x00L" if self._letter(ch) else "\x00D" if self.digit(ch) else "\x00O"

    def candidates(self, ch: str) -> list[_Compiled]:
        """The rules that can match starting with ``ch``, in priority order, with only their
        patterns that can."""
        key = self._key(ch)
        found = self._dispatch.get(key)
        if found is None:
            found = []
            for rule, firsts in zip(self.rules, self._firsts, strict=True):
                patterns = tuple(
                    p
                    for p, f in zip(rule.patterns, firsts, strict=True)
                    if f is None or f.match(ch)
                )
                if patterns == rule.patterns:
                    found.append(rule)
                elif patterns:
                    found.append(_Compiled(rule.index, rule.name, patterns, rule.action))
            if len(self._dispatch) < self._DISPATCH_LIMIT:
                self._dispatch[key] = found
        return found

    def candidates_after_run(self, ch: str, nxt: str) -> list[_Compiled]:
        """The rules starting with ``ch`` that can run on past a run of letters and digits
        followed by ``nxt`` (see ``JOINS``), in priority order."""
        key = (self._key(ch), self._key(nxt))
        found = self._after_run.get(key)
        if found is None:
            found = [
                r
                for r in self.candidates(ch)
                if self._joins[r.index] is None or self._joins[r.index].match(nxt)
            ]
            if len(self._after_run) < self._DISPATCH_LIMIT:
                self._after_run[key] = found
        return found


class _SingleTokens(dict[str, list[str]]):
    """Character of a table's ``single_run`` -> its tokens (none when deleted), made on first
    use; called with a character (``map`` over a run stays in C)."""

    def __init__(self, table: RuleTable) -> None:
        super().__init__()
        self._table = table

    def __missing__(self, ch: str) -> list[str]:
        found: list[str] = []
        match = longest_match(ch + "\n", 0, self._table)
        if match is not None:
            _emit(match[0].action, ch, found)
        self[ch] = found
        return found

    __call__ = dict.__getitem__


_URLISH = re.compile(r"(?i:www\.|\.(?:com|net|org|edu))")


@cache
def _table(amp: bool, at: bool, url: bool) -> RuleTable:
    return RuleTable(amp, at, url)


def table_for(text: str) -> RuleTable:
    """The rule table for ``text`` (rules that ``text`` cannot match left out)."""
    if "&" in text or "@" in text or "." in text:
        return _table("&" in text, "@" in text, _URLISH.search(text) is not None)
    return _table(False, False, False)


Match = tuple[_Compiled, int, int]


def longest_match(
    line: str, pos: int, table: RuleTable, run: re.Match[str] | None = None
) -> Match | None:
    """JFlex's choice at ``pos``: ``(rule, token end, match end)`` of the longest match (with
    trailing context), the earlier rule on ties; ``None`` when no rule matches (the character
    is untokenizable and Java deletes it). ``run``: the run of letters and digits at ``pos``;
    WORD or THING match it, and only the rules that can continue past it are tried."""
    if run is None:
        best: Match | None = None
        best_end, best_index = pos, len(table.rules)
        candidates = table.candidates(line[pos])
    else:
        end = run.end()
        base = table.thing if table.digit(line[pos]) is not None else table.word
        best, best_end, best_index = (base, end, end), end, base.index
        candidates = table.candidates_after_run(line[pos], line[end] if end < len(line) else "\n")
    for rule in candidates:
        for pattern, context in rule.patterns:
            m = pattern.match(line, pos)
            if m is not None and (
                m.end() > best_end or (m.end() == best_end and rule.index < best_index)
            ):
                best_end, best_index = m.end(), rule.index
                best = (rule, m.end("t") if context else best_end, best_end)
    return best


# Words that rules before WORD split (any case).
_SPLIT_WORDS = frozenset("cannot gonna gotta lemme gimme wanna".split())
# The characters other than ASCII letters that caseless literals match: "(?i:i)" matches "İ"
# and "ı", "(?i:s)" matches "ſ", "(?i:k)" the Kelvin sign (in Python and in JFlex alike).
_ASCII_FOLD = str.maketrans("\u0130\u0131\u017f\u212a", "iisk")


def _folded(word: str) -> str:
    """``word`` as caseless literals see it, for looking it up in a word list."""
    return word.translate(_ASCII_FOLD).lower()


_HTHING_TAIL = re.compile(r"[A-Za-z0-9.,\u00ad]*-").match


def _plain_period(line: str, run: re.Match[str], table: RuleTable) -> bool:
    """Whether a run of letters followed by a comma or period is WORD: a comma only continues
    HTHING (``a,b-c``); a period only continues HTHING, an abbreviation or one-letter acronym
    (``Mr.``, ``U.S.``), WORD or FILENAME (a letter or digit after the period) and WORD-period-
    INSENTP (``etc.,``)."""
    end = run.end()
    if _HTHING_TAIL(line, end) is not None:
        return False
    if line[end] == ",":
        return True
    after = line[end + 1] if end + 1 < len(line) else "\n"
    return (
        end - run.start() > 1
        and table.word_char(after) is None
        and _folded(run.group()) not in ABBREVIATION_WORDS
    )


def lex(
    line: str,
    pos: int,
    stop: int,
    table: RuleTable,
    out: list[str],
    starts: list[int] | None = None,
) -> int:
    """Append to ``out`` the tokens (not lower-cased) that start in ``line[pos:stop]``; return
    where scanning stopped (``stop``, or past it when the last token runs on). ``line`` holds
    the text after ``stop`` too, for trailing context and for tokens that cross spaces.
    ``starts``: where each token's match starts is appended to it."""
    if starts is not None:
        return _lex_with_starts(line, pos, stop, table, out, starts)
    word_run = table.word_run
    while pos < stop:
        run = word_run(line, pos) if word_run is not None else None
        if run is not None:
            end = run.end()
            nxt = line[end] if end < len(line) else "\n"
            if end - pos in (5, 6) and _folded(run.group()) in _SPLIT_WORDS:
                found = longest_match(line, pos, table)  # "gonna": a rule before WORD splits it
            elif (
                (nxt == "," or nxt == ".")
                and table.digit(line[pos]) is None
                and _plain_period(line, run, table)
            ):
                out.append(run.group())
                pos = end
                continue
            elif not table.candidates_after_run(line[pos], nxt):
                out.append(run.group())  # WORD or THING: no rule runs on with ``nxt``
                pos = end
                continue
            else:
                found = longest_match(line, pos, table, run)
        else:
            clitic = table.clitic(line, pos)
            if clitic is not None:  # "'s" before a non-letter: REDAUX with trailing context
                out.append(_quotes(clitic.group(), False))
                pos = clitic.end()
                continue
            single = table.single_run(line, pos)
            if single is not None:
                out.extend(chain.from_iterable(map(table.single_tokens, single.group())))
                pos = single.end()
                continue
            found = longest_match(line, pos, table)
        if found is None:
            pos += 1
            continue
        rule, end, _ = found
        action = rule.action
        if action == "back3" or action == "back2":
            end -= 3 if action == "back3" else 2
            action = "text"
        elif action == "back1keep":  # the period is a token again
            out.append(line[pos:end])
            pos = end - 1
            continue
        elif action == "acronym":  # "I." -> "I" then "."; "U.S." -> "U.S." then "."
            if end - pos == 2:
                end -= 1
            out.append(line[pos:end])
            pos = end if end - pos == 1 else end - 1
            continue
        _emit(action, line[pos:end], out)
        pos = end
    return pos


def _lex_with_starts(
    line: str, pos: int, stop: int, table: RuleTable, out: list[str], starts: list[int]
) -> int:
    """:func:`lex`, one token at a time (a run of single-character tokens split into its
    characters), appending where each token's match starts to ``starts``."""
    word_run = table.word_run
    while pos < stop:
        ruled = (word_run is not None and word_run(line, pos)) or table.clitic(line, pos)
        single = None if ruled else table.single_run(line, pos)  # as lex tries them
        if single is not None:
            for i, ch in enumerate(single.group(), pos):
                tokens = table.single_tokens(ch)
                out += tokens
                starts += [i] * len(tokens)
            pos = single.end()
            continue
        n = len(out)
        end = lex(line, pos, pos + 1, table, out)  # one step: the token (if any) starting here
        starts += [pos] * (len(out) - n)
        pos = end
    return pos
