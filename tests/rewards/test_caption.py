"""Caption metrics: hand-computed values and agreement with pycocoevalcap on the same inputs.

pycocoevalcap's ``Cider`` computes CIDEr-D (clipping + Gaussian length penalty, x10) but always
takes document frequencies from the batch it scores. Two comparisons therefore apply:

1. *Corpus mode*: when our corpus is exactly the batch's references, both compute the same df and
   N, so per-image scores must match (``Cider().compute_score``).
2. *Fixed df*: for held-out candidates we run pycocoevalcap's own ``CiderScorer.compute_cider`` with
   our document frequencies injected and the scorer padded with empty entries so its
   ``ref_len = log(len(crefs))`` equals our ``log N``.

Inputs are whitespace-tokenized on both sides (pycocoevalcap's PTB tokenizer needs Java).
"""

import math
import pickle
import random
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.cider.cider_scorer import CiderScorer
from pycocoevalcap.rouge.rouge import Rouge

from vlrollout.rewards.caption import CaptionReward, CiderD, bleu, rouge_l
from vlrollout.rewards.text_tokenize import whitespace_tokenize

VOCAB = "a the dog cat man woman runs sits on grass red blue ball with near tree".split()


def _sentence(rng: random.Random, lo: int = 0, hi: int = 12) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(rng.randint(lo, hi)))


def _dataset(seed: int, images: int = 15):
    rng = random.Random(seed)
    refs = [[_sentence(rng, 2) for _ in range(rng.randint(1, 5))] for _ in range(images)]
    cands = [_sentence(rng) for _ in range(images)]
    return cands, refs


def _coco_cider(cands, refs):
    gts = {i: r for i, r in enumerate(refs)}
    res = {i: [c] for i, c in enumerate(cands)}
    return Cider().compute_score(gts, res)[1]


def _coco_cider_fixed_df(cands, refs, cider: CiderD):
    """pycocoevalcap's CiderScorer.compute_cider with our df and N injected."""
    scorer = CiderScorer(n=cider.n, sigma=cider.sigma)
    for c, r in zip(cands, refs, strict=True):
        scorer += (c, r)
    if len(cands) > cider.num_docs:
        raise ValueError("padding needs num_docs >= number of candidates")
    for _ in range(cider.num_docs - len(cands)):
        scorer += ("", [""])  # empty entries only make len(crefs) == N; they score 0
    scorer.document_frequency = defaultdict(float, cider.document_frequency)
    return scorer.compute_cider()[: len(cands)]


def test_cider_d_hand_computed():
    # Corpus [["a b"], ["a c"]]: N = 2; df(a) = 2 so idf(a) = 0; b, c, "a b", "a c" have df 1
    # (idf ln 2); the unseen bigram "b c" has df 0 -> idf ln 2.
    # Candidate "a b c" vs reference "a b", n = 2:
    #   unigrams: hyp (a 0, b ln2, c ln2), ref (a 0, b ln2) -> ln2^2 / (sqrt2 ln2 * ln2) = 1/sqrt2
    #   bigrams:  hyp ("a b" ln2, "b c" ln2), ref ("a b" ln2)   -> 1/sqrt2
    #   length penalty exp(-(3 - 2)^2 / 72); score = 10 * mean(1/sqrt2, 1/sqrt2) * penalty
    cider = CiderD.from_references([["a b"], ["a c"]], n=2, tokenizer=whitespace_tokenize)
    expected = 10 / math.sqrt(2) * math.exp(-1 / 72)
    assert cider.score("a b c", ["a b"]) == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(6.973537, abs=1e-6)


def test_cider_d_clips_repeated_ngrams():
    # "b b" vs "a b", n = 1, same corpus: hyp b weight 2 ln2, ref b weight ln2 (a has idf 0).
    # Clipped dot = min(2ln2, ln2) * ln2 = ln2^2; norms 2 ln2 and ln2 -> 0.5; lengths equal.
    # Without clipping the cosine would be 1.0 (score 10).
    cider = CiderD.from_references([["a b"], ["a c"]], n=1, tokenizer=whitespace_tokenize)
    assert cider.score("b b", ["a b"]) == pytest.approx(5.0, abs=1e-12)


def test_cider_d_matches_pycocoevalcap_corpus_mode():
    cands, refs = _dataset(seed=0)
    cands[0] = ""  # empty candidate
    cands[1] = "dog"  # single word: pycocoevalcap's bigram-count length is 0 here
    ours = CiderD.from_references(refs, tokenizer=whitespace_tokenize)
    got = [ours.score(c, r) for c, r in zip(cands, refs, strict=True)]
    ref = _coco_cider(cands, refs)
    assert max(abs(a - b) for a, b in zip(got, ref, strict=True)) < 1e-9
    assert max(got) > 1.0  # the comparison is not vacuous (all zeros)


def test_cider_d_matches_pycocoevalcap_with_fixed_df():
    _, train_refs = _dataset(seed=1, images=40)
    cands, refs = _dataset(seed=2, images=10)  # held out: df comes only from train_refs
    ours = CiderD.from_references(train_refs, tokenizer=whitespace_tokenize)
    got = [ours.score(c, r) for c, r in zip(cands, refs, strict=True)]
    ref = _coco_cider_fixed_df(cands, refs, ours)
    assert max(abs(a - b) for a, b in zip(got, ref, strict=True)) < 1e-9
    assert max(got) > 0.5


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=1, max_value=6))
def test_cider_d_matches_pycocoevalcap_property(seed, images):
    cands, refs = _dataset(seed, images)
    ours = CiderD.from_references(refs, tokenizer=whitespace_tokenize)
    got = [ours.score(c, r) for c, r in zip(cands, refs, strict=True)]
    for a, b in zip(got, _coco_cider(cands, refs), strict=True):
        assert a == pytest.approx(b, abs=1e-9)
        assert 0.0 <= a <= 10.0 + 1e-9


def test_single_caption_is_not_zero_with_fixed_df():
    # The reason CiderD exists: pycocoevalcap scoring one image alone gives 0 (idf = 0 for all).
    assert _coco_cider(["a dog on grass"], [["a dog on grass"]])[0] == 0.0
    ours = CiderD.from_references([["a dog on grass"], ["a cat sits"], ["a man runs"]])
    assert ours.score("a dog on grass", ["a dog on grass"]) > 5.0


def test_cider_d_reference_cache_does_not_change_scores():
    _, refs = _dataset(seed=3, images=20)
    cached = CiderD.from_references(refs, tokenizer=whitespace_tokenize, cache_size=2)
    uncached = CiderD.from_references(refs, tokenizer=whitespace_tokenize, cache_size=0)
    rng = random.Random(4)
    for _ in range(60):
        r = refs[rng.randrange(len(refs))]
        c = _sentence(rng)
        assert cached.score(c, r) == uncached.score(c, r)
    assert len(cached._ref_cache) <= 2


def test_cider_d_pickles_with_equal_scores():
    cider = CiderD.from_references([["a dog runs fast"], ["a cat sleeps"]])
    before = cider.score("a dog runs", ["a dog runs fast"])
    clone = pickle.loads(pickle.dumps(cider))
    assert clone.score("a dog runs", ["a dog runs fast"]) == before
    assert clone.num_docs == 2 and clone.document_frequency == cider.document_frequency


def test_cider_d_rejects_bad_corpus():
    with pytest.raises(TypeError, match="one list of reference captions per image"):
        CiderD.from_references(["a dog", "a cat"])
    with pytest.raises(ValueError, match="at least one"):
        CiderD.from_references([])


def test_bleu_hand_computed():
    # cand "a b c d", ref "a b c e f": p1 = 3/4, p2 = 2/3, p3 = 1/2, p4 = 0 (smoothed to ~1e-15)
    # closest ref length 5 > 4 -> brevity penalty exp(1 - 5/4) = exp(-0.25)
    got = bleu("a b c d".split(), ["a b c e f".split()])
    bp = math.exp(-0.25)
    assert got[0] == pytest.approx(0.75 * bp, rel=1e-9)
    assert got[1] == pytest.approx(math.sqrt(0.75 * 2 / 3) * bp, rel=1e-9)
    assert got[2] == pytest.approx((0.75 * 2 / 3 * 0.5) ** (1 / 3) * bp, rel=1e-9)
    assert got[3] == pytest.approx((0.25 * 1e-15) ** 0.25 * bp, rel=1e-6)  # toolkit smoothing


def test_bleu_closest_reference_length_tie_goes_to_shorter():
    # testlen 3; refs of length 2 and 4 are equally close -> reflen 2, no brevity penalty.
    got = bleu("a b c".split(), ["a b".split(), "a b c d".split()])
    assert got[0] == pytest.approx(1.0, abs=1e-9)


def test_rouge_l_hand_computed():
    # LCS("a b c d", "a x c d") = 3 -> p = r = 3/4 -> F = 0.75 for any beta.
    assert rouge_l("a b c d".split(), ["a x c d".split()]) == pytest.approx(0.75)
    # max precision and max recall are taken over references independently (toolkit quirk):
    # ref1 "a" gives p = 1/3, r = 1; ref2 "a b c e f g" gives p = 1, r = 1/2.
    # F = (1 + 1.44) * 1 * 1 / (1 + 1.44 * 1) = 1.0
    assert rouge_l("a b c".split(), ["a".split(), "a b c e f g".split()]) == pytest.approx(1.0)
    assert rouge_l([], ["a".split()]) == 0.0


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=1, max_value=6))
def test_bleu_and_rouge_match_pycocoevalcap(seed, images):
    cands, refs = _dataset(seed, images)
    cands = [c if c else "a" for c in cands]  # the toolkit's ROUGE splits "" into [""]
    gts = {i: r for i, r in enumerate(refs)}
    res = {i: [c] for i, c in enumerate(cands)}
    coco_bleu = Bleu(4).compute_score(gts, res, verbose=0)[1]
    coco_rouge = Rouge().compute_score(gts, res)[1]
    for i, (c, r) in enumerate(zip(cands, refs, strict=True)):
        ours = bleu(c.split(), [x.split() for x in r])
        for k in range(4):
            assert ours[k] == pytest.approx(coco_bleu[k][i], rel=1e-9, abs=1e-15)
        assert rouge_l(c.split(), [x.split() for x in r]) == pytest.approx(coco_rouge[i], abs=1e-12)


CORPUS = [["a dog runs on the grass"], ["a cat sits on a red mat"], ["two men play ball"]]


def test_caption_reward_values_and_reasons():
    reward = CaptionReward("cider_d", corpus=CORPUS)
    perfect = reward.score("p", "A dog runs on the grass.", [], [], captions=CORPUS[0])
    assert perfect.value == pytest.approx(10.0) and perfect.reason is None
    empty = reward.score("p", "  ...  ", [], [], captions=CORPUS[0])
    assert (empty.value, empty.reason) == (0.0, "empty_caption")
    # ROUGE-L through the reward: tokens "a dog runs" vs "a dog runs on the grass": p = 1, r = 1/2
    # F = 2.44 * 0.5 / (0.5 + 1.44) = 0.628866
    rl = CaptionReward("rouge_l")("p", "a dog runs", [], [], captions=CORPUS[0])
    assert rl == pytest.approx(2.44 * 0.5 / 1.94)
    b1 = CaptionReward("bleu1")("p", "a dog runs", [], [], captions=CORPUS[0])
    assert b1 == pytest.approx(math.exp(1 - 6 / 3))  # all unigrams match; BP exp(1 - 6/3)


def test_caption_reward_reads_answer_tag_unless_told_not_to():
    text = "<think>hmm</think><answer>two men play ball</answer>"
    assert CaptionReward("bleu1")("p", text, [], [], captions=CORPUS[2]) == pytest.approx(1.0)
    untagged = CaptionReward("bleu1", use_answer_tag=False)
    assert untagged("p", text, [], [], captions=CORPUS[2]) < 0.9


def test_caption_reward_configuration_errors():
    with pytest.raises(ValueError, match="needs corpus="):
        CaptionReward("cider_d")
    with pytest.raises(ValueError, match="metric must be one of"):
        CaptionReward("meteor")
    with pytest.raises(KeyError, match="captions"):
        CaptionReward("bleu4")("p", "a dog", [], [], answer="x")


def test_cider_d_corpus_mode_equals_pycocoevalcap_to_1e12():
    from vlrollout.rewards.cider import cider_d_corpus

    cands, refs = _dataset(seed=5, images=60)
    cands[0], cands[1] = "", "dog"
    got = cider_d_corpus(cands, refs, tokenizer=whitespace_tokenize)
    ref = _coco_cider(cands, refs)
    assert max(abs(a - b) for a, b in zip(got, ref, strict=True)) <= 1e-12
    assert max(got) > 1.0


@pytest.mark.parametrize("small_batch", [0, 64])  # the sparse path, the dict path
def test_grpo_group_batch_equals_one_by_one_and_pycocoevalcap(small_batch, monkeypatch):
    import vlrollout.rewards.cider as cider_module

    monkeypatch.setattr(cider_module, "SMALL_BATCH", small_batch)
    _, refs = _dataset(seed=6, images=30)
    cider = CiderD.from_references(refs, tokenizer=whitespace_tokenize, cache_size=0)
    rng = random.Random(7)
    group = [_sentence(rng) for _ in range(8)] + ["zebra unseen words zebra", refs[3][0]]
    batch = cider.score_group(group, refs[3])
    single = [cider.score(c, refs[3]) for c in group]
    assert max(abs(a - b) for a, b in zip(batch, single, strict=True)) <= 1e-12
    coco = _coco_cider_fixed_df(group, [refs[3]] * len(group), cider)
    assert max(abs(a - b) for a, b in zip(batch, coco, strict=True)) <= 1e-12
    mixed = cider.score_batch(group[:3] + group[:2], [refs[3]] * 3 + [refs[4]] * 2)
    assert mixed[:3] == pytest.approx(batch[:3], abs=1e-12)
    assert mixed[3:] == pytest.approx([cider.score(c, refs[4]) for c in group[:2]], abs=1e-12)


def test_cider_d_state_is_compact_arrays():
    _, refs = _dataset(seed=8, images=200)
    cider = CiderD.from_references(refs, tokenizer=whitespace_tokenize)
    state = cider.__getstate__()
    assert all(isinstance(a, np.ndarray) for a in state["_keys"] + state["_df"])
    rebuilt = CiderD(cider.document_frequency, cider.num_docs, tokenizer=whitespace_tokenize)
    assert rebuilt.score("a dog runs", refs[0]) == pytest.approx(
        cider.score("a dog runs", refs[0]), abs=1e-12
    )


def test_items_captions_as_tuples_or_arrays_count_in_the_corpus():
    from vlrollout.rewards.plain import PlainReward

    texts = [["a dog runs fast"], ["a cat sleeps here"], ["two birds fly"]]
    as_lists = PlainReward("cider_d", items=[{"captions": t} for t in texts])
    forms = [list, tuple, np.array]
    mixed = PlainReward(
        "cider_d", items=[{"captions": f(t)} for f, t in zip(forms, texts, strict=True)]
    )
    arrays = PlainReward("cider_d", items=[{"captions": np.array(t)} for t in texts])
    want = as_lists.score("two birds fly", captions=["two birds fly"])
    assert want[0] > 1.0
    assert mixed.score("two birds fly", captions=("two birds fly",)) == want
    assert arrays.score("two birds fly", captions=np.array(["two birds fly"])) == want


@pytest.mark.parametrize(
    "captions",
    [["a dog runs fast", None], [{"caption": "a dog runs fast"}], [["a dog"]], [b"a dog"]],
)
def test_a_reference_that_is_not_text_is_refused_naming_it(captions):
    from vlrollout.rewards.plain import PlainReward

    for metric in ("rouge_l", "bleu4"):
        with pytest.raises(ValueError, match=r"captions.*not a string"):
            PlainReward(metric).score("a dog runs fast", captions=captions)
    # One bad item is left out of CIDEr-D's corpus and refused when scored, as the other
    # rewards refuse it: a run goes on without it rather than ending before its first item.
    good = [{"captions": ["a cat sleeps"]}, {"captions": ["a dog runs fast"]}]
    reward = PlainReward("cider_d", items=[*good, {"captions": captions}])
    assert reward.score("a dog runs fast", captions=["a dog runs fast"])[0] > 0
    with pytest.raises(ValueError, match=r"captions.*not a string"):
        reward.score("a dog runs fast", captions=captions)


def test_the_corpus_fingerprint_depends_on_the_counts_not_on_how_they_were_packed():
    refs = [["a dog runs fast", "a brown dog"], ["a cat sleeps here"]]
    built = CiderD.from_references(refs)
    counts = built.document_frequency
    shuffled = dict(reversed(list(counts.items())))
    assert CiderD(shuffled, built.num_docs).fingerprint == built.fingerprint
    assert CiderD.from_references(refs[::-1]).fingerprint == built.fingerprint
    assert CiderD.from_references(refs[:1] + [["a cat"]]).fingerprint != built.fingerprint


def test_rouge_l_keeps_a_token_joined_by_a_non_breaking_space_as_pycocoevalcap_does():
    """Java's PTB tokenizer keeps ``1 1/2`` and ``555 123 4567`` as one token joined by a
    non-breaking space; pycocoevalcap's ROUGE-L splits its lines at spaces only, so it stays one
    token there (BLEU and CIDEr split at any whitespace, and see two)."""
    from vlrollout.eval.metrics.captions import caption_metrics

    candidates = ["add 1/2 cup of flour", "call 555 123 4567 now"]
    references = [["add 1 1/2 cup of flour"], ["call 555 123 4567 now please"]]
    # pycocoevalcap's PTBTokenizer output for these captions (Java, stanford-corenlp 3.4.1):
    java_refs = {0: ["add 1\u00a01/2 cup of flour"], 1: ["call 555\u00a0123\u00a04567 now please"]}
    java_cands = {0: ["add 1/2 cup of flour"], 1: ["call 555\u00a0123\u00a04567 now"]}
    corpus, per_image = Rouge().compute_score(java_refs, java_cands)
    reward = CaptionReward("rouge_l")
    got = [reward("p", c, [], [], captions=r) for c, r in zip(candidates, references, strict=True)]
    assert got == pytest.approx(list(per_image), abs=1e-12)
    assert caption_metrics(candidates, references)["ROUGE-L"] == pytest.approx(corpus, abs=1e-12)


@pytest.mark.parametrize("captions", [[""], ["...", "!"], ["  ", "."]])
def test_references_without_a_word_are_refused_as_eval_refuses_them(captions):
    """No reference word to match: every caption would score 0, and the group would count as
    all-equal; ``vlrollout eval`` refuses such an item, and so does the reward (reward_error)."""
    for metric in ("rouge_l", "bleu4", "cider_d"):
        corpus = [["a dog runs"], ["a cat sleeps"]] if metric == "cider_d" else None
        reward = CaptionReward(metric, corpus=corpus)
        with pytest.raises(ValueError, match="no word"):
            reward.score("p", "a dog runs", [], [], captions=captions)
