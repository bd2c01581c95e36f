"""Deterministic caption tokenizer, a simple pure-Python stand-in for the COCO PTB tokenizer.

Not the default of the caption metrics: :func:`.ptb_tokenizer.ptb_tokenize` reproduces
pycocoevalcap's ``PTBTokenizer`` output, which this one does not on punctuation-heavy text (about
half of a set of COCO-like images scored differently with it). Kept for callers that choose it.

The COCO caption toolkit (``pycocoevalcap.tokenizer.ptbtokenizer``) runs Stanford CoreNLP's
``PTBTokenizer`` in Java with ``-lowerCase`` and then drops punctuation tokens. That needs a JVM and
a subprocess per call, which a per-sample reward cannot afford. :func:`tokenize` reproduces the parts
that matter for n-gram metrics on captions:

- Unicode NFKC normalisation, lower-casing, curly quotes mapped to ASCII;
- PTB-style clitic splitting: ``don't`` -> ``do n't``, ``man's`` -> ``man 's``
  (also ``'re``, ``'ve``, ``'ll``, ``'d``, ``'m``);
- words are runs of letters/digits, optionally joined by ``-``, ``.``, ``/`` or ``'`` inside the
  word (``black-and-white``, ``3.5``, ``24/7`` stay one token, as in PTB);
- everything else (punctuation, symbols, underscores) is dropped, like the toolkit's punctuation
  filter.

Known differences from CoreNLP: ``cannot`` stays one token (PTB splits ``can not``), ``can't`` becomes
``ca n't`` only because PTB does the same; abbreviations with a trailing period (``u.s.``) lose the
final period. Both sides of every comparison use the same tokenizer, so metric values stay
comparable.

>>> tokenize("A man's dog, running -- don't stop!")
['a', 'man', "'s", 'dog', 'running', 'do', "n't", 'stop']
"""

from __future__ import annotations

import re
import unicodedata

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "`": "'"})
_NT = re.compile(r"(?<=[^\W_])n't\b")
_CLITIC = re.compile(r"(?<=[^\W_])'(s|re|ve|ll|d|m)\b")
_TOKEN = re.compile(r"n't|'(?:s|re|ve|ll|d|m)\b|[^\W_]+(?:[-./'][^\W_]+)*")


def tokenize(text: str) -> list[str]:
    """Split a caption into lower-cased word tokens without punctuation.

    Args:
        text: Any string; non-strings are converted with ``str``.

    Returns:
        The list of tokens (possibly empty).

    >>> tokenize("Two dogs play in the 3.5-acre park.")
    ['two', 'dogs', 'play', 'in', 'the', '3.5-acre', 'park']
    """
    text = unicodedata.normalize("NFKC", str(text)).translate(_QUOTES).lower()
    text = _NT.sub(" n't", text)
    text = _CLITIC.sub(r" '\1", text)
    return _TOKEN.findall(text)


def whitespace_tokenize(text: str) -> list[str]:
    """Split on whitespace only, for text that is already tokenized (pycocoevalcap's ``split()``).

    >>> whitespace_tokenize(" a  b c ")
    ['a', 'b', 'c']
    """
    return str(text).split()
