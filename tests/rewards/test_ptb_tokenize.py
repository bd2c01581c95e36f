"""The pure-Python PTB tokenizer against pycocoevalcap's Java PTBTokenizer.

``fixtures/ptb_tokens.json`` holds Java's tokens for a caption corpus with the punctuation cases
that matter (regenerate: ``.venv/bin/python scripts/make_ptb_fixture.py``); the slow tests re-run
Java on it, on several thousand captions of a seeded grammar (numbers, hyphens, apostrophes,
quotes, brackets, Unicode letters and ligatures, emoji ...) and on every BMP character, each in
one JVM call through that script's ``java_tokens`` (pycocoevalcap's own ``PTBTokenizer``).

In the toolkit's batch a caption is followed by the next caption; Java's scanner looks across
that line break in two rare cases (a final one-letter acronym before a sentence-start word, a
final ``No.`` before a digit, see :mod:`vlrollout.rewards.ptb_tokenizer`). The generated batch
therefore puts a line ``x`` after each caption, the context :func:`ptb_tokenize` assumes.
"""

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge

from vlrollout.rewards.caption import CaptionReward
from vlrollout.rewards.cider import cider_d_corpus
from vlrollout.rewards.java_lowercase import java_lower
from vlrollout.rewards.ptb_lexer import RuleTable, lex
from vlrollout.rewards.ptb_tokenizer import ptb_raw_tokens, ptb_tokenize

FIXTURE = Path(__file__).parent / "fixtures" / "ptb_tokens.json"
RECORDS = json.loads(FIXTURE.read_text())
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
needs_java = pytest.mark.skipif(
    shutil.which("java") is None, reason="needs java (apt install default-jre)"
)


def _java_tokens(texts: list[str]) -> list[list[str]]:
    """pycocoevalcap's PTBTokenizer (Java) on ``texts``, one JVM call (the fixture script's)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        from make_ptb_fixture import java_tokens
    finally:
        sys.path.remove(str(SCRIPTS))
    return java_tokens(texts)


def _java_tokens_alone(texts: list[str]) -> list[list[str]]:
    """Java's tokens of each text followed by the line ``x`` (see the module docstring)."""
    return _java_tokens([line for t in texts for line in (t, "x")])[0::2]


def _first_differences(texts: list[str], java: list[list[str]], limit: int = 10) -> list[str]:
    out = []
    for text, tokens in zip(texts, java, strict=True):
        ours = ptb_tokenize(text)
        if ours != tokens:
            out.append(f"{text!r}\n  java: {tokens}\n  ours: {ours}")
            if len(out) == limit:
                break
    return out


def test_fixture_matches_java():
    assert _first_differences([r["text"] for r in RECORDS], [r["tokens"] for r in RECORDS]) == []


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("1,000 at 10:30", ["1,000", "at", "10:30"]),
        ("$5", ["$", "5"]),
        ("(red)", ["-lrb-", "red", "-rrb-"]),
        ("gonna", ["gon", "na"]),
        ("50% #1 & C++", ["50", "%", "#", "1", "&", "c++"]),
        ("the '90s rock'n'roll", ["the", "'90s", "rock", "'n'", "roll"]),
        ("ﬁsh", ["ﬁsh"]),  # no NFKC in CoreNLP 3.4.1
        # Each of the following was a difference from Java (tokens as Java gives them).
        ("a 3.5-acre lot", ["a", "3.5-acre", "lot"]),  # HTHING: number, hyphen, word
        ("man_with a hat", ["man_with", "a", "hat"]),  # "_" joins THING like a hyphen
        ("a 1 1/2 inch pipe", ["a", "1", "1/2", "inch", "pipe"]),  # one token "1\xa01/2"
        ("a dog., a cat", ["a", "dog.", "a", "cat"]),  # WORD "." before , ; :
        ("I. The dog", ["i", "the", "dog"]),  # one-letter acronym before a sentence start
        ("A. THERE", ["a", "there"]),  # ([T]here: the first letter upper-case, the rest any)
        ("us$5 US$5", ["us", "$", "5", "us$", "5"]),  # [A-Z]*$ is case-sensitive
        ("x 'sa", ["x", "sa"]),  # trailing context counts: ` then sa
        ("plate..", ["plate"]),  # two periods are two tokens, not "..."
        ("gonna's cannotn't", ["gonna", "'s", "cannot", "n't"]),  # longer rules win
        ("ınc. x", ["ınc.", "x"]),  # caseless literals match "ı" for "i"
        ("&QUOT;hi&quot;", ["&quot;", "hi"]),  # only lower-case entities are quotes
        ("a hat \U0001f600 \u2764 here", ["a", "hat", "\u2764", "here"]),  # emoji deleted
        ("http://\U0001f600", ["http://\U0001f600"]),  # two UTF-16 units satisfy the URL
        ("x \u00a0.comB", ["x", "comb"]),  # the space run took the no-break space
        ("a\u0528a", ["a", "a"]),  # a letter newer than the lexer's tables: deleted
        ("ΟΔΟΣ4x4 ΟΔΟΣ", ["οδοσ4x4", "οδος"]),  # Java's final-sigma rule
        ("He’ll.com HE'S.com", ["he", "’ll.com", "he", "'s", "com"]),  # a URL may start with ’
    ],
)
def test_examples(text, tokens):
    assert ptb_tokenize(text) == tokens


@pytest.mark.parametrize(
    ("token", "lower"),
    [
        ("ΟΔΟΣ4x4", "οδοσ4x4"),  # digits join the word: a letter follows
        ("ΟΔΟΣ", "οδος"),
        ("a_Σ", "a_ς"),  # "_" is mid-word
        ("ΟΔΟΣ1_a", "οδος1_a"),  # but not after a number
        ("ΟΔΟΣª", "οδοςª"),  # "ª" is a letter, not cased
        ("Σ।²Σ", "σ।²ς"),  # a danda ends a word that numbers continue
        ("ǅ'\u200dΣ", "ǆ'\u200dς"),  # format characters are ignored
        ("ΣアΣ", "σアσ"),  # kana are no letters
    ],
)
def test_java_lower(token, lower):
    assert java_lower(token) == lower


# --- A seeded grammar of caption-like text with the cases where tokenizers differ. ---
_WORDS = (
    "a an the man woman dog cat person group people sitting standing on in with of and near next "
    "to table street car bus train pizza plate food red blue green white black large small young "
    "old two three several holding riding playing looking at is are it this that there he she "
    "they we you i one no st dr mr co ca fig pty ltd vs us etc al art op pp sq ft mt"
).split()
_NUMBERS = (
    "1 7 12 100 2014 3.5 .5 0.25 1/2 3/4 ½ ¼ ¾ ⅓ ⅛ 1,000 12,500 1,000,000 -5 +3 10:30 10:30:45 "
    "2014-05-01 5/12/2014 1990s '90s 1st 2nd 3.5-acre 5-year-old 10-foot 2x4 4x4 3D 3-D 50% $5 "
    "$1.50 US$5 €5 £3 5¢ ¥100 555-1234 3.14.15 1.000.000 ² x² 0 ٣ 1-2 1--2 9/11 24/7 1.5x 100-200 "
    "#1 No.1 5'10\""
).split() + ["1 1/2", "2-1/2", "(555) 123-4567", "No. 7", "no. 5", "12 345 6789", "3 1/2s"]
_HYPHENS = (
    "well-known t-shirt mother-in-law x-ray - -- --- ---- ----- a- -b pro- anti-war e-mail co-op "
    "-LRB- U.S.-led non-U.S. self- ‐ ‑ — – ― a—b re-use 3-in-1"
).split()
_UNDERSCORES = "man_with _ __ snake_case_word _x x_ a_1 1_a o_o ^_^ -_-".split()
_APOSTROPHES = (
    "dog's dogs' don't can't won't isn't it's I'm you're they've we'll she'd o'clock O'Neil "
    "rock'n'roll 'n' y'all 'tis 'twas ma'am 'em 'cause 'til D'Angelo l'eau dog’s don’t DON'T "
    "Don’t it’s 's n't ' '' ’ ‘ 'd 'll y'know c'mon cont'd nor'easter li'l ol' mann't ton'tin '90 "
    "Cap'n c'est shi'ite a'b 'a a' L' d' o' &apos;s it&apos;s gonna wanna gotta lemme gimme "
    "cannot Cannot GONNA gonnas cannots gonna's"
).split() + ["rock 'n' roll"]
_UNICODE = (
    "café naïve straße ﬁsh ﬂower résumé Ærø ΟΔΟΣ кот 猫 ete\u0301 Ünïcödé ﬀ œuvre ﬁ ß é ǅ ª µ ı "
    "İstanbul ŉ ınc. mſ. ſt. \u212ay."
).split()
_QUOTES = ['"', "'", "“", "”", "‘", "’", "`", "``", "''", "«", "»", "„", "‚", "‹", "›", "&quot;"]
_BRACKETS = "( ) [ ] { } < > <b> </b> << >> -LRB- -RRB-".split()
_PUNCT = (
    ". , ! ? ; : ... -- … & / $ % # @ * + = ~ ^ | \\ ?! !!! ?? .. .... ** &amp; § ° © ® ™ ± × ÷ "
    "→ € £ ¢ ¥ ¿ ¡ 、 。 • ·"
).split() + [". . ."]
_EMOJI = [
    "😀",
    "🐶",
    "🍕",
    "❤",
    "✨",
    "👍",
    "🇺🇸",
    "👨\u200d👩\u200d👧",
    "☕",
    "⚽",
    "❤️",
    "\U0001d400",
]
_SPECIAL = (
    "Mr. Dr. St. etc. U.S. a.m. p.m. e.g. i.e. vs. No. approx. Jan. Inc. A. I. B. Co. Pty. Ltd. "
    "Calif. Mass. C++ AT&T Q&A R&D S&P #hashtag @user x.com www.example.com me@example.com "
    "http://x.org/a?b=c :) :-( ;) :D :P =) file.jpg photo.png a.b.c A.B.C. dots.in.middle dog?Yes "
    "Ph.D. Jr. ca. Fig. c# f# x.y U.K. &eacute; caf&eacute; 5' x&y &nbsp; dog., etc.,"
).split()
_POOLS = [(_WORDS, 40), (_NUMBERS, 8), (_HYPHENS, 5), (_UNDERSCORES, 3), (_APOSTROPHES, 8),
          (_UNICODE, 4), (_QUOTES, 5), (_BRACKETS, 4), (_PUNCT, 10), (_EMOJI, 2), (_SPECIAL, 6)]  # fmt: skip
_WRAPS = [('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("`", "'"), ("``", "''"), ("(", ")"),
          ("[", "]"), ("{", "}"), ("«", "»"), ("*", "*"), ("_", "_")]  # fmt: skip
_ENDINGS = [".", "!", "?", "...", " .", ".'", '."', ".)", ""]


def _piece(rng: random.Random) -> str:
    pool = rng.choices([p for p, _ in _POOLS], [w for _, w in _POOLS])[0]
    piece = rng.choice(pool)
    case = rng.random()
    if case < 0.1:
        piece = piece.capitalize()
    elif case < 0.13:
        piece = piece.upper()
    if rng.random() < 0.06:
        left, right = rng.choice(_WRAPS)
        piece = left + piece + right
    return piece


def generated_captions(n: int, seed: int = 0) -> list[str]:
    """``n`` caption-like strings: grammar pieces joined by a space, nothing (glued, as in
    ``dog,`` or ``man's(red)``) or two spaces, sometimes with a final punctuation mark."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [_piece(rng)]
        for _ in range(rng.randint(0, 13)):
            parts.append(rng.choices(["", " ", "  "], [30, 66, 4])[0] + _piece(rng))
        if rng.random() < 0.5:
            parts.append(rng.choice(_ENDINGS))
        out.append("".join(parts))
    return out


def _soup(n: int, seed: int) -> list[str]:
    """Random strings of letters, digits, punctuation and pieces that start special rules."""
    rng = random.Random(seed)
    alphabet = list("aAbBcCdDeEiIlLmMnNoOpPsStTuUxXyYzZ0123456789" * 2 + " " * 30)
    alphabet += list(".,;:!?'\"`-_/\\()[]{}<>@#$%^&*+=~|") + [
        "’", "‘", "“", "”", "é", "ß", "ﬁ", "½", "…", "—", "\u00a0", "Σ", "&amp;", "&apos;", "n't",
        "'s", "www.", ".com", "http://", "cannot", "gonna", "No.", "U.S.", "etc.", "Mr.", "pty.",
        " ltd", " The ", " A ", "file.jpg", "3.5-acre", "1 1/2", "Calif.", "mfg.", "x.[", "\u0301",
        "\u00ad", "→", "❤", "§", "°", "×", "£", "€", "%%", "$$", ")))", "[[", "–", "²", "µ", "ınc.",
        "mſ.", "\u212ay.", "'re", "’ll", "'S", "'d'", "’s", "&quot;", "<b>", "www.x.org",
    ]  # fmt: skip
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def test_fast_paths_equal_the_exhaustive_lexer():
    """Chunk memo, plain-word paths, first-character dispatch and the lexer's shortcuts give
    the tokens of trying every rule at every position."""
    exhaustive = RuleTable(amp=True, at=True, url=True, exhaustive=True)
    texts = _soup(400, seed=1) + [t for t in generated_captions(300, seed=2) if t.isascii()]
    differ = []
    for text in texts:
        raw: list[str] = []
        lex(text + "\n", 0, len(text), exhaustive, raw)
        if ptb_raw_tokens(text) != [java_lower(t) for t in raw]:
            differ.append(text)
    assert differ == []


@pytest.mark.slow
@pytest.mark.parametrize("flags", [(False, False, False), (True, True, True)])
def test_dispatch_by_kind_equals_dispatch_by_character(flags):
    """From U+3000 up the dispatch treats characters no rule names by kind (letter, digit,
    other); every BMP character there gets the patterns and JOINS its own first character and
    next character would give."""
    table = RuleTable(*flags)
    joins_of_kind: dict[str, list[bool]] = {}
    differ = []
    for code in range(0x3000, 0x10000):
        ch = chr(code)
        dispatched = [(r.index, [p.pattern for p, _ in r.patterns]) for r in table.candidates(ch)]
        own = []
        for rule, firsts in zip(table.rules, table._firsts, strict=True):
            patterns = [p.pattern for (p, _), f in zip(rule.patterns, firsts, strict=True)
                        if f is None or f.match(ch)]  # fmt: skip
            if patterns:
                own.append((rule.index, patterns))
        joins = [j is None or j.match(ch) is not None for j in table._joins]
        if dispatched != own or joins_of_kind.setdefault(table._key(ch), joins) != joins:
            differ.append(hex(code))
    assert differ == []


@pytest.fixture(scope="module")
def generated_with_java():
    texts = generated_captions(5000, seed=0)
    return texts, _java_tokens_alone(texts)


@pytest.mark.slow
@needs_java
def test_tokens_equal_java_on_generated_captions(generated_with_java):
    texts, java = generated_with_java
    differ = _first_differences(texts, java)
    assert differ == [], "first differences from Java:\n" + "\n".join(differ)


@pytest.mark.slow
@needs_java
def test_cider_d_on_raw_generated_captions_equals_pycocoevalcap(generated_with_java):
    """Raw captions through our CIDEr-D (corpus mode and the reward) against pycocoevalcap's
    PTBTokenizer + Cider: images of one candidate and four references."""
    texts, java = generated_with_java
    kept = [(t, " ".join(k)) for t, k in zip(texts, java, strict=True) if k]
    groups = [kept[i : i + 5] for i in range(0, len(kept) - 4, 5)]
    cands = [g[0][0] for g in groups]
    refs = [[t for t, _ in g[1:]] for g in groups]
    gts = {i: [j for _, j in g[1:]] for i, g in enumerate(groups)}
    res = {i: [g[0][1]] for i, g in enumerate(groups)}
    coco = Cider().compute_score(gts, res)[1]
    ours = cider_d_corpus(cands, refs)
    assert max(abs(a - b) for a, b in zip(ours, coco, strict=True)) <= 1e-9
    reward = CaptionReward("cider_d", corpus=refs)
    scores = [reward("p", c, [], [], captions=r) for c, r in zip(cands, refs, strict=True)]
    assert max(abs(a - b) for a, b in zip(scores, coco, strict=True)) <= 1e-9


@pytest.mark.slow
@needs_java
def test_every_bmp_character_tokenizes_as_in_java():
    """Character classes (Java's letters and digits of 2014, symbols, spaces) by context."""
    skip = set("\n\r\u000b\u000c\u0085\u2028\u2029")  # line breaks: new lines in Java
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF and chr(c) not in skip]
    texts = [f"a{c}a {c} 1{c}1 {c}{c}b" for c in chars]
    differ = _first_differences(texts, _java_tokens_alone(texts))
    assert differ == [], "first differences from Java:\n" + "\n".join(differ)


_JAVA_LOWER = """
import java.nio.file.*;
import java.util.Locale;
public class Lower {
  public static void main(String[] a) throws Exception {
    for (String s : Files.readAllLines(Paths.get(a[0])))
      System.out.println(s.toLowerCase(Locale.ENGLISH));
  }
}
"""


@pytest.mark.slow
@needs_java
def test_java_lower_equals_java_on_sigma_words(tmp_path):
    rng = random.Random(0)
    alphabet = ["Σ"] * 6 + list("aAbZ19_-.'\",%&#$¢€:·–!") + [
        "é", "ª", "\u0301", "\u20dd", "ǅ", "٫", "猫", "ア", "ぁ", "゛", "Ⅳ", "ʰ", "Ω", "ς", "\u200d",
        "\u0903", "½", "²", " ", "\u0964", "\u2027", "\u066a",
    ]  # fmt: skip
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9))) for _ in range(20000)]
    words = [w for w in words if "Σ" in w]
    source, data = tmp_path / "Lower.java", tmp_path / "words.txt"
    source.write_text(_JAVA_LOWER)
    data.write_text("\n".join(words) + "\n", encoding="utf-8")
    run = subprocess.run(
        ["java", str(source), str(data)], capture_output=True, text=True, encoding="utf-8"
    )
    if run.returncode != 0:
        pytest.skip(f"java cannot run a source file (a JRE without a compiler?): {run.stderr}")
    java = run.stdout.split("\n")[: len(words)]
    differ = [(w, j, java_lower(w)) for w, j in zip(words, java, strict=True) if java_lower(w) != j]
    assert differ[:10] == []


def _images():
    """Captions of the fixture grouped into images of 4 references + 1 candidate."""
    texts = [r["text"] for r in RECORDS if r["tokens"]]
    java = {r["text"]: " ".join(r["tokens"]) for r in RECORDS}
    groups = [texts[i : i + 5] for i in range(0, len(texts) - 4, 5)]
    return groups, java


def test_caption_metrics_on_raw_text_equal_pycocoevalcap_on_java_tokens():
    groups, java = _images()
    cands = [g[0] for g in groups]
    refs = [g[1:] for g in groups]
    gts = {i: [java[r] for r in rs] for i, rs in enumerate(refs)}
    res = {i: [java[c]] for i, c in enumerate(cands)}
    coco_cider = Cider().compute_score(gts, res)[1]
    ours = cider_d_corpus(cands, refs)
    assert max(abs(a - b) for a, b in zip(ours, coco_cider, strict=True)) <= 1e-12
    rouge = Rouge().compute_score(gts, res)[1]
    bleu = Bleu(4).compute_score(gts, res, verbose=0)[1][3]
    for i, (c, r) in enumerate(zip(cands, refs, strict=True)):
        assert CaptionReward("rouge_l")("p", c, [], [], captions=r) == pytest.approx(rouge[i])
        assert CaptionReward("bleu4")("p", c, [], [], captions=r) == pytest.approx(bleu[i])


@pytest.mark.slow
@needs_java
def test_java_ptb_tokenizer_still_gives_the_fixture():
    sys.path.insert(0, str(SCRIPTS))
    try:
        from make_ptb_fixture import corpus
    finally:
        sys.path.remove(str(SCRIPTS))
    texts = corpus()
    assert texts == [r["text"] for r in RECORDS], "corpus changed: regenerate the fixture"
    java = _java_tokens(texts)
    assert java == [r["tokens"] for r in RECORDS]
    assert _first_differences(texts, java) == []
