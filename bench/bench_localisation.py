"""Does a tiny model localise at all? Where its greedy grounding boxes land, against image-blind
guessing.

Every synthetic shape lies inside one grid cell, and each cell is exactly one merged image token
(:mod:`vlrollout.tiny.synthetic`), so "which cell is the box's centre in" separates localising
from guessing better than mean IoU does: a box of the usual size near the image centre earns some
IoU without looking at the image. Per model and number of shapes this prints mean IoU, the
fraction of boxes whose centre is in the target's cell (and its row, its column, any shape's
cell), the same for a uniformly random cell (chance), and the image-blind ceiling: the most
frequent target cell for each image size, counted on the very items scored (an upper bound for
any answer that ignores the pixels, inflated by the sample's luck). A model whose cell accuracy
is no better than those does not localise, and RL has no image-dependent behaviour in its
samples to reinforce.

    .venv/bin/python bench/bench_localisation.py        # the shipped model, the grounding start
    .venv/bin/python bench/bench_localisation.py --models assets/tiny-qwen2vl runs/my-model
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from entry import positive_int  # noqa: E402

from vlrollout.tiny.synthetic import cell_of  # noqa: E402

SHAPE_COUNTS = (1, 2, 3, 4)
# The shipped model and the grounding recipe's starting checkpoint.
DEFAULT_MODELS = ("assets/tiny-qwen2vl", "assets/tiny-qwen3vl-ground")


@dataclass(frozen=True)
class Localisation:
    """Where one model's boxes land on one set of grounding items.

    Attributes:
        n: Items scored.
        mean_iou: Mean IoU with the target box (an unparsable answer scores 0).
        cell: Fraction of boxes whose centre is in the target's grid cell.
        row: ... in the target's row of cells.
        column: ... in the target's column of cells.
        any_shape: ... in the cell of any shape of the image (the target or a distractor).
        chance: ``cell`` of a uniformly random cell: the mean of 1 / cells over the items.
        blind_cell: The image-blind ceiling for ``cell``: per image size, the most frequent target
            cell's share of these items (above ``chance`` by the luck of a small sample).
        unparsable: Answers with no box.
    """

    n: int
    mean_iou: float
    cell: float
    row: float
    column: float
    any_shape: float
    chance: float
    blind_cell: float
    unparsable: int


def _cells(size: Sequence[int]) -> int:
    from vlrollout.tiny.synthetic import IMAGE_GRIDS

    cols, rows = IMAGE_GRIDS[tuple(size)]
    return cols * rows


def blind_ceiling(items: Sequence[dict[str, Any]]) -> float:
    """The best accuracy of an answer that sees only the image size: per size, the most frequent
    target cell, counted on ``items`` themselves."""
    by_size: dict[tuple[int, int], Counter] = {}
    for it in items:
        size = tuple(it["image_size"])
        by_size.setdefault(size, Counter())[cell_of(it["boxes"][0], size)] += 1
    return sum(c.most_common(1)[0][1] for c in by_size.values()) / len(items)


def score(items: Sequence[dict[str, Any]], completions: Sequence[str]) -> Localisation:
    """Score greedy ``completions`` (Qwen2-VL box text, one per item) on grounding ``items``."""
    from vlrollout.tiny.evaluate import box_iou
    from vlrollout.tiny.synthetic import parse_qwen2vl_box

    ious, cell, row, column, any_shape, unparsable = [], 0, 0, 0, 0, 0
    for it, text in zip(items, completions, strict=True):
        size, target = it["image_size"], it["boxes"][0]
        box = parse_qwen2vl_box(text, *size)
        if box is None:
            ious.append(0.0)
            unparsable += 1
            continue
        ious.append(box_iou(box, target))
        got, want = cell_of(box, size), cell_of(target, size)
        cell += got == want
        column += got[0] == want[0]
        row += got[1] == want[1]
        any_shape += got in {cell_of(s["box"], size) for s in it["shapes"]}
    n = len(items)
    return Localisation(
        n=n,
        mean_iou=statistics.fmean(ious),
        cell=cell / n,
        row=row / n,
        column=column / n,
        any_shape=any_shape / n,
        chance=statistics.fmean(1 / _cells(it["image_size"]) for it in items),
        blind_cell=blind_ceiling(items),
        unparsable=unparsable,
    )


def greedy_answers(model_path: str, items: Sequence[dict[str, Any]]) -> list[str]:
    """The saved model's greedy answers to ``items`` (the tiny model's own evaluation decoding;
    ``bench_counting.py`` uses it too)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from vlrollout.tiny.evaluate import greedy_completions

    processor = AutoProcessor.from_pretrained(model_path)
    model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32)
    return greedy_completions(model.eval(), processor, items)


def results_table(
    results: dict[str, dict[str, Localisation]], items: int, seed: int
) -> record.Table:
    """One row per model and item set, as printed and recorded."""
    return record.Table(
        [
            "model",
            "shapes",
            "mean IoU",
            "cell",
            "chance",
            "blind ceiling",
            "row",
            "column",
            "any shape",
        ],
        [
            [
                path,
                k,
                f"{r.mean_iou:.3f}",
                f"{r.cell:.3f}",
                f"{r.chance:.3f}",
                f"{r.blind_cell:.3f}",
                f"{r.row:.3f}",
                f"{r.column:.3f}",
                f"{r.any_shape:.3f}",
            ]
            for path, by_set in results.items()
            for k, r in by_set.items()
        ],
        title=f"greedy boxes on {items} held-out items per shape count (seed {seed}): "
        "fraction whose centre is in the target's cell / row / column / any shape's cell",
    )


def model_arguments(
    doc: str, models: Sequence[str], items: int, items_help: str, argv: list[str] | None
) -> argparse.Namespace:
    """The arguments of a benchmark that scores saved models on held-out synthetic items
    (``--models``, ``--items``, ``--seed``, ``--record-dir``); a folder without a saved model is
    a usage error before any model loads (``bench_counting.py`` uses it too)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(models))
    ap.add_argument("--items", type=positive_int, default=items, help=items_help)
    ap.add_argument("--seed", type=int, default=200, help="item seed (the recipes' eval_seed)")
    record.add_record_dir(ap)
    args = ap.parse_args(argv)
    missing = [path for path in args.models if not (Path(path) / "config.json").is_file()]
    if missing:
        ap.error(f"--models: no saved model (config.json) in {', '.join(missing)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = model_arguments(__doc__, DEFAULT_MODELS, 200, "held-out items per shape count", argv)
    from vlrollout.tiny.synthetic import make_item

    started = record.Run("localisation", argv)
    sets = {
        **{
            str(k): [make_item("ground", args.seed, i, n_shapes=k) for i in range(args.items)]
            for k in SHAPE_COUNTS
        },
        "1-4": [make_item("ground", args.seed, i) for i in range(args.items)],
    }
    results: dict[str, dict[str, Localisation]] = {}
    for path in args.models:
        results[path] = {k: score(items, greedy_answers(path, items)) for k, items in sets.items()}
        print(f"scored {path}", flush=True)
    table = results_table(results, args.items, args.seed)
    print(f"\n{table.text()}")
    one = {path: by_set["1"] for path, by_set in results.items()}
    line = "headline: one-shape images, boxes in the target's cell: " + "; ".join(
        f"{path} {r.cell:.3f} (a random cell {r.chance:.3f}, image-blind ceiling {r.blind_cell:.3f})"
        for path, r in one.items()
    )
    print(line)
    numbers = {path: {k: asdict(r) for k, r in by_set.items()} for path, by_set in results.items()}
    default = args.models == list(DEFAULT_MODELS) and args.items == 200 and args.seed == 200
    mode = "default" if default else "changed: " + " ".join(argv or sys.argv[1:])
    record.write(started.record([table], line, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
