"""Caption rewards: CIDEr-D with fixed document frequencies, BLEU-1..4 and ROUGE-L.

Why our own implementation rather than calling ``pycocoevalcap``:

- **Per-sample use.** ``pycocoevalcap``'s ``Cider``/``CiderScorer`` computes document frequencies
  from the batch being scored ("corpus mode"): a single caption scored alone always gets 0 (every
  n-gram has idf ``log(1) - log(1) = 0``), and a sample's score depends on what else is in the batch.
  An RL reward scores one completion at a time and must not depend on its neighbours.
- **Document frequencies fixed from the training references**, computed once by
  :meth:`CiderD.from_references` and reused (self-critical sequence training does the same,
  Rennie et al. 2017, arXiv:1612.00563; the "coco-train-df" mode of vrama91/cider).
- **No Java.** The COCO toolkit's PTB tokenizer, METEOR and SPICE need a JVM; :mod:`.text_tokenize`
  is a deterministic pure-Python tokenizer.
- **Speed.** idf weights are precomputed once and reference vectors are cached, so a GRPO group of
  N completions for one image vectorises the references once (see ``bench/bench_rewards.py``).

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
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .result import Reward, RewardResult, require_field
from .text_extract import answer_region
from .text_tokenize import tokenize

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


_Vector = tuple[list[dict[Ngram, float]], list[float], int]


class CiderD:
    """CIDEr-D with document frequencies fixed from a reference corpus; picklable.

    Build once with :meth:`from_references` from the training references (one list of captions
    per image), then score any candidate against its own references with :meth:`score`.

    Args:
        document_frequency: n-gram -> number of reference sets containing it.
        num_docs: Number of reference sets (N in ``log N - log df``); must be >= 1.
        n: Largest n-gram order.
        sigma: Standard deviation of the Gaussian length penalty.
        tokenizer: Callable turning a caption into tokens; module-level so it pickles.
        cache_size: How many reference sets keep their vectors cached (0 disables the cache).

    >>> cider = CiderD.from_references([["a dog runs fast"], ["a cat sleeps here"]])
    >>> round(cider.score("a dog runs fast", ["a dog runs fast"]), 4)
    10.0
    """

    def __init__(
        self,
        document_frequency: Mapping[Ngram, float],
        num_docs: int,
        *,
        n: int = 4,
        sigma: float = 6.0,
        tokenizer: Tokenizer = tokenize,
        cache_size: int = 4096,
    ) -> None:
        if num_docs < 1:
            raise ValueError(
                f"num_docs must be >= 1 (the number of reference sets), got {num_docs}"
            )
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if sigma <= 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        self.n = n
        self.sigma = float(sigma)
        self.num_docs = int(num_docs)
        self.tokenizer = tokenizer
        self.cache_size = int(cache_size)
        self.document_frequency = {tuple(g): float(df) for g, df in document_frequency.items()}
        self._log_n = math.log(self.num_docs)
        self._idf = {
            g: self._log_n - math.log(max(1.0, df)) for g, df in self.document_frequency.items()
        }
        self._ref_cache: OrderedDict[tuple[str, ...], list[_Vector]] = OrderedDict()

    @classmethod
    def from_references(
        cls,
        references: Iterable[Sequence[str]],
        *,
        n: int = 4,
        sigma: float = 6.0,
        tokenizer: Tokenizer = tokenize,
        cache_size: int = 4096,
    ) -> CiderD:
        """Count document frequencies over a corpus: one sequence of reference captions per image."""
        df: Counter[Ngram] = Counter()
        num_docs = 0
        for i, refs in enumerate(references):
            if isinstance(refs, str):
                raise TypeError(
                    f"references[{i}] is a str; pass one list of reference captions per image, "
                    f"e.g. [['a dog', 'a brown dog'], ['a cat']]"
                )
            grams: set[Ngram] = set()
            for ref in refs:
                grams.update(ngram_counts(tokenizer(ref), n))
            df.update(grams)
            num_docs += 1
        if num_docs == 0:
            raise ValueError("from_references needs at least one reference set")
        return cls(df, num_docs, n=n, sigma=sigma, tokenizer=tokenizer, cache_size=cache_size)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ref_cache"] = OrderedDict()
        state.pop("_idf")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._idf = {
            g: self._log_n - math.log(max(1.0, df)) for g, df in self.document_frequency.items()
        }

    def _vectorize(self, tokens: Sequence[str]) -> _Vector:
        vecs: list[dict[Ngram, float]] = [{} for _ in range(self.n)]
        norms = [0.0] * self.n
        idf = self._idf
        log_n = self._log_n
        for gram, tf in ngram_counts(tokens, self.n).items():
            w = tf * idf.get(gram, log_n)
            k = len(gram) - 1
            vecs[k][gram] = w
            norms[k] += w * w
        return vecs, [math.sqrt(x) for x in norms], len(tokens)

    def _sim(self, hyp: _Vector, ref: _Vector) -> float:
        vh, nh, lh = hyp
        vr, nr, lr = ref
        delta = float(lh - lr)
        penalty = math.exp(-(delta * delta) / (2.0 * self.sigma * self.sigma))
        total = 0.0
        for k in range(self.n):
            rk = vr[k]
            val = 0.0
            for gram, w in vh[k].items():
                rw = rk.get(gram)
                if rw is not None:
                    val += min(w, rw) * rw
            if nh[k] != 0.0 and nr[k] != 0.0:
                val /= nh[k] * nr[k]
            total += val * penalty
        return total / self.n

    def _ref_vectors(self, references: Sequence[Sequence[str]]) -> list[_Vector]:
        return [self._vectorize(r) for r in references]

    def score_tokens(self, candidate: Sequence[str], references: Sequence[Sequence[str]]) -> float:
        """CIDEr-D of tokenized ``candidate`` against tokenized ``references`` (0..10)."""
        if len(references) == 0:
            raise ValueError("CIDEr-D needs at least one reference caption")
        hyp = self._vectorize(candidate)
        refs = self._ref_vectors(references)
        return 10.0 * sum(self._sim(hyp, r) for r in refs) / len(refs)

    def score(self, candidate: str, references: Sequence[str]) -> float:
        """CIDEr-D of a raw caption against raw reference captions (0..10), tokenizing both.

        Reference vectors are cached by the reference strings, so scoring a group of completions
        for the same image vectorises its references once.
        """
        if isinstance(references, str):
            references = [references]
        if len(references) == 0:
            raise ValueError("CIDEr-D needs at least one reference caption")
        key = tuple(references)
        refs = self._ref_cache.get(key) if self.cache_size else None
        if refs is None:
            refs = self._ref_vectors([self.tokenizer(r) for r in references])
            if self.cache_size:
                self._ref_cache[key] = refs
                if len(self._ref_cache) > self.cache_size:
                    self._ref_cache.popitem(last=False)
        else:
            self._ref_cache.move_to_end(key)
        hyp = self._vectorize(self.tokenizer(candidate))
        return 10.0 * sum(self._sim(hyp, r) for r in refs) / len(refs)


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
        tokenizer: Tokenizer = tokenize,
        use_answer_tag: bool = False,
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
        self.metric = metric
        self.cider = corpus if metric == "cider_d" else None
        self.tokenizer = tokenizer
        self.use_answer_tag = use_answer_tag
        self.name = metric

    def score(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        refs = require_field(task_data, "captions", type(self).__name__)
        if isinstance(refs, str):
            refs = [refs]
        refs = [str(r) for r in refs]
        if not refs:
            raise ValueError("task_data['captions'] is empty; CaptionReward needs >= 1 reference")
        text = answer_region(completions, self.use_answer_tag)
        tokens = self.tokenizer(text)
        if not tokens:
            return RewardResult(0.0, "empty_caption")
        if self.metric == "cider_d":
            assert self.cider is not None
            return RewardResult(self.cider.score(text, refs))
        ref_tokens = [self.tokenizer(r) for r in refs]
        if self.metric == "rouge_l":
            return RewardResult(rouge_l(tokens, ref_tokens))
        order = int(self.metric[-1])
        return RewardResult(bleu(tokens, ref_tokens, n=order)[order - 1])
