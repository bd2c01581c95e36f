"""Caption rewards: CIDEr-D with fixed document frequencies, BLEU-1..4 and ROUGE-L.

Why our own implementation rather than calling ``pycocoevalcap``:

- **Per-sample use.** ``pycocoevalcap``'s ``Cider``/``CiderScorer`` computes document frequencies
  from the batch being scored ("corpus mode"): a single caption scored alone always gets 0 (every
  n-gram has idf ``log(1) - log(1) = 0``), and a sample's score depends on what else is in the batch.
  An RL reward scores one completion at a time and must not depend on its neighbours.
- **Document frequencies fixed from the training references**, computed once by
  :meth:`CiderD.from_references` and reused (self-critical sequence training does the same,
  Rennie et al. 2017, arXiv:1612.00563; the "coco-train-df" mode of vrama91/cider).
- **No Java, same tokens.** The COCO toolkit's PTB tokenizer, METEOR and SPICE need a JVM. The
  default tokenizer here is :func:`.ptb_tokenizer.ptb_tokenize`, a pure-Python reproduction of the
  toolkit's ``PTBTokenizer`` + punctuation filter validated against Java's output, so scores on
  raw captions equal pycocoevalcap's (``tests/rewards/test_ptb_tokenize.py``).
- **Speed and size.** :mod:`.cider` packs n-grams into integer ids and scores batches with one
  sparse matrix per order; a GRPO group is one batch whose references are counted once
  (``CiderD.score_group``), and the corpus state is a few arrays (see ``bench/bench_rewards.py``).

Definitions (checked against ``pycocoevalcap`` 1.2 in ``tests/rewards/test_caption.py``):

- **CIDEr-D** (Vedantam et al. 2015, arXiv:1411.5726, and ``pycocoevalcap/cider/cider_scorer.py``,
  which despite its name implements the "-D" variant: clipping and a length penalty). For
  n = 1..4: tf-idf vectors ``g_k(s)[w] = count_s(w) * (log N - log max(1, df(w)))`` where N is the
  number of reference *sets* (images) in the corpus and df(w) the number of those sets in which
  n-gram w occurs; per reference, ``sum_w min(g_c[w], g_r[w]) * g_r[w] / (|g_c| |g_r|)`` times
  ``exp(-(l_c - l_r)^2 / (2 sigma^2))`` with sigma = 6; averaged over n and over references, x10.
  Lengths are word counts. ``pycocoevalcap`` counts bigrams instead (``if n == 1: length +=``
  indexes the bigram slot); the difference ``l_c - l_r`` is the same whenever both sentences are
  non-empty, and when either is empty the similarity is 0 anyway, so the two agree for n >= 2.
  n-grams absent from the corpus get df = 0, i.e. idf = log N.
- **BLEU-n** per sentence exactly as ``pycocoevalcap``'s ``BleuScorer`` per-sentence list:
  clipped n-gram precisions with the toolkit's smoothing ``(correct + 1e-15) / (guess + 1e-9)``,
  geometric mean of orders 1..n, brevity penalty against the *closest* reference length (ties go
  to the shorter reference). Because of that smoothing, a sentence with no 4-gram match has a tiny
  non-zero BLEU-4 (as in the toolkit).
- **ROUGE-L** as ``pycocoevalcap/rouge/rouge.py``: LCS-based precision and recall, each maximised
  over references independently, F-measure with beta = 1.2.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .cider import CiderD, cider_d_corpus, reference_captions  # noqa: F401 - re-exported
from .ptb_tokenizer import ptb_rouge_tokenize, ptb_tokenize
from .result import Reward, RewardResult, require_field
from .text_extract import answer_region

Ngram = tuple[str, ...]
Tokenizer = Callable[[str], list[str]]


def ngram_counts(tokens: Sequence[str], n: int = 4) -> Counter[Ngram]:
    """Counts of all 1..n-grams of ``tokens``.

    >>> sorted(ngram_counts(["a", "b", "a"], 2).items())
    [(('a',), 2), (('a', 'b'), 1), (('b',), 1), (('b', 'a'), 1)]
    """
    counts: Counter[Ngram] = Counter()
    size = len(tokens)
    for k in range(1, n + 1):
        for i in range(size - k + 1):
            counts[tuple(tokens[i : i + k])] += 1
    return counts


def bleu(candidate: Sequence[str], references: Sequence[Sequence[str]], n: int = 4) -> list[float]:
    """Sentence BLEU-1..n of tokenized text, as ``pycocoevalcap``'s per-sentence ``BleuScorer``.

    Returns:
        ``[BLEU-1, ..., BLEU-n]``, each in [0, 1].

    >>> [round(b, 4) for b in bleu("a b c d".split(), ["a b c d".split()])]
    [1.0, 1.0, 1.0, 1.0]
    """
    if len(references) == 0:
        raise ValueError("BLEU needs at least one reference")
    small, tiny = 1e-9, 1e-15
    maxcounts: dict[Ngram, int] = {}
    for ref in references:
        for gram, c in ngram_counts(ref, n).items():
            if c > maxcounts.get(gram, 0):
                maxcounts[gram] = c
    testlen = len(candidate)
    reflen = min((abs(len(r) - testlen), len(r)) for r in references)[1]
    correct = [0] * n
    for gram, c in ngram_counts(candidate, n).items():
        correct[len(gram) - 1] += min(maxcounts.get(gram, 0), c)
    out = []
    prod = 1.0
    for k in range(n):
        guess = max(0, testlen - k)
        prod *= (correct[k] + tiny) / (guess + small)
        out.append(prod ** (1.0 / (k + 1)))
    ratio = (testlen + tiny) / (reflen + small)
    if ratio < 1:
        bp = math.exp(1 - 1 / ratio)
        out = [b * bp for b in out]
    return out


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l(
    candidate: Sequence[str], references: Sequence[Sequence[str]], beta: float = 1.2
) -> float:
    """ROUGE-L F-measure as ``pycocoevalcap/rouge/rouge.py`` (max precision and max recall).

    >>> # lcs 2: p = 2/3, r = 1, F = 2.44 * (2/3) / (1 + 1.44 * 2/3) = 0.8299
    >>> round(rouge_l("a b c".split(), ["a c".split()]), 4)
    0.8299
    """
    if len(references) == 0:
        raise ValueError("ROUGE-L needs at least one reference")
    if len(candidate) == 0:
        return 0.0
    prec, rec = [], []
    for ref in references:
        lcs = _lcs(ref, candidate)
        prec.append(lcs / len(candidate))
        rec.append(lcs / len(ref) if ref else 0.0)
    p, r = max(prec), max(rec)
    if p == 0 or r == 0:
        return 0.0
    return (1 + beta**2) * p * r / (r + beta**2 * p)


CAPTION_METRICS = ("cider_d", "bleu1", "bleu2", "bleu3", "bleu4", "rouge_l")


class CaptionReward(Reward):
    """Caption reward reading ``task_data["captions"]`` (a list of reference strings).

    Args:
        metric: One of ``cider_d``, ``bleu1``..``bleu4``, ``rouge_l``.
        corpus: For ``cider_d``: a :class:`CiderD` or the training references (one list of
            captions per image) to build one from. Ignored by the other metrics.
        tokenizer: Used for BLEU/ROUGE (CIDEr-D uses the corpus's tokenizer).
        use_answer_tag: Score only the ``<answer>...</answer>`` content when present.

    A completion with no tokens scores 0 with reason ``"empty_caption"``.

    >>> r = CaptionReward("cider_d", corpus=[["a dog runs fast"], ["a cat sleeps here"]])
    >>> round(r("describe", "A dog runs fast.", [], [], captions=["a dog runs fast"]), 6)
    10.0
    """

    def __init__(
        self,
        metric: str = "cider_d",
        corpus: CiderD | Iterable[Sequence[str]] | None = None,
        *,
        tokenizer: Tokenizer = ptb_tokenize,
        use_answer_tag: bool = True,
    ) -> None:
        if metric not in CAPTION_METRICS:
            raise ValueError(f"metric must be one of {CAPTION_METRICS}, got {metric!r}")
        if metric == "cider_d":
            if corpus is None:
                raise ValueError(
                    "metric='cider_d' needs corpus=: a CiderD, or the training references (one "
                    "list of captions per image) so document frequencies are fixed once instead "
                    "of depending on the batch"
                )
            if not isinstance(corpus, CiderD):
                corpus = CiderD.from_references(corpus)
            if not corpus.weighs_anything:
                raise ValueError(
                    "metric='cider_d' needs a corpus with the references of at least 2 images: "
                    "CIDEr-D weighs an n-gram by how few images' references hold it, so with one "
                    "image's references (or copies of one) every caption would score 0"
                )
        self.metric = metric
        self.cider = corpus if metric == "cider_d" else None
        self.tokenizer = tokenizer
        self.use_answer_tag = use_answer_tag
        self.name = metric

    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        refs = reference_captions(
            require_field(task_data, "captions", type(self).__name__), "task_data['captions']"
        )
        if not refs:
            raise ValueError("task_data['captions'] is empty; CaptionReward needs >= 1 reference")
        if not any(self.tokenizer(r) for r in refs):
            raise ValueError(
                f"task_data['captions'] = {refs!r:.120}: no word in any reference (blank or "
                "punctuation only, which the tokenizer drops); fix the annotation"
            )
        text = answer_region(completions, self.use_answer_tag)
        tokens = self.tokenizer(text)
        if not tokens:
            return RewardResult(0.0, "empty_caption")
        if self.metric == "cider_d":
            assert self.cider is not None
            return RewardResult(self.cider.score(text, refs))
        if self.metric == "rouge_l":
            # pycocoevalcap's ROUGE-L splits the tokenizer's line at spaces only.
            split = ptb_rouge_tokenize if self.tokenizer is ptb_tokenize else self.tokenizer
            return RewardResult(rouge_l(split(text), [split(r) for r in refs]))
        ref_tokens = [self.tokenizer(r) for r in refs]
        order = int(self.metric[-1])
        return RewardResult(bleu(tokens, ref_tokens, n=order)[order - 1])
