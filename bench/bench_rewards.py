"""Reward throughput: CIDEr-D (ours vs pycocoevalcap's CiderScorer) and box IoU / matching.

Run: ``.venv/bin/python bench/bench_rewards.py`` (about 10-20 s on 2 CPU cores).

Inputs are synthetic COCO-like captions (seeded), whitespace-tokenized for both implementations.
The comparable setting is pycocoevalcap's corpus mode: its document frequencies come from the
scored batch, so ours is built from the same references and must give the same numbers (the max
absolute difference is printed). pycocoevalcap cannot score one caption at a time with fixed
document frequencies; that is the per-sample mode our reward uses.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pycocoevalcap.cider.cider_scorer import CiderScorer  # noqa: E402

from vlrollout.rewards.box_scores import match_boxes, pairwise_iou  # noqa: E402
from vlrollout.rewards.caption import CiderD  # noqa: E402
from vlrollout.rewards.text_tokenize import whitespace_tokenize  # noqa: E402

IMAGES, REFS, GROUP = 1000, 5, 8


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

    def coco():
        scorer = CiderScorer(n=4, sigma=6.0)
        for c, r in zip(cands, refs, strict=True):
            scorer += (c, r)
        return scorer.compute_score()[1]

    t_coco, coco_scores = timed(coco, repeat=2)

    def ours_cold():
        cider = CiderD.from_references(refs, tokenizer=whitespace_tokenize, cache_size=0)
        return [cider.score(c, r) for c, r in zip(cands, refs, strict=True)]

    t_ours, our_scores = timed(ours_cold, repeat=2)
    diff = max(abs(a - b) for a, b in zip(our_scores, coco_scores, strict=True))

    cider = CiderD.from_references(refs, tokenizer=whitespace_tokenize)
    t_df, _ = timed(lambda: CiderD.from_references(refs, tokenizer=whitespace_tokenize))
    group = [[sentence(rng, vocab) for _ in range(GROUP)] for _ in range(IMAGES // 4)]

    def ours_grpo():
        return [cider.score(c, refs[i]) for i, g in enumerate(group) for c in g]

    t_grpo, _ = timed(ours_grpo)
    n_grpo = len(group) * GROUP

    rows.append(("CIDEr-D pycocoevalcap CiderScorer (batch, df from batch)",
                 f"{IMAGES / t_coco:,.0f} captions/s", f"{t_coco * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D ours, df build + per-sample, no ref cache",
                 f"{IMAGES / t_ours:,.0f} captions/s", f"{t_ours * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D ours, df built once (one-off cost)", f"{IMAGES} ref sets",
                 f"{t_df * 1e3:.0f} ms"))  # fmt: skip
    rows.append((f"CIDEr-D ours, GRPO groups of {GROUP}, ref cache",
                 f"{n_grpo / t_grpo:,.0f} captions/s", f"{t_grpo * 1e3:.0f} ms"))  # fmt: skip
    rows.append(("CIDEr-D max |ours - pycocoevalcap| (same df)", f"{diff:.2e}", ""))

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
    print(
        f"HEADLINE: CIDEr-D ours {IMAGES / t_ours:,.0f} vs pycocoevalcap {IMAGES / t_coco:,.0f} "
        f"captions/s on the same {IMAGES} captions = {t_coco / t_ours:.2f}x "
        f"(max abs diff {diff:.1e})"
    )


if __name__ == "__main__":
    main()
