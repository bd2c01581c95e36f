"""Corpus caption metrics on raw text against pycocoevalcap 1.2 on the Java tokenizer's tokens.

pycocoevalcap's ``PTBTokenizer`` runs Java (absent here), so the reference side uses Java's tokens
recorded in ``tests/rewards/fixtures/ptb_tokens.json`` (raw captions with punctuation, case,
numbers, brackets and Unicode; regenerated with ``scripts/make_ptb_fixture.py``), joined with
spaces as the toolkit joins them, and scored by the toolkit's ``Bleu(4)``, ``Rouge`` and ``Cider``
over the whole split. Our side takes the raw captions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge

from vlrollout.eval.metrics.captions import CAPTION_METRICS, caption_metrics, corpus_bleu
from vlrollout.eval.tasks import CaptionTask

FIXTURE = Path(__file__).parents[1] / "rewards" / "fixtures" / "ptb_tokens.json"


def _images() -> tuple[list[str], list[list[str]], dict[str, str]]:
    """Groups of 5 fixture captions: one is the prediction, the other 4 its references.

    In two groups of three the prediction is the group's shortest caption, in the third its
    longest, so the split's candidates are shorter than their closest references (the brevity
    penalty applies) and closest differs from shortest. The first prediction is replaced by an
    empty caption (no tokens on either side).
    """
    records = json.loads(FIXTURE.read_text())
    java = {r["text"]: " ".join(r["tokens"]) for r in records}
    texts = [r["text"] for r in records if r["tokens"]]
    preds, refs = [], []
    for n, i in enumerate(range(0, len(texts) - 4, 5)):
        group = sorted(texts[i : i + 5], key=lambda t: len(java[t].split()))
        pick = group[-1] if n % 3 == 2 else group[0]
        preds.append(pick)
        refs.append([t for t in texts[i : i + 5] if t != pick])
    java[""] = ""
    return [""] + preds[1:], refs, java


def _closest_length_ratio(preds: list[str], refs: list[list[str]], java: dict[str, str]) -> float:
    test = ref = 0
    for p, rs in zip(preds, refs, strict=True):
        n = len(java[p].split())
        test += n
        ref += min((abs(len(java[r].split()) - n), len(java[r].split())) for r in rs)[1]
    return test / ref


def _coco(preds: list[str], refs: list[list[str]], java: dict[str, str]) -> dict[str, float]:
    gts = {i: [java[r] for r in rs] for i, rs in enumerate(refs)}
    res = {i: [java[p]] for i, p in enumerate(preds)}
    bleu = Bleu(4).compute_score(gts, res, verbose=0)[0]
    out = dict(zip(CAPTION_METRICS[:4], bleu, strict=True))
    out["ROUGE-L"] = float(Rouge().compute_score(gts, res)[0])
    out["CIDEr-D"] = float(Cider().compute_score(gts, res)[0])
    return out


def _assert_equal(ours: dict[str, float], ref: dict[str, float]) -> None:
    assert set(ours) == set(ref)
    for name in ref:
        assert ours[name] == pytest.approx(ref[name], abs=1e-9), name


def test_raw_captions_equal_pycocoevalcap_over_the_split_and_per_split():
    preds, refs, java = _images()
    assert any(ord(c) > 127 for rs in refs for r in rs for c in r)  # Unicode is in the fixture
    assert _closest_length_ratio(preds, refs, java) < 1  # the brevity penalty is exercised
    _assert_equal(caption_metrics(preds, refs), _coco(preds, refs, java))
    half = len(preds) // 2
    for part in (slice(0, half), slice(half, None)):
        _assert_equal(
            caption_metrics(preds[part], refs[part]), _coco(preds[part], refs[part], java)
        )


def test_caption_task_scores_and_aggregates_as_pycocoevalcap():
    preds, refs, java = _images()
    task = CaptionTask()
    items = {
        f"c{i}": {"id": f"c{i}", "captions": r, "images": ["x.png"]} for i, r in enumerate(refs)
    }
    scores = [task.score(items[f"c{i}"], f"  {p}\n", [], "qwen2_vl") for i, p in enumerate(preds)]
    assert scores[0].details["reason"] == "empty_caption"
    assert task.aggregate(scores, items) == pytest.approx(_coco(preds, refs, java), abs=1e-9)
    per_image = Bleu(4).compute_score(
        {0: [java[r] for r in refs[1]]}, {0: [java[preds[1]]]}, verbose=0
    )[1][3][0]
    assert scores[1].values["BLEU-4"] == pytest.approx(per_image, abs=1e-12)


def test_corpus_bleu_sums_counts_over_the_split():
    # Hand-derived: image 1 "a b" vs "a b": 2/2 unigrams, 1/1 bigram; image 2 "c d" vs "x y z":
    # 0/2, 0/1. Corpus: unigrams 2/4, bigrams 1/2, lengths 4 vs 2 + 3 = 5 (closest reference):
    # BLEU-1 = 0.5 * exp(1 - 5/4), BLEU-2 = sqrt(0.5 * 0.5) * exp(1 - 5/4). The mean of the
    # sentence scores would be about 0.5 for BLEU-1 (no penalty on image 1).
    got = corpus_bleu([["a", "b"], ["c", "d"]], [[["a", "b"]], [["x", "y", "z"]]], 2)
    penalty = 0.7788007830714049  # exp(-0.25)
    assert got == pytest.approx([0.5 * penalty, 0.5 * penalty], abs=1e-9)
    # The closest reference length (4 for a 3-token candidate, not the shortest 1); a tie goes to
    # the shorter reference (2 tokens between 1 and 3: no penalty).
    one = corpus_bleu([["a", "b", "c"]], [[["a"], ["a", "b", "c", "d"]]], 1)
    assert one == pytest.approx([0.7165313105737893], abs=1e-9)  # exp(1 - 4/3)
    assert corpus_bleu([["a", "b"]], [[["a", "b", "c"], ["a"]]], 1) == pytest.approx([1.0])
    with pytest.raises(ValueError, match=r"references\[0\] is empty"):
        corpus_bleu([["a"]], [[]])
