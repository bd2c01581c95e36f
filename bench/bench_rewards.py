"""Reward throughput: CIDEr-D (ours vs pycocoevalcap's CiderScorer) and box IoU / matching.

Run: ``.venv/bin/python bench/bench_rewards.py`` (about 20-40 s on 2 CPU cores).

Inputs are synthetic COCO-like captions (seeded), whitespace-tokenized for both implementations.
Every ours-vs-pycocoevalcap row computes the same scores on both sides, gets the same number of
tries (``TRIES``, the best kept) and reports the largest score difference between the outputs of
exactly the calls it timed:

- **corpus mode** (``IMAGES`` images): document frequencies from the scored references, as
  pycocoevalcap's ``Cider().compute_score``; ours is :func:`cider_d_corpus`.
- **GRPO batch** (``GRPO_IMAGES`` images x ``REFS`` references x ``GROUP`` candidates): what
  pycocoevalcap does with a GRPO batch, scoring it flattened (each image's references repeated
  once per candidate, so the document frequencies count each image ``GROUP`` times); ours builds
  :class:`CiderD` over those same flattened references and scores the batch with
  ``score_batch`` (each distinct reference set tokenized and counted once).

One more row is **not** the same computation and is labelled so: the fixed-corpus reward our
``CaptionReward`` offers (document frequencies counted once over a fixed reference corpus, here
the batch's ``GRPO_IMAGES`` images, built once before training; the same batch then scored with
``score_batch``): what a fixed corpus saves is counting document frequencies for every batch. Its
scores differ from pycocoevalcap's (other document frequencies), so it has no score difference
and is not in the headline; its df build time is listed apart. The per-sample reward path (one
caption per call) and box IoU / matching are listed for reference.
Headline (last): the worse of the two same-work ratios.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import record  # noqa: E402
from pycocoevalcap.cider.cider_scorer import CiderScorer  # noqa: E402

from vlrollout.rewards.box_scores import match_boxes, pairwise_iou  # noqa: E402
from vlrollout.rewards.cider import CiderD, cider_d_corpus  # noqa: E402
from vlrollout.rewards.text_tokenize import whitespace_tokenize  # noqa: E402

IMAGES, REFS, GROUP, GRPO_IMAGES = 1000, 5, 8, 500
TRIES = 3
T = TypeVar("T")


def sentence(rng: random.Random, vocab: list[str]) -> str:
    return " ".join(rng.choice(vocab) for _ in range(rng.randint(8, 14)))


def timed(fn: Callable[[], T], tries: int = TRIES) -> tuple[float, T]:
    """Best seconds over ``tries`` calls, and the output of the call that took them."""
    best, best_out = float("inf"), None
    for _ in range(tries):
        t0 = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - t0
        if elapsed < best:
            best, best_out = elapsed, out
    return best, best_out  # type: ignore[return-value]


def max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def coco_corpus(cands: list[str], refs: list[list[str]]) -> list[float]:
    """pycocoevalcap's CiderScorer over the pairs (its df from the scored references)."""
    scorer = CiderScorer(n=4, sigma=6.0)
    for c, r in zip(cands, refs, strict=True):
        scorer += (c, r)
    return list(scorer.compute_score()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    record.add_record_dir(parser)
    args = parser.parse_args(argv)
    started = record.Run("rewards", argv)
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(300)] + ["a", "the", "on", "with", "of"] * 20
    refs = [[sentence(rng, vocab) for _ in range(REFS)] for _ in range(IMAGES)]
    cands = [sentence(rng, vocab) for _ in range(IMAGES)]
    rows: list[tuple[str, str, str]] = []

    # Corpus mode: df from the scored references, as pycocoevalcap's Cider().compute_score.
    t_coco, coco_scores = timed(lambda: coco_corpus(cands, refs))
    t_ours, our_scores = timed(lambda: cider_d_corpus(cands, refs, tokenizer=whitespace_tokenize))
    diff = max_diff(our_scores, coco_scores)

    # GRPO batch: both sides score the flattened batch with its own df (each image GROUP times).
    g_refs = refs[:GRPO_IMAGES]
    group = [[sentence(rng, vocab) for _ in range(GROUP)] for _ in g_refs]
    flat_c = [c for g in group for c in g]
    flat_r = [r for r, g in zip(g_refs, group, strict=True) for _ in g]
    t_coco_g, coco_g = timed(lambda: coco_corpus(flat_c, flat_r))

    def ours_grpo() -> list[float]:
        cider = CiderD.from_references(flat_r, tokenizer=whitespace_tokenize, cache_size=0)
        return cider.score_batch(flat_c, flat_r)

    t_grpo, ours_g = timed(ours_grpo)
    diff_g = max_diff(ours_g, coco_g)

    # Fixed corpus (not the same scores): df over the GRPO_IMAGES reference sets, built once.
    t_df, fixed = timed(
        lambda: CiderD.from_references(g_refs, tokenizer=whitespace_tokenize, cache_size=0)
    )
    t_fixed, _ = timed(lambda: fixed.score_batch(flat_c, flat_r))
    per_sample = CiderD.from_references(g_refs, tokenizer=whitespace_tokenize)  # default cache
    per_sample.score(flat_c[0], g_refs[0])
    t_single, _ = timed(lambda: [per_sample.score(c, g_refs[0]) for c in flat_c[:200]], 1)
    n_grpo = len(flat_c)
    r_corpus, r_grpo, r_fixed = t_coco / t_ours, t_coco_g / t_grpo, t_coco_g / t_fixed

    grpo = f"GRPO batch {GRPO_IMAGES}x{REFS} refs x{GROUP}"
    rows.append((f"CIDEr-D corpus mode, {IMAGES} images: pycocoevalcap CiderScorer",
                 f"{IMAGES / t_coco:,.0f} captions/s", f"{t_coco * 1e3:.0f} ms"))  # fmt: skip
    rows.append((f"CIDEr-D corpus mode, {IMAGES} images: ours cider_d_corpus",
                 f"{IMAGES / t_ours:,.0f} captions/s", f"{t_ours * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D corpus mode: ours / pycocoevalcap (same scores)", f"{r_corpus:.1f}x",
                 f"max|diff| {diff:.1e}"))  # fmt: skip
    rows.append((f"CIDEr-D {grpo}: pycocoevalcap, flattened",
                 f"{n_grpo / t_coco_g:,.0f} captions/s", f"{t_coco_g * 1e3:.0f} ms"))  # fmt: skip
    rows.append((f"CIDEr-D {grpo}: ours, same df, build + score_batch",
                 f"{n_grpo / t_grpo:,.0f} captions/s", f"{t_grpo * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D GRPO batch: ours / pycocoevalcap (same scores)", f"{r_grpo:.1f}x",
                 f"max|diff| {diff_g:.1e}"))  # fmt: skip
    rows.append((f"CIDEr-D {grpo}: ours, fixed corpus, score_batch",
                 f"{n_grpo / t_fixed:,.0f} captions/s", f"{t_fixed * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D fixed corpus / pycocoevalcap (other df: not the same scores)",
                 f"{r_fixed:.1f}x", ""))  # fmt: skip
    rows.append((f"CIDEr-D ours, fixed corpus df build alone ({GRPO_IMAGES} ref sets)", "",
                 f"{t_df * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D ours, one caption per call, references cached (per-sample reward)",
                 f"{200 / t_single:,.0f} captions/s", f"{t_single * 1e3:.0f} ms"))  # fmt: skip

    brng = random.Random(1)

    def rand_box() -> tuple[float, float, float, float]:
        x, y = brng.uniform(0, 600), brng.uniform(0, 440)
        return (x, y, x + brng.uniform(1, 200), y + brng.uniform(1, 200))

    singles = [(rand_box(), rand_box()) for _ in range(2000)]
    t_iou, _ = timed(lambda: [pairwise_iou([a], [b]) for a, b in singles], 1)
    rows.append(("IoU per sample (1x1, NumPy path, torchvision formula)",
                 f"{len(singles) / t_iou:,.0f} pairs/s", f"{t_iou * 1e3:.0f} ms"))  # fmt: skip
    samples = [([rand_box() for _ in range(5)], [rand_box() for _ in range(5)]) for _ in range(500)]
    t_match, _ = timed(lambda: [match_boxes(p, g) for p, g in samples], 1)
    rows.append(("Hungarian match 5 pred x 5 gt per sample",
                 f"{25 * len(samples) / t_match:,.0f} pairs/s "
                 f"({len(samples) / t_match:,.0f} samples/s)", f"{t_match * 1e3:.0f} ms"))  # fmt: skip

    # Last: torch's intra-op thread pool keeps spinning briefly and slows later pure-Python work.
    big_a = [rand_box() for _ in range(1000)]
    big_b = [rand_box() for _ in range(1000)]
    t_big, _ = timed(lambda: pairwise_iou(big_a, big_b))
    rows.append(("IoU matrix 1000x1000 (torchvision box_iou)",
                 f"{1e6 / t_big:,.0f} pairs/s", f"{t_big * 1e3:.0f} ms"))  # fmt: skip

    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{width}}  {'throughput':>34}  {'time':>8}")
    print("-" * (width + 46))
    for name, rate, t in rows:
        print(f"{name:<{width}}  {rate:>34}  {t:>8}")
    print("-" * (width + 46))
    worst = min(r_corpus, r_grpo)
    headline = (
        f"HEADLINE: CIDEr-D ours vs pycocoevalcap captions/s, same scores, best of {TRIES} each: "
        f"corpus mode {r_corpus:.1f}x, GRPO batch {r_grpo:.1f}x (worst {worst:.1f}x, target "
        f">= 10x); max abs diff {max(diff, diff_g):.1e} (target <= 1e-12)"
    )
    print(headline)

    def cider_row(what: str, n: int, ref_s: float, ours_s: float, d: float | None) -> list[str]:
        return [what, f"{n / ref_s:,.0f}", f"{n / ours_s:,.0f}", f"{ref_s / ours_s:.1f}x",
                "-" if d is None else f"{d:.1e}"]  # fmt: skip

    table = record.Table(
        ["CIDEr-D case", "pycocoevalcap captions/s", "ours captions/s", "ours/pycocoevalcap",
         "max score difference"],
        [cider_row(f"corpus mode, {IMAGES} images", IMAGES, t_coco, t_ours, diff),
         cider_row(f"GRPO batch, {GRPO_IMAGES} images x {REFS} refs x {GROUP} candidates, same "
                   "df on both sides", n_grpo, t_coco_g, t_grpo, diff_g),
         cider_row(f"the same GRPO batch, ours with a fixed corpus (df over the {GRPO_IMAGES} "
                   f"reference sets, built once beforehand in {t_df * 1e3:.0f} ms): other df, "
                   "so other scores; not the same work",
                   n_grpo, t_coco_g, t_fixed, None)],
        title=f"best of {TRIES} tries on each side",
    )  # fmt: skip
    numbers = {
        "tries": TRIES,
        "corpus_coco_s": t_coco, "corpus_ours_s": t_ours, "corpus_ratio": r_corpus,
        "corpus_max_diff": diff,
        "grpo_coco_s": t_coco_g, "grpo_ours_s": t_grpo, "grpo_ratio": r_grpo,
        "grpo_max_diff": diff_g,
        "fixed_corpus_df_build_s": t_df, "fixed_corpus_score_s": t_fixed,
        "fixed_corpus_ratio": r_fixed,
    }  # fmt: skip
    record.write(started.record([table], headline, numbers), args.record_dir)
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
