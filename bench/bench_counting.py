"""Where a tiny model's counting answers go wrong: held-out greedy accuracy by background, by
number of shapes and by image size, and the most frequent wrong answers.

A single accuracy hides where the errors are. The synthetic images (:mod:`vlrollout.tiny.synthetic`)
have one of three plain backgrounds, 1-4 shapes that never touch and four image sizes, so a model
that has learned to count gets every slice right, and a slice far below the others says what the
model has not learned, which no RL recipe on that model can be expected to fix within a few
minutes. Answers are read as the count reward reads them (:func:`vlrollout.tiny.rewards.count_reward`).

    .venv/bin/python bench/bench_counting.py        # the shipped model and the counting start
    .venv/bin/python bench/bench_counting.py --models assets/tiny-qwen2vl runs/my-model
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from bench_localisation import greedy_answers, model_arguments  # noqa: E402

# The shipped model and the counting recipe's starting checkpoint.
DEFAULT_MODELS = ("assets/tiny-qwen2vl", "assets/tiny-qwen3vl-count")
BACKGROUND_NAMES = {
    (255, 255, 255): "white",
    (225, 225, 225): "light grey",
    (70, 70, 70): "dark grey",
}


@dataclass(frozen=True)
class Slice:
    """Greedy counting accuracy on one slice of the items.

    Attributes:
        name: What the slice holds, e.g. ``"background dark grey"`` or ``"4 shapes"``.
        n: Items in the slice.
        accuracy: Fraction answered with the exact count.
    """

    name: str
    n: int
    accuracy: float


def background_of(item: dict[str, Any]) -> str:
    """The item's background colour by name (the top-left pixel: shapes keep a margin)."""
    pixel = item["images"][0].convert("RGB").getpixel((0, 0))
    return BACKGROUND_NAMES.get(pixel, str(pixel))


def breakdown(items: Sequence[dict[str, Any]], completions: Sequence[str]) -> list[Slice]:
    """Accuracy over all ``items``, then per background, per number of shapes, per image size."""
    from vlrollout.tiny.rewards import count_reward

    reward = count_reward()
    right = [
        reward("", text, [], [], answer=it["answer"]) == 1.0
        for it, text in zip(items, completions, strict=True)
    ]
    keys = {
        "background": lambda it: background_of(it),
        "shapes": lambda it: it["answer"],
        "size": lambda it: "x".join(map(str, it["image_size"])),
    }
    slices = [Slice("all", len(items), sum(right) / len(items))]
    for kind, key in keys.items():
        groups: dict[Any, list[bool]] = {}
        for it, ok in zip(items, right, strict=True):
            groups.setdefault(key(it), []).append(ok)
        for value in sorted(groups, key=str):
            oks = groups[value]
            name = f"{value} shapes" if kind == "shapes" else f"{kind} {value}"
            slices.append(Slice(name, len(oks), sum(oks) / len(oks)))
    return slices


def wrong_answers(
    items: Sequence[dict[str, Any]], completions: Sequence[str], top: int = 5
) -> list[tuple[int, str, int]]:
    """The ``top`` most frequent (true count, answer text, times) among wrong answers."""
    from vlrollout.tiny.rewards import count_reward

    reward = count_reward()
    wrong = Counter(
        (it["answer"], text.strip())
        for it, text in zip(items, completions, strict=True)
        if reward("", text, [], [], answer=it["answer"]) != 1.0
    )
    return [(count, text, times) for (count, text), times in wrong.most_common(top)]


def main(argv: list[str] | None = None) -> None:
    args = model_arguments(__doc__, DEFAULT_MODELS, 400, "held-out counting items", argv)
    from vlrollout.tiny.synthetic import make_item

    started = record.Run("counting", argv)
    items = [make_item("count", args.seed, i) for i in range(args.items)]
    slices: dict[str, list[Slice]] = {}
    wrong: dict[str, list[tuple[int, str, int]]] = {}
    for path in args.models:
        answers = greedy_answers(path, items)
        slices[path], wrong[path] = breakdown(items, answers), wrong_answers(items, answers)
        print(f"scored {path}", flush=True)
    first = slices[args.models[0]]  # the same items, so the same slices in the same order
    table = record.Table(
        ["items", *args.models],
        [
            [f"{s.name} ({s.n})", *(f"{slices[p][i].accuracy:.3f}" for p in args.models)]
            for i, s in enumerate(first)
        ],
        title=f"greedy counting accuracy on {args.items} held-out items (seed {args.seed}), "
        "by slice (items in it)",
    )
    mistakes = record.Table(
        ["model", "true count", "answer", "times"],
        [[p, str(c), repr(t), str(k)] for p in args.models for c, t, k in wrong[p]],
        title="most frequent wrong answers",
    )
    print(f"\n{table.text()}\n\n{mistakes.text()}")

    def worst(path: str) -> Slice:
        return min(slices[path][1:], key=lambda s: s.accuracy)

    line = "headline: counting accuracy (worst slice): " + "; ".join(
        f"{p} {slices[p][0].accuracy:.3f} ({worst(p).name} {worst(p).accuracy:.3f})"
        for p in args.models
    )
    print(line)
    numbers = {p: [asdict(s) for s in slices[p]] for p in args.models}
    default = args.models == list(DEFAULT_MODELS) and args.items == 400 and args.seed == 200
    mode = "default" if default else "changed: " + " ".join(argv or sys.argv[1:])
    record.write(started.record([table, mistakes], line, numbers, mode=mode), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
