"""Deterministic synthetic vision tasks (counting, grounding, captioning) for the tiny model.

Every image is a plain background with 1–4 coloured shapes (square, circle, triangle in red, green,
blue or yellow). The image is divided into a coarse grid of cells, one cell per merged image token
the tiny Qwen2-VL processor produces for that image size (28×28 model pixels after ``smart_resize``),
and each shape lies strictly inside one cell. That keeps "how many shapes" learnable for a model
with 16 image tokens; shapes still vary in size and position inside their cell.

Items use the data-item format vlrollout's workflows consume::

    {"id": "count-7-0", "task": "count",
     "messages": [{"role": "user", "content": [{"type": "image"},
                                               {"type": "text", "text": "How many shapes ..."}]}],
     "images": [<PIL.Image> or "images/count-7-0.png"],
     "solution": "3",            # the reference completion (SFT target), every task
     "answer": 3}                # count only; "boxes"/"object" for ground; "captions" for caption

plus ``"shapes"`` (every shape's colour, kind and pixel box) and ``"image_size"`` ([width, height]).

Boxes (``boxes`` and ``shapes[i]["box"]``) are ``[x1, y1, x2, y2]`` in ORIGINAL image pixels with
exclusive right/bottom edges (the pixel bbox of the rendered shape, as ``PIL.Image.getbbox``), so
``x2 - x1`` is the width in pixels. The grounding answer text uses Qwen2-VL's format,
``<|box_start|>(x1,y1),(x2,y2)<|box_end|>`` with coordinates normalised to 0–1000, x first
(Qwen2-VL technical report, arXiv:2409.12191, §2.2 "Visual grounding"; the same tokens are in
Qwen/Qwen2-VL-2B-Instruct's ``tokenizer_config.json``).

>>> items = generate_items("count", 2, seed=0)
>>> items[0]["task"], items[0]["solution"] == str(items[0]["answer"])
('count', True)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from vlrollout.tiny.synthetic_video import (
    generate_video_items,
    write_media_dataset,
    write_video_dataset,
)

TASKS = ("count", "ground", "caption")
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 40),
}
SHAPES = ("square", "circle", "triangle")
BACKGROUNDS: tuple[tuple[int, int, int], ...] = ((255, 255, 255), (225, 225, 225), (70, 70, 70))
# (width, height) -> (columns, rows). The grid matches the merged-token grid of the tiny model's
# processor (max_pixels 112*112, factor 28): 140x105 and 168x126 are resized to 112x84 (4x3).
IMAGE_GRIDS: dict[tuple[int, int], tuple[int, int]] = {
    (112, 112): (4, 4),
    (140, 105): (4, 3),
    (105, 140): (3, 4),
    (168, 126): (4, 3),
}
MAX_SHAPES = 4
# Seeds: training items, held-out evaluation items, the committed assets/samples.
TRAIN_SEED, EVAL_SEED, SAMPLES_SEED = 0, 1, 2
COUNT_WORDS = ("zero", "one", "two", "three", "four")

PROMPTS = {
    "count": "How many shapes are there? Answer with a number.",
    "ground": "Where is the {colour} {shape}? Answer with a box.",
    "caption": "Describe the image in one sentence.",
    # Training only (answer_with_cell): words the tokenizer already has, a request unlike the box's.
    "cell": "Where is the {colour} {shape}? Answer with a number.",
}
BOX_START, BOX_END = "<|box_start|>", "<|box_end|>"


def task_corpus() -> list[str]:
    """Text that covers the task vocabulary; the tiny tokenizer is trained on it (short sequences)."""
    lines = [PROMPTS["count"], PROMPTS["caption"], "user\nassistant\nsystem\n" * 2]
    for colour in COLOURS:
        for shape in SHAPES:
            lines.append(PROMPTS["ground"].format(colour=colour, shape=shape))
            lines.append(f"a {colour} {shape}, a {colour} {shape} and a {colour} {shape}")
    lines += [f"{w} shape: {w} shapes:" for w in COUNT_WORDS]
    lines.append(f"{BOX_START}(125,250),(375,500){BOX_END} 0 1 2 3 4 5 6 7 8 9")
    return lines


def box_to_qwen2vl_text(box: Sequence[float], width: int, height: int) -> str:
    """Format a pixel box as Qwen2-VL grounding text with 0–1000 normalised coordinates.

    >>> box_to_qwen2vl_text([28, 0, 56, 112], 112, 112)
    '<|box_start|>(250,0),(500,1000)<|box_end|>'
    """
    x1, y1, x2, y2 = box
    n = [round(x1 / width * 1000), round(y1 / height * 1000)]
    n += [round(x2 / width * 1000), round(y2 / height * 1000)]
    n = [min(1000, max(0, v)) for v in n]
    return f"{BOX_START}({n[0]},{n[1]}),({n[2]},{n[3]}){BOX_END}"


def parse_qwen2vl_box(text: str, width: int, height: int) -> list[float] | None:
    """The first Qwen2-VL box in ``text`` (0–1000 frame) as original pixels, or None.

    Parsed by the rewards package's Qwen2-VL parser, so evaluation reads boxes as rewards do.

    >>> parse_qwen2vl_box('<|box_start|>(250,0),(500,1000)<|box_end|>', 112, 112)
    [28.0, 0.0, 56.0, 112.0]
    """
    from vlrollout.rewards.box_parsing import parse_qwen2_vl
    from vlrollout.rewards.frames import Frame, convert_boxes

    parsed = parse_qwen2_vl(text)
    if not parsed.boxes:
        return None
    size = {"original_width": width, "original_height": height}
    geometry = {**size, "model_width": width, "model_height": height}
    return list(convert_boxes(parsed.boxes[:1], parsed.frame, Frame.ORIGINAL, geometry)[0])


def _join(parts: list[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _captions(shapes: list[dict[str, Any]]) -> list[str]:
    """Reference captions: reading order, a count-prefixed variant, left-to-right order."""
    phrases = [f"a {s['colour']} {s['shape']}" for s in shapes]  # shapes are in reading order
    n = len(shapes)
    refs = [_join(phrases), f"{COUNT_WORDS[n]} shape{'s' if n > 1 else ''}: {_join(phrases)}"]
    by_x = sorted(range(n), key=lambda i: (shapes[i]["box"][0], shapes[i]["box"][1]))
    left_to_right = _join([phrases[i] for i in by_x])
    if left_to_right != refs[0]:
        refs.append(left_to_right)
    return refs


def render_scene(rng: random.Random, n_shapes: int) -> tuple[Image.Image, list[dict[str, Any]]]:
    """Draw ``n_shapes`` shapes with distinct (colour, shape) pairs, one per grid cell.

    Returns the RGB image and the shapes in reading order (by cell row, then column), each
    ``{"colour", "shape", "box"}`` with ``box`` the exact pixel bbox (exclusive right/bottom).
    """
    if not 1 <= n_shapes <= MAX_SHAPES:
        raise ValueError(f"n_shapes must be in 1..{MAX_SHAPES}, got {n_shapes}")
    (width, height), (cols, rows) = rng.choice(sorted(IMAGE_GRIDS.items()))
    cw, ch = width // cols, height // rows
    background = rng.choice(BACKGROUNDS)
    image = Image.new("RGB", (width, height), background)
    draw = ImageDraw.Draw(image)
    combos = rng.sample([(c, s) for c in COLOURS for s in SHAPES], n_shapes)
    cells = sorted(rng.sample(range(cols * rows), n_shapes))
    shapes = []
    for (colour, shape), cell in zip(combos, cells, strict=True):
        row, col = divmod(cell, cols)
        # Side between 55% of the cell and the cell minus a 1-pixel margin on each side, so shapes
        # in neighbouring cells never touch.
        size = rng.randint(round(0.55 * min(cw, ch)), min(cw, ch) - 2)
        x0 = col * cw + rng.randint(1, cw - size - 1)
        y0 = row * ch + rng.randint(1, ch - size - 1)
        x1, y1 = x0 + size - 1, y0 + size - 1  # inclusive corners, as ImageDraw takes them
        mask = Image.new("L", (width, height), 0)
        mdraw = ImageDraw.Draw(mask)
        for d, fill in ((draw, COLOURS[colour]), (mdraw, 255)):
            if shape == "square":
                d.rectangle([x0, y0, x1, y1], fill=fill)
            elif shape == "circle":
                d.ellipse([x0, y0, x1, y1], fill=fill)
            else:
                d.polygon([((x0 + x1) / 2, y0), (x0, y1), (x1, y1)], fill=fill)
        shapes.append({"colour": colour, "shape": shape, "box": list(mask.getbbox())})
    return image, shapes


def _image_question(prompt: str) -> list[dict[str, Any]]:
    """One user turn: the item's image, then ``prompt``."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]


def make_item(task: str, seed: int, index: int, n_shapes: int | None = None) -> dict[str, Any]:
    """Item ``index`` of ``task`` for ``seed``; depends only on (task, seed, index, n_shapes).

    ``n_shapes`` fixes the number of shapes (a training curriculum uses one-shape grounding);
    by default it is drawn uniformly from 1–4 (1–3 for captions).
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
    # str seeds are hashed with SHA-512 by random.Random: stable across processes and versions.
    rng = random.Random(f"vlrollout-tiny:{task}:{seed}:{index}")
    drawn = rng.randint(1, 3 if task == "caption" else MAX_SHAPES)
    n_shapes = drawn if n_shapes is None else n_shapes
    image, shapes = render_scene(rng, n_shapes)
    width, height = image.size
    item: dict[str, Any] = {"id": f"{task}-{seed}-{index}", "task": task}
    if task == "count":
        prompt, item["answer"], item["solution"] = PROMPTS["count"], n_shapes, str(n_shapes)
    elif task == "ground":
        target = rng.choice(shapes)
        prompt = PROMPTS["ground"].format(colour=target["colour"], shape=target["shape"])
        item["object"] = f"{target['colour']} {target['shape']}"
        item["boxes"] = [list(target["box"])]
        item["solution"] = box_to_qwen2vl_text(target["box"], width, height)
    else:
        prompt = PROMPTS["caption"]
        item["captions"] = _captions(shapes)
        item["solution"] = item["captions"][0]
    item["messages"] = _image_question(prompt)
    item["images"] = [image]
    item["shapes"] = shapes
    item["image_size"] = [width, height]
    return item


def cell_of(box: Sequence[float], size: Sequence[int]) -> tuple[int, int]:
    """``(column, row)`` of the grid cell holding ``box``'s centre (``size`` = [width, height]).

    >>> cell_of([30, 2, 50, 20], [112, 112])   # 4 x 4 cells of 28 pixels
    (1, 0)
    """
    width, height = size
    cols, rows = IMAGE_GRIDS[(width, height)]
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    col = min(cols - 1, max(0, int(cx // (width / cols))))
    row = min(rows - 1, max(0, int(cy // (height / rows))))
    return col, row


def answer_with_cell(item: dict[str, Any]) -> dict[str, Any]:
    """A grounding item whose reference answer names the target's cell: column digit, row digit.

    A training-only variant (``cell`` in ``vlrollout train-tiny --mix``): the box answer spreads
    the target's position over many digit tokens, the cell answer puts it in two, which a small
    model already trained on boxes learns to read from the image within a few hundred steps, where
    box answers alone stayed at the image-blind answer. It asks with its own prompt
    (``PROMPTS["cell"]``), so a model trained on both knows which answer a question wants.

    >>> answer_with_cell(make_item("ground", 0, 0))["solution"]
    '10'
    """
    col, row = cell_of(item["boxes"][0], item["image_size"])
    colour, shape = item["object"].split()
    prompt = PROMPTS["cell"].format(colour=colour, shape=shape)
    return {
        **item,
        "id": f"cell-{item['id']}",
        "task": "cell",
        "messages": _image_question(prompt),
        "solution": f"{col}{row}",
    }


def generate_items(
    task: str, n: int, seed: int, start: int = 0, tasks_mix: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """``n`` deterministic items of ``task`` (or ``"mix"``: round-robin over ``tasks_mix``).

    Args:
        task: ``"count"``, ``"ground"``, ``"caption"`` or ``"mix"``.
        n: Number of items.
        seed: Same seed → identical items and pixels; training and evaluation use different seeds.
        start: Index of the first item (item ``i`` does not depend on ``n``).
        tasks_mix: Tasks cycled through for ``"mix"`` (default all three).

    >>> a = generate_items("ground", 3, seed=1)
    >>> b = generate_items("ground", 3, seed=1)
    >>> [x["boxes"] for x in a] == [x["boxes"] for x in b]
    True
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if task == "mix":
        cycle = tuple(tasks_mix or TASKS)
        return [make_item(cycle[i % len(cycle)], seed, i) for i in range(start, start + n)]
    return [make_item(task, seed, i) for i in range(start, start + n)]


def write_dataset(items: Sequence[dict[str, Any]], out_dir: str | Path, name: str = "data.jsonl"):
    """Write ``items`` as ``out_dir/name`` (JSONL, :func:`vlrollout.jsonl.write_jsonl`) plus
    ``out_dir/images/<id>.png``.

    Image paths in the JSONL are relative to the JSONL file's folder. Returns the JSONL path.
    """
    return write_media_dataset(items, out_dir, name, "images", ".png", _save_png)


def _save_png(image: Image.Image, path: Path) -> None:
    image.save(path, optimize=True)


def read_dataset(path: str | Path, load_images: bool = True) -> list[dict[str, Any]]:
    """The items of a data file, read by :func:`vlrollout.datasets.load_items` (the loader of
    ``vlrollout run`` and ``vlrollout train``: ids, image paths resolved against the file's folder).

    With ``load_images`` the ``images`` are opened as RGB ``PIL.Image``; otherwise they are the
    resolved path strings.

    Raises:
        ValueError: a line of the file is not an item (which line, and why).
    """
    from vlrollout.datasets import LOAD_ERROR, load_items

    items = load_items(path)
    for item in items:
        if LOAD_ERROR in item:
            raise ValueError(f"{path}: {item['id']} is not an item: {item[LOAD_ERROR]['detail']}")
        if load_images and isinstance(item.get("images"), list):
            item["images"] = [Image.open(p).convert("RGB") for p in item["images"]]
    return items


def main(argv: list[str] | None = None) -> Path:
    """Write a mixed sample set: ``vlrollout make-samples --out assets/samples``.

    Writes the image items (``data.jsonl`` + ``images/``) and, unless ``--videos 0``, the video
    items of :mod:`vlrollout.tiny.synthetic_video` beside them (``video.jsonl`` + ``videos/``: a
    separate file, so families without video can run the image items). Returns the image JSONL.
    """
    import argparse

    from vlrollout.argtypes import whole_number

    p = argparse.ArgumentParser(
        prog="vlrollout make-samples",
        description="Write synthetic task items as JSONL + PNG files, and video items as "
        "JSONL + MP4 files.",
    )
    p.add_argument("--out", default="assets/samples")
    p.add_argument("--task", default="mix", choices=[*TASKS, "mix"])
    p.add_argument("-n", type=whole_number(0), default=12, help="items to write")
    p.add_argument(
        "--videos", type=whole_number(0), default=6, help="video items to write (0: none)"
    )
    p.add_argument("--seed", type=int, default=SAMPLES_SEED)
    args = p.parse_args(argv)
    path = write_dataset(generate_items(args.task, args.n, args.seed), args.out)
    print(path)
    if args.videos:
        print(write_video_dataset(generate_video_items(args.videos, args.seed), args.out))
    return path


if __name__ == "__main__":
    main()
