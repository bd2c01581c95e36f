"""Generate ``tests/rewards/fixtures/ptb_tokens.json``: pycocoevalcap's PTBTokenizer (Java) output.

Run: ``.venv/bin/python scripts/make_ptb_fixture.py`` (needs ``java`` on PATH; apt's default JRE
works). It tokenizes the caption corpus below with pycocoevalcap's own ``PTBTokenizer`` (Stanford
CoreNLP 3.4.1, ``-preserveLines -lowerCase``, then its punctuation filter) and writes one
``{"text", "tokens"}`` record per caption. ``tests/rewards/test_ptb_tokenize.py`` compares the pure
Python :func:`vlrollout.rewards.ptb_tokenizer.ptb_tokenize` with the file, and re-runs Java on the
same corpus as a slow test when Java is present. Review the diff of the JSON before committing.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "rewards" / "fixtures" / "ptb_tokens.json"

# Punctuation cases, then ordinary caption text, then harder cases.
HAND = [
    "A man with 1,000 dollars at 10:30.",
    "$5 for a (red) hat.",
    "They are gonna win 50% of the #1 games & more.",
    "He codes in C++ since the '90s.",
    "A rock'n'roll band on stage.",
    "A ﬁsh in the ﬂower pot.",
    "A dog's toy and the dogs' bowls.",
    "Don't stop, can't stop, won't stop; I cannot.",
    'He said "hello" to the man.',
    "A 'quoted' word and a `backtick' one.",
    "Two people -- a man and a woman -- walk.",
    "A cat... sitting on a mat...",
    "Wait! What?! No!!!",
    "A sign reads: STOP.",
    "A 5-year-old boy with a 10-foot pole.",
    "The U.S. flag flies at 5 p.m. near Mr. Smith's house.",
    "E.g. a bus, i.e. a vehicle, etc.",
    "A man in the U.S.",
    "Colour and flavour of the theatre.",
    "1/2 of a pizza and 3/4 of a cake.",
    "£5 or €5 or ¥5 or 5¢.",
    "A bowl of fruit {apples} and [pears].",
    "x*y and a/b and a\\b.",
    "Visit www.example.com or mail me@example.com or http://x.org/a?b=c.",
    "Smiley :) and :( and ;-)",
    "wanna gotta lemme gimme",
    "O'Neil and D'Angelo met O'Brien.",
    "It's 3.5 or .5 or -5 or +5 degrees.",
    "I'm, you're, they've, we'll, she'd.",
    "A  caption   with    extra   spaces.",
    "   leading and trailing spaces   ",
    "",
    "ALL CAPS CAPTION.",
    "A man's, a woman's and children's things.",
    "Tom & Jerry; Bob & Alice.",
    "A sign that says 'no parking'.",
    "3 x 4 = 12, 2+2=4 and 5 > 3 < 7.",
    "A #hashtag and @mention.",
    "Temperature is 20°C or 68°F.",
    "Café crème and naïve résumé.",
    "A 1920s car, the 1990's fashion.",
    "Room 101-B, apt. 5, No. 7.",
    "A photo taken on 2014-05-01 at 12:30:45.",
    "It costs $1.50, $20 or $3,000.50.",
    "A sign: 'Beware of dog!'",
    "Hello?? Really?!",
    "A -- dash and a - hyphen and a — em dash and – en dash.",
    "Ellipsis … unicode.",
    "“Curly quotes” and ‘single curly’ quotes.",
    "A man\u00a0with a non-breaking space.",
    "A tab\tseparated caption.",
    "The ca. 1900 house.",
    "Jr. and Sr. and Dr. and St. and Mt. Everest.",
    "A cat (a big one) sits (quietly).",
    "Ya'll gotta see y'all.",
    "He's gonna 'splain it.",
    "cannot CANNOT Cannot",
    "GONNA Wanna",
    "the 80s, the '80s, the 80's",
    "A b-52 and an f/a-18.",
    "A 4x4 truck and a 2x2 grid.",
    "A 50/50 chance.",
    "A mother-in-law's car.",
    "Is it a dog?Yes.",
    "end with comma,",
    "end with colon:",
    "dots.in.the.middle",
    "A.B.C. and a.b.c",
    "A man, a plan, a canal: Panama!",
    "A 3D movie, a 3-D movie.",
    'He said, "It\'s fine."',
    '"Quote at start" of line.',
    "Price: 10% off!",
    "The year 2,014 vs 2014.",
    "Numbers like 1.000.000 and 1 000 000.",
    "fractions ½ ¼ ¾",
    "A toy's wheels' colours.",
    "Lol :-) :-( :P :D",
    "A person's iPhone and iPad.",
    "A-B testing and A/B testing.",
    "AT&T and Q&A and R&D.",
    "5'10\" tall man.",
    "It was the '60s and '70s.",
    "Y'know what?",
    "Gimme that.",
    "'Tis the season.",
    "Whaddya want?",
    "D'ye see it?",
    "More'n enough.",
    "A <b>bold</b> word and 5 <3 hearts.",
    "$$$ and %% and &&& and ===",
]

WORDS = (
    "a man woman dog cat person group people sitting standing on the in with of and near "
    "next to table street car bus train pizza plate food red blue green white black large "
    "small young old two three several holding riding playing looking at"
).split()
PUNCT = [
    ",",
    ".",
    ";",
    ":",
    "!",
    "?",
    "'s",
    "n't",
    "...",
    "--",
    "-",
    "(",
    ")",
    '"',
    "'",
    "&",
    "$",
    "%",
    "#",
    "/",
    "*",
    "+",
    "=",
    "1,000",
    "10:30",
    "3.5",
    "'90s",
    "[",
    "]",
    "{",
    "}",
]


def generated(n: int = 300, seed: int = 0) -> list[str]:
    """Random caption-like strings mixing words, numbers and punctuation (seeded)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(4, 14)):
            tok = rng.choice(WORDS) if rng.random() < 0.7 else rng.choice(PUNCT)
            if rng.random() < 0.15:
                tok = tok.capitalize()
            glue = "" if rng.random() < 0.3 else " "
            parts.append(glue + tok)
        out.append("".join(parts).strip())
    return out


def corpus() -> list[str]:
    return HAND + generated()


def java_tokens(texts: list[str]) -> list[list[str]]:
    """pycocoevalcap's PTBTokenizer on ``texts`` (one caption per image id)."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    # pycocoevalcap drops nothing for empty captions but Java drops empty lines at the end;
    # a placeholder keeps the line alignment and is removed again below.
    safe = [t if t.strip() else "EMPTYCAPTIONPLACEHOLDER" for t in texts]
    got = PTBTokenizer().tokenize({i: [{"caption": t}] for i, t in enumerate(safe)})
    out = []
    for i, t in enumerate(safe):
        toks = got[i][0].split()
        out.append([] if t == "EMPTYCAPTIONPLACEHOLDER" else toks)
    return out


def main() -> int:
    texts = corpus()
    tokens = java_tokens(texts)
    records = [{"text": t, "tokens": k} for t, k in zip(texts, tokens, strict=True)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(records, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(records)} captions to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
