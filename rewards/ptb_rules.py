"""The rules of Stanford CoreNLP 3.4.1's ``PTBLexer`` as Python regular expressions.

pycocoevalcap tokenizes captions with CoreNLP 3.4.1's ``PTBTokenizer`` (default options:
``ptb3Escaping``, traditional treebank state, ``splitAssimilations``, untokenizable characters
deleted), a JFlex scanner; :mod:`.ptb_lexer` runs the rules below the way JFlex does. They are
written from ``PTBLexer.flex`` (3.4.1) in the same order, with JFlex's meaning kept:

- ``%caseless`` makes literal strings case-insensitive but not character classes (``[A]z`` only
  matches upper-case ``A``); literal parts are wrapped in ``(?i:...)`` here. Both engines let a
  caseless ``i`` match ``İ``/``ı``, ``s`` match ``ſ`` and ``k`` the Kelvin sign.
- JFlex's character classes come from Java's ``Character`` as of 2014: ``[:letter:]`` is
  ``isLetter`` and ``[:digit:]`` is ``isDigit`` over the Basic Multilingual Plane, less the
  letters and digits Unicode has added since (``_NEWER_THAN_LEXER``). Java scans UTF-16 units:
  a character outside the BMP (an emoji) is two surrogates, which only negated classes (URLs,
  e-mail addresses) take; the scanner's catch-all deletes them elsewhere.
- Python's alternation is ordered, not longest: rules whose alternatives can match different
  lengths list them separately and the longest is taken.

Each rule also says which characters it can start with (per alternative where they differ)
and, for rules that can start with a letter or digit, which characters can follow a leading
run of letters and digits in a longer match (``JOINS``); the scanner uses both to try only the
patterns that can match. ``SINGLES`` are characters that are a token of their own whatever
follows. Only what the tokens need is reproduced: token offsets and the ``invertible`` option
are not.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache


def _ranges(codes: list[int]) -> str:
    """A regex character-class body for the sorted code points ``codes``."""
    out, start, prev = [], None, None
    for c in codes:
        if start is None:
            start = prev = c
        elif c == prev + 1:
            prev = c
        else:
            out.append((start, prev))
            start = prev = c
    if start is not None:
        out.append((start, prev))
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in out
    )


# Letters and digits of Python's Unicode database that PTBLexer's tables (generated in 2014)
# do not have: Java deletes them as untokenizable. Found by running every BMP character
# through the Java tokenizer.
_NEWER_THAN_LEXER = (
    "\u037f\u0528-\u052f\u0560\u0588\u05ef\u0860-\u086a\u0870-\u0887\u0889-\u088e\u08a1"
    "\u08ad-\u08c9\u0978\u0980\u09fc\u0af9\u0c34\u0c5a\u0c5d\u0c80\u0cdd\u0d04\u0d54-\u0d56"
    "\u0d5f\u0de6-\u0def\u0e86\u0e89\u0e8c\u0e8e-\u0e93\u0e98\u0ea0\u0ea8-\u0ea9\u0eac"
    "\u13f5\u13f8-\u13fd\u16f1-\u16f8\u170d\u171f\u1878\u191d-\u191e\u19b0-\u19c0\u19c8-\u19c9"
    "\u1b4c\u1c80-\u1c88\u1c90-\u1cba\u1cbd-\u1cbf\u1cf2-\u1cf3\u1cfa\u2c2f\u2c5f\u312e-\u312f"
    "\u31bb-\u31bf\u4db6-\u4dbf\u9fcd-\u9fff\ua698-\ua69d\ua78f\ua794-\ua79f\ua7ab-\ua7ca"
    "\ua7d0-\ua7d1\ua7d3\ua7d5-\ua7d9\ua7f2-\ua7f7\ua8fd-\ua8fe\ua9e0-\ua9e4\ua9e6-\ua9fe"
    "\uaa7e-\uaa7f\uab30-\uab5a\uab5c-\uab69\uab70-\uabbf"
)
# Letters in PTBLexer's tables that Unicode has since made combining marks.
_LETTERS_THEN = "\u1885\u1886"


def _code_points(class_body: str) -> set[int]:
    """The code points of a class body made of characters and ``a-b`` ranges."""
    out: set[int] = set()
    for a, b in re.findall(r"(.)(?:-(.))?", class_body, re.S):
        out.update(range(ord(a), ord(b or a) + 1))
    return out


@cache
def unicode_classes() -> dict[str, str]:
    """Java's ``isLetter``, ``isDigit`` and ``isUpperCase`` over the BMP as PTBLexer's tables
    have them, as class bodies."""
    letters, digits, upper = [], [], []
    newer = _code_points(_NEWER_THAN_LEXER)
    then = _code_points(_LETTERS_THEN)
    for c in range(0x10000):
        if c in newer:
            continue
        cat = "Lo" if c in then else unicodedata.category(chr(c))
        if cat in ("Lu", "Ll", "Lt", "Lm", "Lo"):
            letters.append(c)
        elif cat == "Nd":
            digits.append(c)
        if cat == "Lu" or 0x2160 <= c <= 0x216F or 0x24B6 <= c <= 0x24CF:
            upper.append(c)
    return {"L": _ranges(letters), "D": _ranges(digits), "U": _ranges(upper)}


# PTBLexer's LETTER adds these to [:letter:] (soft hyphen, combining marks, some symbols).
LETTER_EXTRA = (
    "\u00ad\u0237-\u024f\u02c2-\u02c5\u02d2-\u02df\u02e5-\u02ff\u0300-\u036f\u0370-\u037d\u0384"
    "\u0385\u03cf\u03f6\u03fc-\u03ff\u0483-\u0487\u04cf\u04f6-\u04ff\u0510-\u0525\u055a-\u055f"
    "\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7\u0615-\u061a\u063b-\u063f\u064b-\u065e"
    "\u0670\u06d6-\u06ef\u06fa-\u06ff\u070f\u0711\u0730-\u074f\u0750-\u077f\u07a6-\u07b1"
    "\u07ca-\u07f5\u07fa\u0900-\u0903\u093c\u093e-\u094e\u0951-\u0955\u0962-\u0963\u0981-\u0983"
    "\u09bc-\u09c4\u09c7\u09c8\u09cb-\u09cd\u09d7\u09e2\u09e3\u0a01-\u0a03\u0a3c\u0a3e-\u0a4f"
    "\u0a81-\u0a83\u0abc-\u0acf\u0b82\u0bbe-\u0bc2\u0bc6-\u0bc8\u0bca-\u0bcd\u0c01-\u0c03"
    "\u0c3e-\u0c56\u0d3e-\u0d44\u0d46-\u0d48\u0e30-\u0e3a\u0e47-\u0e4e\u0eb1-\u0ebc\u0ec8-\u0ecd"
)
_MISCSYMBOL = (
    "+%&~\\^|\\\\\u00a6\u00a7\u00a8\u00a9\u00ac\u00ae\u00af\u00b0-\u00b3\u00b4-\u00ba\u00d7"
    "\u00f7\u0387\u05be\u05c0\u05c3\u05c6\u05f3\u05f4\u0600-\u0603\u0606-\u060a\u060c\u0614"
    "\u061b\u061e\u066a\u066d\u0703-\u070d\u07f6\u07f7\u07f8\u0964\u0965\u0e4f\u1fbd\u2016"
    "\u2017\u2020-\u2023\u2030-\u2038\u203b\u203e-\u2042\u2044\u207a-\u207f\u208a-\u208e"
    "\u2100-\u214f\u2190-\u21ff\u2200-\u2bff\u3012\u30fb\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40"
    "\uff5b-\uff65"
)
_SPACE = " \t\u00a0\u2000-\u200a\u3000"
_NEWLINE = "\r\n\u2028\u2029\u000b\u000c\u0085"
SPACE_CHARS = frozenset(map(chr, _code_points(_SPACE)))


# PTBLexer's abbreviations, literal words that %caseless matches in any case; the
# ``_CAPITALISED`` ones are written with an upper-case class for the first letter (``[M]iss``).
_ABMONTH = "jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec"
_ABDAYS = "mon|tues|tue|wed|thurs|thu|fri"
_ABSTATE = (
    "ala|ariz|calif|colo|conn|ct|dak|fla|ga|ind|kans|kan|ky|md|mich|minn|mo|mont|neb|nev|okla"
    "|penn|tenn|va|vt|wisc|wis|wyo"
)
_ABSTATE_CAPITALISED = "Az|Ark|Del|Ill|La|Mass|Miss|Ore|Pa|Tex|Wash"
_ABCOMP = "inc|cos|co|corp|ltd|plc|rt|bancorp|bhd|assn|univ|intl|sys"  # and pp?t[ye]s?
_ABNUM = "tel|est|ext|sq"
_ABPTIT = "jr|sr|bros|ed.d|ph.d|blvd|rd|esq"
_ABBREV1_OTHER = "etc|al|seq|bldg"
_ABTITLE = (
    "mrs|mr|ms|drs|dr|profs|prof|sens|sen|reps|rep|attys|atty|lt|col|gen|messrs|govs|gov|adm|rev"
    "|maj|sgt|cpl|pvt|capt|ste|st|ave|pres|lieut|hon|brig|comdr|cmdr|pfc|spc|supts|supt|det|mt"
    "|ft|adj|adv|asst|assoc|ens|insp|mlle|mme|msgr|sfc"
)
_ABTITLE_CAPITALISED = "Miss"
_ABBREV4_OTHER = "vs|alex|wm|jos|cie|a.k.a|cf|treas|ph"
_ABCOMP2 = "invt|elec|natl|dept"  # and m[ft]g
_ABBREV3 = "ca|figs|fig|prop|nos|no|art|bldg|pp|op"
#: Every word, lower-cased, that some rule keeps a following period on (with ``Pty.``/``Co.``
#: before ``Ltd`` and the ``pp?t[ye]s?``/``m[ft]g`` forms).
ABBREVIATION_WORDS = frozenset(
    "|".join(
        (
            _ABMONTH,
            _ABDAYS,
            _ABSTATE,
            _ABSTATE_CAPITALISED,
            _ABCOMP,
            _ABNUM,
            _ABPTIT,
            _ABBREV1_OTHER,
            _ABTITLE,
            _ABTITLE_CAPITALISED,
            _ABBREV4_OTHER,
            _ABCOMP2,
            _ABBREV3,
            "pty|ptys|pte|ptes|ppty|pptys|ppte|pptes|mfg|mtg",
        )
    )
    .lower()
    .split("|")
)


_SENTENCE_STARTS = (
    "About|According|Additionally|After|An|A|As|At|But|Earlier|He|Her|Here|However|If|In|It"
    "|Last|Many|More|Mr.|Ms.|Now|Once|One|Other|Our|She|Since|So|Some|Such|That|The|Their|Then"
    "|There|These|They|This|We|When|While|What|Yet|You"
)


def _capitalised(words: str) -> str:
    """``Az|Ark`` -> ``A(?i:z)|A(?i:rk)``: a case-sensitive first letter, the rest caseless."""
    return "|".join(f"{w[0]}(?i:{re.escape(w[1:])})" for w in words.split("|"))


def _ci(words: str) -> str:
    """Case-insensitive alternation of ``|``-separated literal words (JFlex's %caseless)."""
    return "(?i:" + "|".join(re.escape(w) for w in words.split("|")) + ")"


@cache
def _macros(amp: bool) -> dict[str, str]:
    """PTBLexer's macros. ``amp``: the text has ``&`` (entities such as ``&eacute;`` then count
    as letters; without ``&`` the simpler class is equivalent and faster)."""
    u = unicode_classes()
    m: dict[str, str] = {}
    m["JL"] = f"[{u['L']}]"  # [:letter:]
    m["JD"] = f"[{u['D']}]"  # [:digit:]
    m["JLD"] = f"[{u['L']}{u['D']}]"
    m["UPPER"] = f"[{u['U']}]"
    splet = r"&[aeiouAEIOU](?i:acute|grave|uml);"
    letter_cls = f"{u['L']}{LETTER_EXTRA}"
    digit_cls = f"{u['D']}\u07c0-\u07c9"
    m["DIGIT"] = f"[{digit_cls}]"
    if amp:
        m["LETTER"] = f"(?:[{letter_cls}]|{splet})"
        m["LD"] = f"(?:[{letter_cls}{digit_cls}]|{splet})"
    else:
        m["LETTER"] = f"[{letter_cls}]"
        m["LD"] = f"[{letter_cls}{digit_cls}]"
    m["SPACE"] = f"[{_SPACE}]"
    m["SPACENL"] = f"(?:\r\n|[{_SPACE}{_NEWLINE}])"
    m["SPACENLS"] = f"[{_SPACE}{_NEWLINE}]+"
    m["APOS"] = r"(?:['\u0092\u2019]|(?i:&apos;))"
    m["APOSETC"] = r"(?:['\u0092\u2019`\u0091\u2018\u201b]|(?i:&apos;))"
    m["SPAMP"] = r"(?i:&amp;)"
    m["SGML"] = (
        r"<(?:[!?][A-Za-z\-][^>\r\n]*"
        r"|[A-Za-z][A-Za-z0-9_:.\-]*(?:[ ]+[A-Za-z][A-Za-z0-9_:.\-]*"
        r"""(?:[ ]*=[ ]*(?:'[^']*'|"[^"]*"))?)*[ ]*/?"""
        r"|/[A-Za-z][A-Za-z0-9_:.\-]*)[ ]*>"
    )
    m["WORD"] = rf"{m['LETTER']}{m['LD']}*(?:[.!?]{m['LETTER']}{m['LD']}*)*"
    m["REDAUX"] = rf"{m['APOS']}(?:[msdMSD]|(?i:re|ve|ll))"
    m["SWORD"] = r"[A-Za-z\u00ad]*[A-MO-Za-mo-z]\u00ad*"
    m["SREDAUX"] = rf"(?i:n){m['APOSETC']}(?i:t)"
    m["HYPHEN"] = "[-_\u058a\u2010\u2011]"
    m["ACRO"] = (
        r"(?:[A-Za-z](?:\.[A-Za-z])*|" + _ci("canada|sino|korean|eu|japan|non") + r"-(?i:u\.s)"
        r"|(?i:u\.s\.-)(?:(?i:u\.k)|(?i:u\.s\.s\.r)))"
    )
    m["ACRO2"] = (
        r"(?:[A-Za-z](?:\.[A-Za-z])+|" + _ci("canada|sino|korean|eu|japan|non") + r"-(?i:u\.s)"
        r"|(?i:u\.s\.-)(?:(?i:u\.k)|(?i:u\.s\.s\.r)))"
    )
    abstate = _ci(_ABSTATE) + "|" + _capitalised(_ABSTATE_CAPITALISED)
    abcomp = _ci(_ABCOMP) + r"|(?i:pp?t)[ye](?i:s)?"
    m["ABBREV1"] = (
        f"(?:{_ci(_ABMONTH)}|{_ci(_ABDAYS)}|{abstate}|{abcomp}|{_ci(_ABNUM)}|{_ci(_ABPTIT)}"
        f"|{_ci(_ABBREV1_OTHER)})\\."
    )
    abtitle = _ci(_ABTITLE) + "|" + _capitalised(_ABTITLE_CAPITALISED)
    abcomp2 = _ci(_ABCOMP2) + r"|(?i:m)[ft](?i:g)"
    m["ABBREV4"] = f"(?:{abtitle}|{_ci(_ABBREV4_OTHER)}|{m['ACRO']}|{abcomp2})"
    m["ABBREV3"] = f"(?:{_ci(_ABBREV3)})\\."
    m["INSENTP"] = "[,;:\u3001]"
    return m


@dataclass(frozen=True)
class Rule:
    """One PTBLexer rule: alternatives (the longest one counts), what it emits, and which
    first characters it (or each alternative) can start with (the scanner only tries patterns
    that can start at a character). A pattern with trailing context captures the emitted part
    as group ``t``."""

    name: str
    patterns: tuple[str, ...]
    action: str = "text"
    first: str = ""  # regex class body of possible first characters ("" = any)
    needs: str = ""  # "at" / "url": only tried when the text has "@" / looks like a URL
    firsts: tuple[str, ...] = ()  # the first characters of each pattern, when they differ


def rules(amp: bool) -> list[Rule]:
    m = _macros(amp)
    JL, JLD, LD, LETTER, DIGIT = m["JL"], m["JLD"], m["LD"], m["LETTER"], m["DIGIT"]
    APOS, APOSETC, SPACENL, SPACE = m["APOS"], m["APOSETC"], m["SPACENL"], m["SPACE"]
    WORD, HYPHEN, INSENTP = m["WORD"], m["HYPHEN"], m["INSENTP"]
    u = unicode_classes()
    letter_first = f"{u['L']}{LETTER_EXTRA}&"
    ld_first = f"{u['L']}{u['D']}"
    apos_first = "'\u0092\u2019&"
    thing = rf"(?:[dDoOlL]{APOSETC}{JLD})?{JLD}+"
    hthing = rf"[A-Za-z0-9][A-Za-z0-9.,\u00ad]*(?:-(?:{m['ACRO2']}\.|[A-Za-z0-9\u00ad]+))+"
    thinga = rf"[A-Z]+(?:(?:[+&]|{m['SPAMP']})[A-Z]+)+"
    num_sep = "[.:,\u00ad\u066b\u066c]"
    # The sentence-start words after an acronym: first letter upper-case, the rest caseless.
    acronym_ctx = f"(?:{_capitalised(_SENTENCE_STARTS)}|{m['SGML']})"
    # For %caseless, the literal letters of these rules are written as (?i:...) and classes as is.
    apoword = (
        rf"{APOS}(?i:n){APOS}?",
        rf"[lLdDjJ]{APOS}",
        rf"(?i:dunkin){APOS}",
        rf"(?i:somethin){APOS}",
        rf"(?i:ol){APOS}",
        rf"{APOS}(?i:em)",
        rf"[A-HJ-XZn]{APOSETC}{JL}{{2}}{JL}*",
        rf"{APOS}[2-9]0(?i:s)",
        rf"{APOS}(?i:til)(?i:l)?",
        rf"{JL}{JL}*[aeiouyAEIOUY]{APOSETC}[aeiouA-Z]{JL}*",
        rf"{APOS}(?i:cause)",
        r"(?i:cont)'(?i:d)\.?",
        r"'(?i:twas)",
        r"(?i:nor)'(?i:easter)",
        r"(?i:c)'(?i:mon)",
        r"(?i:e)'(?i:er)",
        r"(?i:s)'(?i:mores)",
        r"(?i:ev)'(?i:ry)",
        r"(?i:li)'(?i:l)",
        r"(?i:nat)'(?i:l)",
        rf"(?i:o){APOSETC}(?i:o)",
    )
    a, ll = apos_first, u["L"]
    apoword_firsts = (a, "lLdDjJ", "dD", "sS", "oO", a, "A-HJ-XZn", a, a, ll, a, "cC", "'", "nN",
                      "cC", "eE", "sS", "eE", "lL", "nN", "oO")  # fmt: skip
    email_chars = '^ \t\n\f\r"<>|()\u00a0{}'
    domain = '[^ \t\n\f\r"<>|(){}.\u00a0]+'
    phone_tail = r"[0-9]{3,4}[\- \u00a0]?[0-9]{3,5}"
    filename_ext = _ci(
        "bat|bmp|c|class|cgi|cpp|dll|doc|docx|exe|gif|gz|h|htm|html|jar|java|jpeg|jpg|mov|mp3"
        "|pdf|php|pl|png|ppt|ps|py|sql|tar|txt|wav|x|xml|zip"
    )
    return [
        Rule("cpp", (r"(?i:c)\+\+",), first="cC"),
        Rule("csharp", (r"(?i:c|f)#",), first="cCfF"),
        Rule("cannot", (r"(?i:cannot)",), "back3", first="cC"),
        Rule("twas", (r"'(?i:twas)",), "back3", first="'"),
        Rule("tis", (r"'(?i:tis)",), "back2", first="'"),
        Rule("assim", (_ci("gonna|gotta|lemme|gimme|wanna"),), "back2", first="gGlLwW"),
        Rule("sgml", (m["SGML"],), "nbsp", first="<"),
        Rule(
            "mdash",
            (r"&(?:(?i:md)|(?i:mdash)|(?i:ndash));", "[\u0096\u0097\u2013\u2014\u2015]"),
            "mdash",
            first="&\u0096\u0097\u2013\u2014\u2015",
        ),
        Rule("spamp", (m["SPAMP"],), "amp", first="&"),
        Rule("sppunc", (r"&(?:(?i:ht|tl|ur|lr|qc|ql|qr|odq|cdq)|#[0-9]+);",), first="&"),
        Rule("word_redaux", (rf"(?P<t>{WORD}){m['REDAUX']}",), "softhyph", first=letter_first),
        Rule(
            "sword_sredaux",
            (rf"(?P<t>{m['SWORD']}){m['SREDAUX']}",),
            "softhyph",
            first="A-Za-z\u00ad",
        ),
        Rule("word", (WORD,), "softhyph", first=letter_first),
        Rule("apoword", apoword, firsts=apoword_firsts),
        Rule("apoword2", (rf"(?P<t>(?i:y){APOS}){JL}",), first="yY"),
        Rule(
            "fullurl",
            (r'(?i:https?)://[^ \t\n\f\r"<>|(){}]+[^ \t\n\f\r"<>|.!?(){},-]',),
            first="hH",
        ),
        Rule(
            "likelyurl",
            (
                r'(?i:www)\.(?:[^ \t\n\f\r"<>|.!?(){},]+\.)+[a-zA-Z]{2,4}'
                r'(?:/[^ \t\n\f\r"<>|()]+[^ \t\n\f\r"<>|.!?(){},-])?',
                r'(?:[^ \t\n\f\r"`\'<>|.!?(){},-_$]+\.)+(?i:com|net|org|edu)'
                r'(?:/[^ \t\n\f\r"<>|()]+[^ \t\n\f\r"<>|.!?(){},-])?',
            ),
            needs="url",
        ),
        Rule(
            "email",
            (
                rf"(?:(?i:&lt;)|<)?[a-zA-Z0-9][{email_chars}]*@(?:{domain}\.)*{domain}"
                r"(?:(?i:&gt;)|>)?",
            ),
            first="a-zA-Z0-9&<",
            needs="at",
        ),
        Rule("twitter", (r"@[a-zA-Z_][a-zA-Z_0-9]*", rf"#{LETTER}+"), first="@#"),
        Rule("redaux_ctx", (rf"(?P<t>{m['REDAUX']})[^A-Za-z]",), "rquote", first=apos_first),
        Rule("sredaux_ctx", (rf"(?P<t>{m['SREDAUX']})[^A-Za-z]",), "rquote", first="nN"),
        Rule(
            "date",
            (rf"{DIGIT}{{1,2}}[\-/]{DIGIT}{{1,2}}[\-/]{DIGIT}{{2,4}}",),
            first=f"{u['D']}\u07c0-\u07c9",
        ),
        Rule(
            "number",
            (rf"[\-+]?{DIGIT}+", rf"[\-+]?{DIGIT}*(?:{num_sep}{DIGIT}+)+"),
            "softhyph",
            first=f"-+{u['D']}\u07c0-\u07c9.:,\u00ad\u066b\u066c",
        ),
        Rule(
            "subsupnum",
            (
                "[\u207a\u207b\u208a\u208b]?[\u2070\u00b9\u00b2\u00b3\u2074-\u2079]+",
                "[\u207a\u207b\u208a\u208b]?[\u2080-\u2089]+",
            ),
            first="\u207a\u207b\u208a\u208b\u2070\u00b9\u00b2\u00b3\u2074-\u2079\u2080-\u2089",
        ),
        Rule(
            "frac",
            (rf"(?:{DIGIT}{{1,4}}[- \u00a0])?{DIGIT}{{1,4}}(?:\\?/|\u2044){DIGIT}{{1,4}}",),
            "nbsp",
            first=f"{u['D']}\u07c0-\u07c9",
        ),
        Rule(
            "frac2",
            ("[\u00bc\u00bd\u00be\u2153-\u215e]",),
            "frac2",
            first="\u00bc-\u00be\u2153-\u215e",
        ),
        Rule(
            "tbspec",
            (
                r"-(?i:rrb|lrb|rcb|lcb|rsb|lsb)-",
                r"(?i:c\.d\.s)",
                r"(?i:pro-)",
                r"(?i:anti-)",
                rf"(?i:s)(?:&|{m['SPAMP']})(?i:p-500)",
                rf"(?i:s)(?:&|{m['SPAMP']})(?i:ls)",
                rf"(?i:cap){APOS}(?i:n)",
                rf"(?i:c){APOS}(?i:est)",
            ),
            "amp",
            firsts=("-", "cC", "pP", "aA", "sS", "sS", "cC", "cC"),
        ),
        Rule(
            "thing3",
            (r"[A-Za-z0-9]+(?:-[A-Za-z]+){0,2}(?:\\?/[A-Za-z0-9]+(?:-[A-Za-z]+){0,2}){1,2}",),
            first="A-Za-z0-9",
        ),
        Rule("dolsign", (r"[A-Z]*\$", "#"), firsts=("A-Z$", "#")),
        Rule(
            "dolsign2",
            (
                "[\u00a2\u00a3\u00a4\u00a5\u0080\u20a0\u20ac\u060b\u0e3f\u20a4\uffe0\uffe1\uffe5\uffe6]",
            ),
            "currency",
            first="\u00a2-\u00a5\u0080\u20a0\u20ac\u060b\u0e3f\u20a4\uffe0\uffe1\uffe5\uffe6",
        ),
        Rule(
            "acronym_ctx",
            (rf"(?P<t>{m['ACRO']}\.){m['SPACENLS']}{acronym_ctx}{SPACENL}",),
            "acronym",
            first="A-Za-z",
        ),
        Rule("abbrev3_ctx", (rf"(?P<t>{m['ABBREV3']}){SPACENL}?{m['JD']}",), first="A-Za-z"),
        Rule("pty_ltd", (rf"(?P<t>(?:(?i:pt)[eyEY]|(?i:co))\.){SPACE}(?i:ltd|lim)",), first="pPcC"),
        Rule(
            "abbrev1_sentend",
            (rf"(?P<t>{m['ABBREV1']}){SPACENL}(?:{SPACENL}|{m['UPPER']}|{m['SGML']})",),
            "back1keep",
            first="A-Za-z",
        ),
        Rule("abbrev1_ctx", (rf"(?P<t>{m['ABBREV1']})[\s\S][\s\S]",), first="A-Za-z"),
        Rule("abbrev1", (m["ABBREV1"],), "back1keep", first="A-Za-z"),
        Rule("abbrev2", (rf"{m['ABBREV4']}\.",), first="A-Za-z"),
        Rule("abbrev4_ctx", (rf"(?P<t>{m['ABBREV4']}){SPACE}",), first="A-Za-z"),
        Rule("acro_ctx", (rf"(?P<t>{m['ACRO']}){SPACENL}",), first="A-Za-z"),
        Rule("tbspec2_ctx", (rf"(?P<t>{APOS}[0-9][0-9]){SPACENL}",), first=apos_first),
        Rule(
            "filename_ctx",
            (rf"(?P<t>{LD}+(?:\.{LD}+)*\.{filename_ext})(?:{SPACENL}|[.?!,])",),
            first=letter_first + ld_first,
        ),
        Rule("word_period_ctx", (rf"(?P<t>{WORD}\.){INSENTP}",), "softhyph", first=letter_first),
        Rule(
            "phone",
            (
                rf"\([0-9]{{2,3}}\)[ \u00a0]?{phone_tail}",
                rf"(?:\+\+?)?[0-9]{{2,4}}[\- \u00a0][0-9]{{2,4}}[\- \u00a0]{phone_tail}",
                rf"(?:\+\+?)?[0-9]{{2,4}}[\- \u00a0]{phone_tail}",
                r"(?:(?:\+\+?)?[0-9]{2,4}\.)?[0-9]{2,4}\.[0-9]{3,4}\.[0-9]{3,5}",
            ),
            "phone",
            firsts=("(", "+0-9", "+0-9", "+0-9"),
        ),
        Rule("dblquot_ctx", (r'(?P<t>"|(?i:&quot;))[A-Za-z0-9$]',), "lquote", first='"&'),
        Rule("dblquot", (r'"|(?i:&quot;)',), "rquote", first='"&'),
        Rule("del", ("\u007f",), "delete", first="\u007f"),
        Rule("lessthan", ("<|(?i:&lt;)",), "lt", first="<&"),
        Rule("greaterthan", (">|(?i:&gt;)",), "gt", first=">&"),
        Rule(
            "smiley_ctx",
            (r"(?P<t>[<>]?[:;=][\-o*']?[()DPdpO\\{@|\[\]])[^A-Za-z0-9]",),
            "parens",
            first="<>:;=",
        ),
        Rule(
            "asiansmiley",
            (
                r"[\^x=~<>]\.\[\^(?i:x)=~<>\]",
                r"[\-\^x=~<>']_[\-\^x=~<>']",
                r"\([\-\^x=~<>'][_.]?[\-\^x=~<>']\)",
                r"\([\^x=~<>']-[\^x=~<>'`]\)",
            ),
            "parens",
            firsts=("\\^x=~<>", "\\-\\^x=~<>'", "(", "("),
        ),
        Rule("lcb", (r"\{",), "lcb", first="{"),
        Rule("rcb", (r"\}",), "rcb", first="}"),
        Rule("lsb", (r"\[",), "lsb", first=r"\["),
        Rule("rsb", (r"\]",), "rsb", first=r"\]"),
        Rule("lrb", (r"\(",), "lrb", first="("),
        Rule("rrb", (r"\)",), "rrb", first=")"),
        Rule("hyphens", (r"-+",), "hyphens", first="-"),
        Rule(
            "ldots",
            (r"\.{3,5}", r"(?:\.[ \u00a0]){2,4}\.", "[\u0085\u2026]"),
            "ellipsis",
            firsts=(".", ".", "\u0085\u2026"),
        ),
        Rule("fnmarks", ("@+", "#+", "_+"), firsts=("@", "#", "_")),
        Rule("asts", (r"\*+", r"(?:\\\*){1,3}"), firsts=("*", "\\\\")),
        Rule("insentp", (INSENTP,), first=",;:\u3001"),
        Rule("qe", (r"[?!]+",), first="?!"),
        Rule(
            "period",
            ("[.\u00a1\u00bf\u037e\u0589\u061f\u06d4\u0700-\u0702\u07fa\u3002]",),
            first=".\u00a1\u00bf\u037e\u0589\u061f\u06d4\u0700-\u0702\u07fa\u3002",
        ),
        Rule("equals", ("=",), first="="),
        Rule("slash", ("/",), first="/"),
        Rule("hthing_period_ctx", (rf"(?P<t>{hthing}\.){INSENTP}",), "softhyph", first="A-Za-z0-9"),
        Rule("hthing", (hthing,), "softhyph", first="A-Za-z0-9"),
        Rule(
            "thing_period_ctx",
            (rf"(?P<t>{thing}(?:{HYPHEN}{thing})*\.){INSENTP}",),
            first=ld_first,
        ),
        Rule("thing", (rf"{thing}(?:{HYPHEN}{thing})*",), first=ld_first),
        Rule("thinga_period_ctx", (rf"(?P<t>{thinga}\.){INSENTP}",), "amp", first="A-Z"),
        Rule("thinga", (thinga,), "amp", first="A-Z"),
        Rule("quote_ctx", (r"(?P<t>')[A-Za-z][^ \t\n\r\u00a0]",), "lquote", first="'"),
        Rule("redaux", (m["REDAUX"],), "rquote", first=apos_first),
        Rule("sredaux", (m["SREDAUX"],), "rquote", first="nN"),
        Rule(
            "quotes",
            (
                APOS,
                "''",
                "[`\u2018\u2019\u201a\u201b\u201c\u201d\u0091\u0092\u0093\u0094\u201e\u201f"
                "\u2039\u203a\u00ab\u00bb]{1,2}",
            ),
            "rquote",
            first="'&`\u2018\u2019\u201a\u201b\u201c\u201d\u0091-\u0094\u201e\u201f\u2039\u203a"
            "\u00ab\u00bb",
        ),
        Rule("duckfeet", ("<<|>>",), first="<>"),
        Rule("miscsymbol", (f"[{_MISCSYMBOL}]",), first=_MISCSYMBOL),
        Rule(
            "space",
            ("\u0000", f"[{_SPACE}]+", "[\u200b\u200e\u200f\ufeff]"),
            "delete",
            first=f"\u0000{_SPACE}\u200b\u200e\u200f\ufeff",
        ),
        Rule("newline", (f"[{_NEWLINE}]",), "delete", first=_NEWLINE),
        Rule("nbsp_entity", ("(?i:&nbsp;)",), "delete", first="&"),
    ]


_APOS_CHARS = "'\u0092\u2019&"
_APOSETC_CHARS = "'\u0092\u2019`\u0091\u2018\u201b&"
_HYPHEN_CHARS = "\\-_\u058a\u2010\u2011"
# For the rules that can start with a letter or digit: the characters that can follow a leading
# run of letters and digits within a longer match of the rule ("" when none can). At a run
# followed by another character, only the rules that list it can beat WORD or THING on the run.
JOINS = {
    "cpp": "+",
    "csharp": "#",
    "cannot": "",
    "assim": "",
    "word_redaux": f".!?{_APOS_CHARS}{LETTER_EXTRA}",
    "sword_sredaux": f"{_APOSETC_CHARS}\u00ad",
    "word": f".!?&{LETTER_EXTRA}",
    "apoword": _APOSETC_CHARS,
    "apoword2": _APOS_CHARS,
    "fullurl": ":",
    "sredaux_ctx": _APOSETC_CHARS,
    "sredaux": _APOSETC_CHARS,
    "date": "\\-/",
    "number": ".:,\u00ad\u066b\u066c",
    "frac": "\\- \u00a0/\\\\\u2044",
    "tbspec": f".\\-{_APOS_CHARS}",
    "thing3": "\\-/\\\\",
    "dolsign": "$",
    "acronym_ctx": ".\\-",
    "abbrev3_ctx": ".",
    "pty_ltd": ".",
    "abbrev1_sentend": ".",
    "abbrev1_ctx": ".",
    "abbrev1": ".",
    "abbrev2": ".\\-",
    "abbrev4_ctx": ".\\-",  # (or a space: the same token as WORD)
    "acro_ctx": ".\\-",  # (or a space or line break: the same token as WORD)
    "filename_ctx": f".&{LETTER_EXTRA}",
    "word_period_ctx": f".!?&{LETTER_EXTRA}",
    "phone": "\\- \u00a0.",
    "asiansmiley": "._",
    "hthing_period_ctx": ".,\u00ad\\-",
    "hthing": ".,\u00ad\\-",
    "thing_period_ctx": f".{_HYPHEN_CHARS}{_APOSETC_CHARS}",
    "thing": f"{_HYPHEN_CHARS}{_APOSETC_CHARS}",
    "thinga_period_ctx": ".+&",
    "thinga": "+&",
    "miscsymbol": "",
}
# The characters from U+3000 up that some rule's first characters or JOINS name one by one (the
# others there are in them only as letters or digits: kana, CJK, Hangul, full-width digits).
EXPLICIT_FROM_3000 = (
    "\u3000-\u3002\u3012\u30fb\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65\ufeff"
    "\uffe0\uffe1\uffe5\uffe6"
)
# Characters that are a token (or deleted) on their own whatever follows: no rule that starts
# with them matches more. Without URL rules more are: LIKELYURL may start with them.
SINGLES_ASCII = ")\\[\\]{}/|$"  # (a class body)
SINGLES_NO_URL = (
    "%\u00a2-\u00a5\u2026\u2013-\u2015\u00a6\u00a7\u00a9\u00ac\u00ae\u00b0\u00b1\u00d7\u00f7"
    "\u2190-\u21ff\u2200-\u2bff\ud800-\udfff"
)
