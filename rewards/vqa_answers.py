"""Short answers scored as VQA-style benchmarks score them.

The official VQA evaluation (``vqaEval.py`` of the VQA API, and lmms-eval's ``vqav2`` task, which
applies it to every answer) normalises the prediction and each human answer the same way:

1. newlines and tabs become spaces, the ends are stripped;
2. punctuation (:data:`PUNCTUATION`): each mark is deleted when the text has it before or after a
   space, or when the text has a comma between two digits; otherwise it becomes a space; then
   periods not followed by a digit are deleted (the official code passes ``re.UNICODE`` as the
   ``count`` of ``re.sub``: at most 32 of them, kept here);
3. digits and articles: lower-cased words, number words ``none``/``zero``..``ten`` become digits,
   ``a``/``an``/``the`` are dropped, contractions written without apostrophes get them
   (:data:`CONTRACTIONS`: ``dont`` -> ``don't``).

VQA accuracy with the 10 human answers of a question: for each answer left out, ``min(1, m / 3)``
with ``m`` the number of the other nine equal to the prediction; the mean of the ten. With one
gold answer (a string) the score is exact match after the same normalisation. The official script
normalises only when the ten answers are not all equal; lmms-eval normalises always, as here.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<",
               "@", "`", ",", "?", "!")  # fmt: skip
"""The marks of the official ``processPunctuation`` (the period is handled on its own)."""

_COMMA_BETWEEN_DIGITS = re.compile(r"(?<=\d)(,)+(?=\d)")
# The official pattern: ``(?!<=\d)`` is a negative lookahead for "<=digit" (a typo of a
# lookbehind), so a period after a digit is deleted too unless a digit follows.
_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
_NUMBER_WORDS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4",
                 "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}  # fmt: skip
_ARTICLES = frozenset({"a", "an", "the"})

_CONTRACTED = """'ow's'at 'twas I'd've I'm I've ain't aren't can't could've couldn't couldn't've
didn't doesn't don't hadn't hadn't've hasn't haven't he'd he'd've he's how'd how'll how's isn't
it'd it'd've it'll ma'am might've mightn't mightn't've must've mustn't needn't not've o'clock
oughtn't shan't she'd've should've shouldn't shouldn't've somebody'd've somebody'll somebody's
someone'd someone'd've someone'll someone's something'd something'd've something'll that's there'd
there'd've there're there's they'd they'd've they'll they're they've wasn't we'd've we've weren't
what'll what're what's what've when's where'd where's where've who'd who'd've who'll who's who've
why'll why're why's won't would've wouldn't wouldn't've y'all y'all'd've y'all'll you'd you'd've
you'll you're you've""".split()


def _contractions() -> dict[str, str]:
    """Each contraction keyed by every spelling with one apostrophe left out (``couldn'tve`` and
    ``couldnt've``, ``dont``), the rule of the official table, plus its three odd entries."""
    table = {}
    for word in _CONTRACTED:
        for i, ch in enumerate(word):
            if ch == "'":
                table[word[:i] + word[i + 1 :]] = word
    table["somebody'd"] = "somebodyd"  # reversed in the official table, kept for equal scores
    table.update({"let's": "let's", "she's": "she's"})  # no-ops there too ("lets" is a verb)
    return table


CONTRACTIONS = _contractions()
"""Spelling without an apostrophe -> the contraction (the official ``contractions`` table; entries
with a capital ``I`` never match lower-cased words, as there)."""


def process_punctuation(text: str) -> str:
    """Step 2 of the normalisation (module docstring).

    >>> process_punctuation("black-and-white"), process_punctuation("1,000"), process_punctuation("yes, sir.")
    ('black and white', '1000', 'yes sir')
    """
    out = text
    comma_number = _COMMA_BETWEEN_DIGITS.search(text) is not None
    for p in PUNCTUATION:
        if p + " " in text or " " + p in text or comma_number:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return _PERIOD.sub("", out, count=int(re.UNICODE))


def process_digit_article(text: str) -> str:
    """Step 3 of the normalisation (module docstring).

    >>> process_digit_article("The Two dogs dont")
    "2 dogs don't"
    """
    words = [_NUMBER_WORDS.get(w, w) for w in text.lower().split()]
    words = [CONTRACTIONS.get(w, w) for w in words if w not in _ARTICLES]
    return " ".join(words)


def normalize_answer(text: str) -> str:
    """A VQA answer normalised for comparison (steps 1-3 of the module docstring).

    >>> normalize_answer("  Two dogs.\\n")
    '2 dogs'
    """
    text = str(text).replace("\n", " ").replace("\t", " ").strip()
    return process_digit_article(process_punctuation(text))


VQA_ANNOTATORS = 10
"""The human answers per question of VQA's annotation (VQAv2, VizWiz, TextVQA, OK-VQA): a list
of this many is scored with VQA's leave-one-out accuracy."""


def vqa_accuracy(prediction: str, answers: str | Sequence[str]) -> float:
    """VQA accuracy of ``prediction`` against the human ``answers``.

    A list of VQA's ten (:data:`VQA_ANNOTATORS`) is scored with VQA's rule; one string, or a
    list of another length (the accepted answers of DocVQA or ChartQA), is exact match against
    any of them: the leave-one-out rule cannot reach 1 with fewer than four equal answers.

    >>> # leaving out one of the three "2": 2 of 9 match (2/3); one of the seven "3": 3 match (1)
    >>> round(vqa_accuracy("two", ["2"] * 3 + ["3"] * 7), 6)  # (3 * 2/3 + 7 * 1) / 10
    0.9
    >>> vqa_accuracy("Yes.", "yes"), vqa_accuracy("yes", ["yes"])
    (1.0, 1.0)
    """
    pred = normalize_answer(prediction)
    if isinstance(answers, str):
        answers = [answers]
    gold = [normalize_answer(a) for a in answers]
    if not gold:
        raise ValueError("VQA accuracy needs at least one human answer")
    if len(gold) != VQA_ANNOTATORS:
        return float(pred in gold)
    accs = []
    for i in range(len(gold)):
        matches = sum(1 for j, g in enumerate(gold) if j != i and g == pred)
        accs.append(min(1.0, matches / 3))
    return statistics.fmean(accs)


def match_choice_text(text: str, choices: Sequence[str]) -> int | None:
    """The index of the one choice whose text the answer gives, else ``None``.

    An answer equal to one choice's text picks it. Otherwise the answer and the choices are
    compared after :func:`normalize_answer`: an answer equal to a choice picks it; otherwise the
    choices contained in the answer as whole words, when exactly one is (``"It is a red car."``
    picks ``"red car"`` among ``"red car"``, ``"blue car"``).

    >>> match_choice_text("It is a red car.", ["blue car", "red car"])
    1
    """
    if text in choices and list(choices).count(text) == 1:  # before two alike once normalised
        return list(choices).index(text)
    pred = normalize_answer(text)
    norm = [normalize_answer(c) for c in choices]
    equal = [i for i, c in enumerate(norm) if c and c == pred]
    if len(equal) == 1:
        return equal[0]
    padded = f" {pred} "
    inside = [i for i, c in enumerate(norm) if c and f" {c} " in padded]
    if len(inside) == 1:
        return inside[0]
    return None
