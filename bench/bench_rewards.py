"""Reward throughput: CIDEr-D (ours vs pycocoevalcap's CiderScorer) and box IoU / matching.

Run: ``.venv/bin/python bench/bench_rewards.py`` (about 10-20 s on 2 CPU cores).

Inputs are synthetic COCO-like captions (seeded), whitespace-tokenized for both implementations.
Two CIDEr-D settings, each timed side by side with pycocoevalcap's ``CiderScorer`` in one run and
checked for equal scores (max absolute difference printed): corpus mode (df from the scored
references) and GRPO-shaped batches (images x 5 references x 8 candidates; ours includes building
the df). The per-sample reward path (one caption per call) is listed for reference.
Headline (last): the worse of the two ratios.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pycocoevalcap.cider.cider_scorer import CiderScorer  # noqa: E402

from vlrollout.rewards.box_scores import match_boxes, pairwise_iou  # noqa: E402
from vlrollout.rewards.cider import CiderD, cider_d_corpus  # noqa: E402
from vlrollout.rewards.text_tokenize import whitespace_tokenize  # noqa: E402

IMAGES, REFS, GROUP, GRPO_IMAGES = 1000, 5, 8, 500


def sentence(rng: random.Random, vocab: list[str]) -> str:
    return " ".join(rng.choice(vocab) for _ in range(rng.randint(8, 14)))


def timed(fn, repeat: int = 1):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(300)] + ["a", "the", "on", "with", "of"] * 20
    refs = [[sentence(rng, vocab) for _ in range(REFS)] for _ in range(IMAGES)]
    cands = [sentence(rng, vocab) for _ in range(IMAGES)]
    rows: list[tuple[str, str, str]] = []

    def coco_corpus(cs, rs):
        scorer = CiderScorer(n=4, sigma=6.0)
        for c, r in zip(cs, rs, strict=True):
            scorer += (c, r)
        return scorer.compute_score()[1]

    # Corpus mode: df from the scored references, as pycocoevalcap's Cider().compute_score.
    t_coco, coco_scores = timed(lambda: coco_corpus(cands, refs), repeat=2)
    t_ours, our_scores = timed(
        lambda: cider_d_corpus(cands, refs, tokenizer=whitespace_tokenize), repeat=3
    )
    diff = max(abs(a - b) for a, b in zip(our_scores, coco_scores, strict=True))

    # GRPO-shaped: GRPO_IMAGES images x REFS refs x GROUP candidates. pycocoevalcap scores the
    # flattened batch (each image's references repeated GROUP times: df and N scale together, so
    # idf equals the df of the GRPO_IMAGES images); ours builds df from those images once and
    # scores each group as one batch.
    g_refs = refs[:GRPO_IMAGES]
    group = [[sentence(rng, vocab) for _ in range(GROUP)] for _ in g_refs]
    flat_c = [c for g in group for c in g]
    flat_r = [r for r, g in zip(g_refs, group, strict=True) for _ in g]
    t_coco_g, coco_g = timed(lambda: coco_corpus(flat_c, flat_r), repeat=2)

    def ours_grpo():
        cider = CiderD.from_references(g_refs, tokenizer=whitespace_tokenize, cache_size=0)
        return cider, cider.score_batch(flat_c, flat_r)  # each reference set counted once

    t_grpo, (cider, _) = timed(ours_grpo, repeat=3)
    t_df, _ = timed(lambda: CiderD.from_references(g_refs, tokenizer=whitespace_tokenize), 3)
    # Same numbers as pycocoevalcap's flattened batch need its df (each image GROUP times, N =
    # GROUP x images: n-grams seen only in candidates get idf log(N) there).
    same_df = CiderD.from_references(flat_r, tokenizer=whitespace_tokenize, cache_size=0)
    diff_g = max(
        abs(a - b) for a, b in zip(same_df.score_batch(flat_c, flat_r), coco_g, strict=True)
    )
    per_sample = CiderD.from_references(g_refs, tokenizer=whitespace_tokenize)  # default cache
    per_sample.score(flat_c[0], g_refs[0])
    t_single, _ = timed(lambda: [per_sample.score(c, g_refs[0]) for c in flat_c[:200]])
    n_grpo = len(flat_c)
    r_corpus, r_grpo = t_coco / t_ours, t_coco_g / t_grpo

    rows.append((f"CIDEr-D corpus mode, {IMAGES} images: pycocoevalcap CiderScorer",
                 f"{IMAGES / t_coco:,.0f} captions/s", f"{t_coco * 1e3:.0f} ms"))  # fmt: skip
    rows.append((f"CIDEr-D corpus mode, {IMAGES} images: ours cider_d_corpus",
                 f"{IMAGES / t_ours:,.0f} captions/s", f"{t_ours * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D corpus mode: ours / pycocoevalcap", f"{r_corpus:.1f}x",
                 f"max|diff| {diff:.1e}"))  # fmt: skip
    rows.append((f"CIDEr-D GRPO {GRPO_IMAGES}x{REFS} refs x{GROUP}: pycocoevalcap",
                 f"{n_grpo / t_coco_g:,.0f} captions/s", f"{t_coco_g * 1e3:.0f} ms"))  # fmt: skip
    rows.append((f"CIDEr-D GRPO {GRPO_IMAGES}x{REFS} refs x{GROUP}: ours, df build + groups",
                 f"{n_grpo / t_grpo:,.0f} captions/s", f"{t_grpo * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D GRPO: ours / pycocoevalcap", f"{r_grpo:.1f}x",
                 f"max|diff| {diff_g:.1e}"))  # fmt: skip
    rows.append((f"CIDEr-D ours, df build alone ({GRPO_IMAGES} ref sets)", "",
                 f"{t_df * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D ours, one caption per call, references cached (per-sample reward)",
                 f"{200 / t_single:,.0f} captions/s", f"{t_single * 1e3:.0f} ms"))  # fmt: skip

    brng = random.Random(1)

    def rand_box():
        x, y = brng.uniform(0, 600), brng.uniform(0, 440)
        return (x, y, x + brng.uniform(1, 200), y + brng.uniform(1, 200))

    singles = [(rand_box(), rand_box()) for _ in range(2000)]
    t_single, _ = timed(lambda: [pairwise_iou([a], [b]) for a, b in singles])
    rows.append(("IoU per sample (1x1, NumPy path, torchvision formula)",
                 f"{len(singles) / t_single:,.0f} pairs/s", f"{t_single * 1e3:.0f} ms"))  # fmt: skip
    samples = [([rand_box() for _ in range(5)], [rand_box() for _ in range(5)]) for _ in range(500)]
    t_match, _ = timed(lambda: [match_boxes(p, g) for p, g in samples])
    rows.append(("Hungarian match 5 pred x 5 gt per sample",
                 f"{25 * len(samples) / t_match:,.0f} pairs/s "
                 f"({len(samples) / t_match:,.0f} samples/s)", f"{t_match * 1e3:.0f} ms"))  # fmt: skip

    # Last: torch's intra-op thread pool keeps spinning briefly and slows later pure-Python work.
    big_a = [rand_box() for _ in range(1000)]
    big_b = [rand_box() for _ in range(1000)]
    t_big, _ = timed(lambda: pairwise_iou(big_a, big_b), repeat=3)
    rows.append(("IoU matrix 1000x1000 (torchvision box_iou)",
                 f"{1e6 / t_big:,.0f} pairs/s", f"{t_big * 1e3:.0f} ms"))  # fmt: skip

    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{width}}  {'throughput':>34}  {'time':>8}")
    print("-" * (width + 46))
    for name, rate, t in rows:
        print(f"{name:<{width}}  {rate:>34}  {t:>8}")
    print("-" * (width + 46))
    worst = min(r_corpus, r_grpo)
    print(
        f"HEADLINE: CIDEr-D ours vs pycocoevalcap captions/s: corpus mode {r_corpus:.1f}x, "
        f"GRPO groups {r_grpo:.1f}x (worst {worst:.1f}x, target >= 10x); "
        f"max abs diff {max(diff, diff_g):.1e} (target <= 1e-12)"
    )


if __name__ == "__main__":
    from entry import run

    run(main)
