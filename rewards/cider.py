"""CIDEr-D with packed n-gram ids and one sparse matrix per n-gram order.

Same definition as ``pycocoevalcap/cider/cider_scorer.py`` (see :mod:`.caption` for the formula);
this module is about doing it fast and with compact state:

- **n-gram ids.** Words get integer ids; the k-gram starting at token i gets the id
  ``rank(id of its (k-1)-gram prefix * 2**31 + id of its last word)`` among the sorted keys of the
  reference corpus. Keys are exact int64 (no hashing), and a corpus is a vocabulary plus one
  sorted key array and one document-frequency array per order: it pickles and loads in
  milliseconds-to-seconds at COCO scale, where a dict of n-gram tuples took tens of seconds.
- **Batches.** Candidates and references of a batch are counted in one pass (NumPy); n-grams
  missing from the corpus get ids after the corpus's, so they match each other but have df 0
  (idf ``log N``), as in pycocoevalcap. Each order is a ``scipy.sparse`` CSR matrix of tf-idf
  rows; a candidate/reference pair's clipped similarity is
  ``rowsum(minimum(c, r) * r)`` over gathered row pairs.
- **References once.** Every distinct reference set in a batch is counted once, however many
  candidates (a GRPO group) it is scored against; :func:`cider_d_corpus` also takes the document
  frequencies from the same counts (pycocoevalcap counts each reference twice).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import sparse

from .ptb_tokenizer import ptb_tokenize

Ngram = tuple[str, ...]
Tokenizer = Callable[[str], list[str]]
_SHIFT = np.int64(1 << 31)
_MAX_IDS = 1 << 32  # ids below this keep ``prefix * 2**31 + word`` inside int64
SMALL_BATCH = 64
"""Batches of at most this many sentences (candidates + references) take the dict path; larger
ones the sparse-matrix path (both equal pycocoevalcap to ~1e-15, see tests)."""
_Vector = tuple[list[dict[tuple[str, ...], float]], list[float], int]


def reference_captions(value: Any, where: str) -> list[str]:
    """A sequence of reference captions (a list, tuple or array of strings; one string is one
    reference) as a list, refusing anything else by ``where`` rather than scoring its ``str()``.

    >>> reference_captions(("a dog", "a brown dog"), "captions")
    ['a dog', 'a brown dog']
    """
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (Sequence, np.ndarray)) or isinstance(value, (bytes, Mapping)):
        raise ValueError(f"{where} must be a list of caption strings, got {type(value).__name__}")
    for k, caption in enumerate(value):
        if not isinstance(caption, str):
            raise ValueError(
                f"{where}[{k}] is not a string but {type(caption).__name__} ({caption!r:.60}): "
                "references are caption texts"
            )
    return [str(c) for c in value]


class _Batch:
    """Token ids of a batch of sentences and, per order, each n-gram's id (-1: none there)."""

    def __init__(self, sentences: Sequence[Sequence[int]], n: int) -> None:
        self.lengths = np.fromiter((len(s) for s in sentences), np.int64, len(sentences))
        total = int(self.lengths.sum())
        self.tokens = np.fromiter((t for s in sentences for t in s), np.int64, total)
        self.row = np.repeat(np.arange(len(sentences), dtype=np.int64), self.lengths)
        starts = np.cumsum(self.lengths) - self.lengths
        self.left = self.lengths[self.row] - (np.arange(total) - starts[self.row])  # tokens left
        self.n = n


def _assign(keys: np.ndarray, known: np.ndarray) -> tuple[np.ndarray, int]:
    """Ids of ``keys``: their rank in sorted ``known``, else ``len(known) + rank among unknowns``."""
    if len(known):
        idx = np.searchsorted(known, keys)
        idx_c = np.minimum(idx, len(known) - 1)
        hit = known[idx_c] == keys
    else:
        idx, hit = np.zeros(len(keys), np.int64), np.zeros(len(keys), bool)
    ids = np.where(hit, idx, 0).astype(np.int64)
    miss = ~hit
    extra = 0
    if miss.any():
        missing = keys[miss]
        order = np.argsort(missing, kind="stable")
        sorted_keys = missing[order]
        new = np.ones(len(sorted_keys), bool)
        new[1:] = sorted_keys[1:] != sorted_keys[:-1]
        rank = np.cumsum(new) - 1  # rank among the distinct unknown keys, in key order
        inv = np.empty(len(missing), np.int64)
        inv[order] = rank
        ids[miss] = len(known) + inv
        extra = int(rank[-1]) + 1
    if len(known) + extra >= _MAX_IDS:
        raise ValueError(f"{len(known) + extra} distinct n-grams of one order: more than 2**32")
    return ids, extra


def _ngram_ids(batch: _Batch, corpus_keys: Sequence[np.ndarray]) -> list[tuple[np.ndarray, ...]]:
    """Per order k: ``(rows, ids, keys, width, valid)`` of every k-gram in the batch (``valid``:
    the token positions where one starts)."""
    out = []
    prev = batch.tokens  # order 1: the key is the word id
    prev_ids = batch.tokens
    valid = np.ones(len(batch.tokens), bool)
    for k in range(1, batch.n + 1):
        if k > 1:
            valid = batch.left >= k  # the k-gram at i stays inside its sentence
            last_word = np.zeros_like(batch.tokens)  # the tail is never valid
            if len(last_word) >= k:
                last_word[: len(last_word) - (k - 1)] = batch.tokens[k - 1 :]
            prev = np.where(valid, prev_ids * _SHIFT + last_word, -1)
        keys = prev[valid]
        ids, extra = _assign(keys, corpus_keys[k - 1])
        full = np.full(len(batch.tokens), -1, np.int64)
        full[valid] = ids
        prev_ids = full
        out.append((batch.row[valid], ids, keys, len(corpus_keys[k - 1]) + extra, valid))
    return out


class CiderD:
    """CIDEr-D with document frequencies fixed from a reference corpus; picklable and compact.

    Build once with :meth:`from_references` from the training references (one list of captions
    per image), then score with :meth:`score` (one candidate), :meth:`score_group` (a GRPO group
    against one image's references) or :meth:`score_batch` (many candidates, each with its
    references; every distinct reference set is counted once).

    Args:
        document_frequency: n-gram tuple -> number of reference sets containing it.
        num_docs: Number of reference sets (N in ``log N - log df``); must be >= 1.
        n: Largest n-gram order.
        sigma: Standard deviation of the Gaussian length penalty.
        tokenizer: Callable turning a caption into tokens; module-level so it pickles.
        cache_size: How many reference sets keep their token ids cached (0 disables the cache).

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
        tokenizer: Tokenizer = ptb_tokenize,
        cache_size: int = 4096,
    ) -> None:
        self._configure(num_docs, n, sigma, tokenizer, cache_size)
        grams = sorted({tuple(g) for g in document_frequency}, key=len)
        # Prefixes of every n-gram are added with df 0 so each has an id to build on.
        closed = {g[:k] for g in grams for k in range(1, len(g) + 1) if len(g) <= n}
        vocab: dict[str, int] = {}
        for g in sorted(closed, key=len):
            for w in g:
                vocab.setdefault(w, len(vocab))
        self.vocab = vocab
        keys: list[np.ndarray] = []
        dfs: list[np.ndarray] = []
        ids: dict[Ngram, int] = {}
        for k in range(1, n + 1):
            order = [g for g in closed if len(g) == k]
            if k == 1:
                raw = [vocab[g[0]] for g in order]
            else:
                raw = [ids[g[:-1]] * (1 << 31) + vocab[g[-1]] for g in order]
            arr = np.array(raw, np.int64)
            sort = np.argsort(arr)
            keys.append(arr[sort])
            dfs.append(np.array([float(document_frequency.get(order[i], 0.0)) for i in sort]))
            ids.update({order[i]: rank for rank, i in enumerate(sort)})
        self._set_corpus(keys, dfs)

    def _configure(self, num_docs: int, n: int, sigma: float, tokenizer: Tokenizer,
                   cache_size: int) -> None:  # fmt: skip
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
        self._log_n = math.log(self.num_docs)
        self._ref_cache: OrderedDict[tuple[str, ...], list[list[str]]] = OrderedDict()
        self._vec_cache: OrderedDict[tuple[str, ...], list[_Vector]] = OrderedDict()

    def _set_corpus(self, keys: list[np.ndarray], dfs: list[np.ndarray]) -> None:
        self._keys = keys
        self._df = dfs
        self._idf = [self._log_n - np.log(np.maximum(1.0, df)) for df in dfs]

    @property
    def fingerprint(self) -> str:
        """A digest of what the scores depend on (n-gram document frequencies, their count,
        ``n`` and ``sigma``): two corpora with one fingerprint score every caption alike."""
        counts = sorted((list(g), d) for g, d in self.document_frequency.items())
        digest = hashlib.sha256(f"{self.num_docs}:{self.n}:{self.sigma}".encode())
        digest.update(json.dumps(counts).encode())  # not the packed ids: they follow set order
        return digest.hexdigest()[:16]

    @property
    def weighs_anything(self) -> bool:
        """Whether some n-gram of the corpus has a weight (idf) above 0: not when the corpus is
        one image's references, or copies of one, so that every caption scores 0."""
        return any(bool((idf > 0).any()) for idf in self._idf)

    @classmethod
    def from_references(
        cls,
        references: Iterable[Sequence[str]],
        *,
        n: int = 4,
        sigma: float = 6.0,
        tokenizer: Tokenizer = ptb_tokenize,
        cache_size: int = 4096,
    ) -> CiderD:
        """Count document frequencies over a corpus: one sequence of reference captions per image."""
        sets: list[list[list[str]]] = []
        for i, refs in enumerate(references):
            if isinstance(refs, str):
                raise TypeError(
                    f"references[{i}] is a str; pass one list of reference captions per image, "
                    f"e.g. [['a dog', 'a brown dog'], ['a cat']]"
                )
            sets.append([tokenizer(r) for r in reference_captions(refs, f"references[{i}]")])
        if not sets:
            raise ValueError("from_references needs at least one reference set")
        self = cls.__new__(cls)
        self._configure(len(sets), n, sigma, tokenizer, cache_size)
        self.vocab = {}
        sentences = [self._ids(s, self.vocab, grow=True) for refs in sets for s in refs]
        owner = np.repeat(np.arange(len(sets)), [len(refs) for refs in sets])
        batch = _Batch(sentences, n)
        empty = [np.zeros(0, np.int64)] * n
        keys, dfs = [], []
        for rows, ids, order_keys, width, _ in _ngram_ids(batch, empty):
            uniq = np.zeros(width, np.int64)
            uniq[ids] = order_keys  # ids are ranks of the sorted unique keys
            keys.append(uniq)
            dfs.append(_doc_freq(owner[rows], ids, width))
        self._set_corpus(keys, dfs)
        return self

    @staticmethod
    def _ids(tokens: Sequence[str], vocab: dict[str, int], grow: bool = False,
             local: dict[str, int] | None = None) -> list[int]:  # fmt: skip
        out = []
        for w in tokens:
            i = vocab.get(w)
            if i is None:
                if grow:
                    i = vocab[w] = len(vocab)
                else:  # unseen word: an id after the vocabulary, shared within the batch
                    assert local is not None
                    i = local.setdefault(w, len(vocab) + len(local))
            out.append(i)
        return out

    @property
    def document_frequency(self) -> dict[Ngram, float]:
        """n-gram tuple -> document frequency (rebuilt from the packed arrays; for inspection)."""
        words = {i: w for w, i in self.vocab.items()}
        out: dict[Ngram, float] = {}
        prev: list[Ngram] = []
        for k in range(self.n):
            keys, df = self._keys[k], self._df[k]
            if k == 0:
                grams = [(words[int(x)],) for x in keys]
            else:
                grams = [prev[int(x) >> 31] + (words[int(x) & ((1 << 31) - 1)],) for x in keys]
            out.update((g, float(d)) for g, d in zip(grams, df, strict=True) if d > 0)
            prev = grams
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ref_cache"] = OrderedDict()
        state["_vec_cache"] = OrderedDict()
        state.pop("_idf")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._set_corpus(self._keys, self._df)

    def _ref_ids(self, references: Sequence[str]) -> list[list[str]]:
        key = tuple(references)
        refs = self._ref_cache.get(key) if self.cache_size else None
        if refs is None:
            refs = [self.tokenizer(r) for r in references]
            if self.cache_size:
                self._ref_cache[key] = refs
                if len(self._ref_cache) > self.cache_size:
                    self._ref_cache.popitem(last=False)
        else:
            self._ref_cache.move_to_end(key)
        return refs

    def score_tokens(self, candidate: Sequence[str], references: Sequence[Sequence[str]]) -> float:
        """CIDEr-D of tokenized ``candidate`` against tokenized ``references`` (0..10)."""
        if len(references) == 0:
            raise ValueError("CIDEr-D needs at least one reference caption")
        return self._score_tokenized([list(candidate)], [[list(r) for r in references]], [0])[0]

    def score(self, candidate: str, references: Sequence[str]) -> float:
        """CIDEr-D of a raw caption against raw reference captions (0..10), tokenizing both."""
        return self.score_batch([candidate], [references])[0]

    def score_group(self, candidates: Sequence[str], references: Sequence[str]) -> list[float]:
        """CIDEr-D of each candidate (a GRPO group) against the same references, as one batch."""
        return self.score_batch(candidates, [references] * len(candidates))

    def score_batch(
        self, candidates: Sequence[str], references: Sequence[Sequence[str]]
    ) -> list[float]:
        """CIDEr-D of ``candidates[i]`` against ``references[i]``; equal reference sets (the same
        captions in the same order) are tokenized and counted once."""
        if len(candidates) != len(references):
            raise ValueError(f"{len(candidates)} candidates but {len(references)} reference sets")
        index: dict[tuple[str, ...], int] = {}
        ref_sets: list[list[list[str]]] = []
        owner = []
        for refs in references:
            if isinstance(refs, str):
                refs = [refs]
            if len(refs) == 0:
                raise ValueError("CIDEr-D needs at least one reference caption")
            key = tuple(refs)
            if key not in index:
                index[key] = len(ref_sets)
                ref_sets.append(self._ref_ids(refs))
            owner.append(index[key])
        cands = [self.tokenizer(c) for c in candidates]
        return self._score_tokenized(cands, ref_sets, owner)

    def _score_tokenized(
        self, cands: list[list[str]], ref_sets: list[list[list[str]]], owner: Sequence[int]
    ) -> list[float]:
        if len(cands) + sum(len(r) for r in ref_sets) <= SMALL_BATCH:
            return self._score_small(cands, ref_sets, owner)
        return self._score_sparse(cands, ref_sets, owner)

    def _vectors(self, sentences: list[list[str]]) -> list[_Vector]:
        """tf-idf vectors keyed by n-gram tuple (stable across calls, so reference vectors can
        be cached), their norms and lengths. Python lists plus one ``searchsorted`` per order:
        for a handful of sentences that is cheaper than building arrays per sentence."""
        local: dict[str, int] = {}
        ids = [self._ids(t, self.vocab, local=local) for t in sentences]
        out: list[_Vector] = [([{} for _ in range(self.n)], [0.0] * self.n, len(t))
                              for t in sentences]  # fmt: skip
        prev = ids  # per sentence: the id of the (k-1)-gram starting at each position
        shift = 1 << 31
        for k in range(1, self.n + 1):
            if k == 1:
                keys = ids
            else:
                keys = [[p[i] * shift + s[i + k - 1] for i in range(len(s) - k + 1)]
                        for p, s in zip(prev, ids, strict=True)]  # fmt: skip
            flat = [x for row in keys for x in row]
            corpus, idf = self._keys[k - 1], self._idf[k - 1]
            if flat and len(corpus):
                arr = np.array(flat, np.int64)
                idx = np.minimum(np.searchsorted(corpus, arr), len(corpus) - 1)
                hit = (corpus[idx] == arr).tolist()
                ranks, weights = idx.tolist(), idf[idx].tolist()
            else:
                hit, ranks, weights = [False] * len(flat), [0] * len(flat), [0.0] * len(flat)
            unknown: dict[int, int] = {}
            base = len(corpus)
            j = 0
            prev = []
            for r, row in enumerate(keys):
                vec, words = out[r][0][k - 1], sentences[r]
                row_ids = []
                for i, key in enumerate(row):
                    if hit[j]:
                        row_ids.append(ranks[j])
                        w = weights[j]
                    else:  # not in the corpus: df 0, an id after the corpus's for this call
                        row_ids.append(unknown.setdefault(key, base + len(unknown)))
                        w = self._log_n
                    gram = tuple(words[i : i + k])
                    vec[gram] = vec.get(gram, 0.0) + w
                    j += 1
                prev.append(row_ids)
        for vecs, norms, _ in out:
            for k in range(self.n):
                norms[k] = math.sqrt(sum(w * w for w in vecs[k].values()))
        return out

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

    def _score_small(
        self, cands: list[list[str]], ref_sets: list[list[list[str]]], owner: Sequence[int]
    ) -> list[float]:
        """Few sentences (the per-sample reward): dict-based similarity, reference vectors
        cached per reference set; sparse matrices would cost more to build than to use."""
        ref_vecs = []
        for refs in ref_sets:
            key = tuple(" ".join(r) for r in refs)
            vecs = self._vec_cache.get(key) if self.cache_size else None
            if vecs is None:
                vecs = self._vectors(refs)
                if self.cache_size:
                    self._vec_cache[key] = vecs
                    if len(self._vec_cache) > self.cache_size:
                        self._vec_cache.popitem(last=False)
            ref_vecs.append(vecs)
        hyps = self._vectors(cands)
        return [
            10.0 * sum(self._sim(h, r) for r in ref_vecs[o]) / len(ref_vecs[o])
            for h, o in zip(hyps, owner, strict=True)
        ]

    def _score_sparse(
        self, cands: list[list[str]], ref_sets: list[list[list[str]]], owner: Sequence[int]
    ) -> list[float]:
        local: dict[str, int] = {}
        sentences = [self._ids(c, self.vocab, local=local) for c in cands]
        ref_rows = []
        for refs in ref_sets:
            ref_rows.append(list(range(len(sentences), len(sentences) + len(refs))))
            sentences += [self._ids(r, self.vocab, local=local) for r in refs]
        batch = _Batch(sentences, self.n)
        orders = _ngram_ids(batch, self._keys)
        idf = [_extend(self._idf[k], orders[k][3], self._log_n) for k in range(self.n)]
        return _cider(batch, orders, idf, cands, ref_rows, owner, self.sigma)


def _extend(idf: np.ndarray, width: int, log_n: float) -> np.ndarray:
    """Corpus idf, then ``log N`` (df 0) for the batch's n-grams the corpus lacks."""
    return np.concatenate([idf, np.full(width - len(idf), log_n)])


def _doc_freq(owner_of_row: np.ndarray, ids: np.ndarray, width: int) -> np.ndarray:
    """Per n-gram id: the number of distinct owners (reference sets) with that n-gram."""
    pairs = np.sort(owner_of_row.astype(np.int64) * width + ids)
    first = np.ones(len(pairs), bool)  # one count per (owner, n-gram): drop repeats
    first[1:] = pairs[1:] != pairs[:-1]
    return np.bincount(pairs[first] % width, minlength=width).astype(np.float64)


def _cider(
    batch: _Batch,
    orders: list[tuple[np.ndarray, ...]],
    idf: list[np.ndarray],
    cands: list[list[str]],
    ref_rows: list[list[int]],
    owner: Sequence[int],
    sigma: float,
) -> list[float]:
    """Scores of candidate rows ``0..len(cands)-1`` against the reference rows of their owner."""
    pair_c = np.array([i for i, o in enumerate(owner) for _ in ref_rows[o]], np.int64)
    pair_r = np.array([r for o in owner for r in ref_rows[o]], np.int64)
    n_rows = len(batch.lengths)
    delta = (batch.lengths[pair_c] - batch.lengths[pair_r]).astype(np.float64)
    penalty = np.exp(-(delta * delta) / (2.0 * sigma * sigma))
    total = np.zeros(len(pair_c))
    for (rows, ids, _, width, _), weights in zip(orders, idf, strict=True):
        tf = sparse.csr_matrix(
            (np.ones(len(ids)), (rows, ids)), shape=(n_rows, width)
        )  # duplicates are summed: term frequencies
        tf.sum_duplicates()
        tf.data *= weights[tf.indices]
        norm = np.sqrt(np.asarray(tf.multiply(tf).sum(axis=1)).ravel())
        c, r = tf[pair_c], tf[pair_r]
        val = np.asarray(c.minimum(r).multiply(r).sum(axis=1)).ravel()
        denom = norm[pair_c] * norm[pair_r]
        val = np.where(denom != 0, val / np.where(denom != 0, denom, 1.0), val)
        total += val * penalty
    per_pair = total / len(orders)
    sums = np.bincount(pair_c, weights=per_pair, minlength=len(cands))
    counts = np.bincount(pair_c, minlength=len(cands))
    return [float(x) for x in 10.0 * sums / counts]


def cider_d_corpus(
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    n: int = 4,
    sigma: float = 6.0,
    tokenizer: Tokenizer = ptb_tokenize,
) -> list[float]:
    """pycocoevalcap's corpus mode (``Cider().compute_score``): df from the scored references.

    Each reference is tokenized and counted once, for the document frequencies and for its
    vectors. Returns one score per candidate, equal to pycocoevalcap's to ~1e-15.
    """
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} reference sets")
    if not candidates:
        return []
    vocab: dict[str, int] = {}
    cands = [tokenizer(c) for c in candidates]
    sentences = [CiderD._ids(c, vocab, grow=True) for c in cands]
    ref_rows, owner_rows = [], []
    for i, refs in enumerate(references):
        if isinstance(refs, str):
            refs = [refs]
        if len(refs) == 0:
            raise ValueError(f"references[{i}] is empty; CIDEr-D needs at least one reference")
        ref_rows.append(list(range(len(sentences), len(sentences) + len(refs))))
        owner_rows += [i] * len(refs)
        sentences += [CiderD._ids(tokenizer(r), vocab, grow=True) for r in refs]
    batch = _Batch(sentences, n)
    empty = [np.zeros(0, np.int64)] * n
    orders = _ngram_ids(batch, empty)
    log_n = math.log(len(references))
    owner_of_row = np.concatenate([np.full(len(cands), -1), np.array(owner_rows)])
    idf = []
    for rows, ids, _, width, _ in orders:
        is_ref = owner_of_row[rows] >= 0
        df = _doc_freq(owner_of_row[rows][is_ref], ids[is_ref], width)
        idf.append(log_n - np.log(np.maximum(1.0, df)))
    return _cider(batch, orders, idf, cands, ref_rows, range(len(cands)), sigma)
