"""Corpus caption metrics as pycocoevalcap 1.2 computes them over a split, without Java.

The COCO caption toolkit (and lmms-eval's ``coco_cap`` tasks, which call it) tokenises every
caption with its Java PTB tokenizer, joins the tokens with spaces, and scores the split:

- ``BLEU-n`` (``Bleu(4)``, option ``closest``): clipped n-gram matches and candidate n-gram counts
  summed over the whole split, a candidate's reference length the reference closest to its length
  (ties to the shorter), summed too; ``prod_k ((correct_k + 1e-15) / (guess_k + 1e-9))^(1/n)``
  times the brevity penalty ``exp(1 - ref_len / test_len)`` when ``test_len < ref_len``. Not the
  mean of per-sentence BLEU.
- ``ROUGE-L``: the mean over images of each image's LCS F-measure (beta 1.2).
- ``CIDEr-D`` (the toolkit's ``Cider``): document frequencies over the split's reference sets, the
  mean over images.

Tokens here come from :func:`vlrollout.rewards.ptb_tokenizer.ptb_tokenize`, which equals the Java
tokenizer on raw text; ROUGE-L and CIDEr-D reuse :mod:`vlrollout.rewards.caption` and
:mod:`vlrollout.rewards.cider`. ``tests/eval/test_metrics_captions.py`` compares the result with
pycocoevalcap's scorers on Java's tokens of a raw-text fixture (1e-9).

METEOR is not reported: pycocoevalcap runs the METEOR 1.5 jar (Java, with its paraphrase tables),
and no registry package computes the same numbers (NLTK's ``meteor_score`` is another algorithm).
SPICE needs Java and downloaded models.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from vlrollout.rewards.caption import ngram_counts, rouge_l
from vlrollout.rewards.cider import cider_d_corpus
from vlrollout.rewards.ptb_tokenizer import ptb_rouge_tokenize, ptb_tokenize

CAPTION_METRICS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr-D")


@dataclass(frozen=True)
class BleuCounts:
    """What corpus BLEU needs of one candidate: its length, its closest reference length, and
    per order its clipped matches and n-gram count (pycocoevalcap's ``cook_test``)."""

    test_len: int
    ref_len: int
    correct: tuple[int, ...]
    guess: tuple[int, ...]


def bleu_counts(
    candidate: Sequence[str], references: Sequence[Sequence[str]], n: int = 4
) -> BleuCounts:
    """The :class:`BleuCounts` of tokenised ``candidate`` against its tokenised ``references``."""
    if not references:
        raise ValueError("BLEU needs at least one reference")
    maxcounts: dict[tuple[str, ...], int] = {}
    for ref in references:
        for gram, c in ngram_counts(ref, n).items():
            maxcounts[gram] = max(maxcounts.get(gram, 0), c)
    length = len(candidate)
    correct = [0] * n
    for gram, c in ngram_counts(candidate, n).items():
        correct[len(gram) - 1] += min(maxcounts.get(gram, 0), c)
    ref_len = min((abs(len(r) - length), len(r)) for r in references)[1]
    return BleuCounts(length, ref_len, tuple(correct), tuple(max(0, length - k) for k in range(n)))


def bleu_from_counts(counts: Sequence[BleuCounts], n: int = 4) -> list[float]:
    """Corpus BLEU-1..n from per-candidate counts: every count summed over the split."""
    scores, prod = [], 1.0
    for k in range(n):
        correct = sum(c.correct[k] for c in counts)
        guess = sum(c.guess[k] for c in counts)
        prod *= (correct + 1e-15) / (guess + 1e-9)
        scores.append(prod ** (1.0 / (k + 1)))
    ratio = (sum(c.test_len for c in counts) + 1e-15) / (sum(c.ref_len for c in counts) + 1e-9)
    if ratio < 1:
        scores = [s * math.exp(1 - 1 / ratio) for s in scores]
    return scores


def corpus_bleu(
    candidates: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]], n: int = 4
) -> list[float]:
    """Corpus BLEU-1..n of tokenised text, as pycocoevalcap's ``Bleu(n).compute_score``.

    Args:
        candidates: One token list per image.
        references: One list of reference token lists per image (at least one each).

    >>> # 3 of 4 unigrams match, 1 of 3 bigrams: 0.75 and sqrt(0.75 / 3) = 0.5, times the penalty
    >>> # exp(1 - 5/4) (test_len 4 < ref_len 5)
    >>> [round(b, 4) for b in corpus_bleu([["a", "b", "c", "x"]], [[["a", "b", "d", "c", "e"]]], 2)]
    [0.5841, 0.3894]
    """
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} reference sets")
    counts = []
    for i, (cand, refs) in enumerate(zip(candidates, references, strict=True)):
        if not refs:
            raise ValueError(f"references[{i}] is empty; BLEU needs at least one reference")
        counts.append(bleu_counts(cand, refs, n))
    return bleu_from_counts(counts, n)


def _tokens(text: str) -> list[str]:
    # The toolkit joins the Java tokens with spaces and every scorer splits that line again.
    return " ".join(ptb_tokenize(text)).split()


def _space_split(text: str) -> list[str]:
    return text.split()


@dataclass(frozen=True)
class CaptionStats:
    """One image's share of the split's metrics: what does not depend on the other images."""

    tokens: str
    references: tuple[str, ...]
    bleu: BleuCounts
    rouge_l: float


@lru_cache(maxsize=1 << 16)
def caption_stats(prediction: str, references: tuple[str, ...]) -> CaptionStats:
    """Tokens (space-joined), BLEU counts and ROUGE-L of one raw caption against its references.

    Cached: a bootstrap recomputes the split's metrics on many resamples of the same images, and
    only CIDEr-D's document frequencies depend on which images a resample holds.
    """
    cand = _tokens(prediction)
    refs = [_tokens(r) for r in references]
    joined = tuple(" ".join(r) for r in refs)
    # pycocoevalcap's ROUGE-L splits the tokenizer's line at spaces only (BLEU at any space).
    rouge = rouge_l(ptb_rouge_tokenize(prediction), [ptb_rouge_tokenize(r) for r in references])
    return CaptionStats(" ".join(cand), joined, bleu_counts(cand, refs), rouge)


def caption_metrics(
    predictions: Sequence[str], references: Sequence[Sequence[str]]
) -> dict[str, float]:
    """BLEU-1..4, ROUGE-L and CIDEr-D of raw captions over one split (see the module docstring).

    Args:
        predictions: One raw caption per image (an image may appear more than once: a
            bootstrap resample).
        references: The raw reference captions of each image.

    Returns:
        ``{name: value}`` for :data:`CAPTION_METRICS`; CIDEr-D is on the toolkit's 0-10 scale.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} reference sets")
    if not predictions:
        return {}
    for i, refs in enumerate(references):
        if isinstance(refs, str) or not refs:
            raise ValueError(f"references[{i}] must be a non-empty list of reference captions")
    stats = [
        caption_stats(str(p), tuple(str(r) for r in rs))
        for p, rs in zip(predictions, references, strict=True)
    ]
    out = dict(zip(CAPTION_METRICS[:4], bleu_from_counts([s.bleu for s in stats]), strict=True))
    out["ROUGE-L"] = statistics.fmean(s.rouge_l for s in stats)
    cider = cider_d_corpus(
        [s.tokens for s in stats], [s.references for s in stats], tokenizer=_space_split
    )
    out["CIDEr-D"] = statistics.fmean(cider)
    return out
