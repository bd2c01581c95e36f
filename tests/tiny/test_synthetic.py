"""The synthetic task generator: determinism, pixel-exact box labels, counts, captions, files."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from vlrollout.datasets import load_items
from vlrollout.jsonl import write_jsonl
from vlrollout.tiny.synthetic import (
    BACKGROUNDS,
    COLOURS,
    TASKS,
    box_to_qwen2vl_text,
    generate_items,
    make_item,
    parse_qwen2vl_box,
    read_dataset,
    render_scene,
    write_dataset,
)


def _pixels(item) -> bytes:
    return item["images"][0].tobytes()


def _without_images(item):
    return {k: v for k, v in item.items() if k != "images"}


@pytest.mark.parametrize("task", [*TASKS, "mix"])
def test_same_seed_same_items_and_pixels(task):
    a, b = generate_items(task, 12, seed=5), generate_items(task, 12, seed=5)
    assert [_without_images(x) for x in a] == [_without_images(x) for x in b]
    assert [_pixels(x) for x in a] == [_pixels(x) for x in b]


@pytest.mark.parametrize("task", TASKS)
def test_different_seeds_differ(task):
    a, b = generate_items(task, 12, seed=5), generate_items(task, 12, seed=6)
    assert sum(_pixels(x) != _pixels(y) for x, y in zip(a, b, strict=True)) >= 10


def test_item_depends_only_on_task_seed_index():
    items = generate_items("ground", 5, seed=3)
    assert _pixels(make_item("ground", 3, 4)) == _pixels(items[4])
    assert _pixels(generate_items("ground", 2, seed=3, start=3)[1]) == _pixels(items[4])
    assert _pixels(make_item("count", 3, 4)) != _pixels(items[4])


def test_golden_item():
    # Regenerate after an intended generator change with:
    #   python -c "from vlrollout.tiny.synthetic import make_item; print(make_item('ground', 0, 0))"
    item = make_item("ground", 0, 0)
    assert item["solution"] == box_to_qwen2vl_text(item["boxes"][0], *item["image_size"])
    img = np.asarray(item["images"][0])
    assert (item["id"], item["object"], item["image_size"]) == GOLDEN["id_object_size"]
    assert item["boxes"] == GOLDEN["boxes"]
    assert int(img.astype(np.int64).sum()) == GOLDEN["pixel_sum"]


GOLDEN = {
    "id_object_size": ("ground-0-0", "red triangle", [168, 126]),
    "boxes": [[52, 12, 79, 39]],
    "pixel_sum": 4478130,
}


def _components(img: np.ndarray, rgb) -> list[tuple[list[int], float]]:
    """(exclusive pixel bbox, fill ratio) of each 8-connected component of exactly ``rgb``."""
    mask = np.all(img == np.array(rgb, dtype=img.dtype), axis=-1)
    labels, n = ndimage.label(mask, structure=np.ones((3, 3)))
    out = []
    for sl in ndimage.find_objects(labels):
        ys, xs = sl
        box = [xs.start, ys.start, xs.stop, ys.stop]
        area = (xs.stop - xs.start) * (ys.stop - ys.start)
        out.append((box, float(mask[sl].sum()) / area))
    return out


FILL = {"square": (0.99, 1.0), "circle": (0.70, 0.86), "triangle": (0.45, 0.65)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grounding_box_is_exactly_the_shapes_pixels(seed):
    for item in generate_items("ground", 40, seed=seed):
        img = np.asarray(item["images"][0])
        colour, kind = item["object"].split()
        (box,) = item["boxes"]
        comps = _components(img, COLOURS[colour])
        matches = [fill for b, fill in comps if b == box]
        assert len(matches) == 1, (item["id"], box, comps)
        lo, hi = FILL[kind]
        assert lo <= matches[0] <= hi, (item["id"], kind, matches[0])
        # The prompt names the target; no other shape has the same colour and kind.
        same = [s for s in item["shapes"] if (s["colour"], s["shape"]) == (colour, kind)]
        assert len(same) == 1


@pytest.mark.parametrize("task", TASKS)
def test_every_shape_box_and_count_match_the_pixels(task):
    for item in generate_items(task, 30, seed=11):
        img = np.asarray(item["images"][0])
        found = []
        for rgb in COLOURS.values():
            found += [b for b, _ in _components(img, rgb)]
        assert sorted(found) == sorted(s["box"] for s in item["shapes"]), item["id"]
        # Nothing but the background and the shape colours is drawn.
        allowed = {tuple(c) for c in COLOURS.values()} | {tuple(c) for c in BACKGROUNDS}
        assert {tuple(p) for p in img.reshape(-1, 3)} <= allowed
        if task == "count":
            assert item["answer"] == len(found) and item["solution"] == str(len(found))


def test_counts_cover_one_to_four():
    answers = [it["answer"] for it in generate_items("count", 400, seed=0)]
    for k in (1, 2, 3, 4):
        assert 0.18 < answers.count(k) / len(answers) < 0.32


def test_box_text_round_trip_and_axis_order():
    item = make_item("ground", 0, 1)
    w, h = item["image_size"]
    back = parse_qwen2vl_box(item["solution"], w, h)
    for got, want, size in zip(back, item["boxes"][0], (w, h, w, h), strict=True):
        assert abs(got - want) <= size / 1000 / 2 + 1e-9
    # x first, normalised by width; y by height (a non-square image tells them apart).
    assert (
        box_to_qwen2vl_text([14, 0, 28, 105], 140, 105)
        == "<|box_start|>(100,0),(200,1000)<|box_end|>"
    )
    assert parse_qwen2vl_box("no box", 10, 10) is None


def test_captions_name_every_shape_in_reading_order():
    for item in generate_items("caption", 30, seed=4):
        phrases = [f"a {s['colour']} {s['shape']}" for s in item["shapes"]]
        rows = [(s["box"][1], s["box"][0]) for s in item["shapes"]]
        assert 1 <= len(item["captions"]) <= 3
        assert item["solution"] == item["captions"][0]
        pos = [item["captions"][0].index(p) for p in phrases]
        assert pos == sorted(pos)
        # reading order: cell rows never go back up by more than a cell
        assert all(b[0] >= a[0] - 42 for a, b in zip(rows, rows[1:], strict=False))
        for ref in item["captions"]:
            assert all(p in ref for p in phrases)


def test_items_have_the_data_item_format():
    for item in generate_items("mix", 6, seed=0):
        assert item["messages"] == [
            {
                "role": "user",
                "content": [
                    {"type": "image"},
                    {"type": "text", "text": item["messages"][0]["content"][1]["text"]},
                ],
            }
        ]
        assert len(item["images"]) == 1 and item["images"][0].mode == "RGB"
        key = {"count": "answer", "ground": "boxes", "caption": "captions"}[item["task"]]
        assert key in item


def test_render_scene_rejects_bad_counts():
    import random

    with pytest.raises(ValueError, match="n_shapes"):
        render_scene(random.Random(0), 5)
    with pytest.raises(ValueError, match="unknown task"):
        make_item("detect", 0, 0)


def test_write_and_read_dataset_round_trip(tmp_path):
    items = generate_items("mix", 6, seed=9)
    path = write_dataset(items, tmp_path / "ds")
    lines = path.read_text().splitlines()
    assert len(lines) == 6 and '"images": ["images/' in lines[0]
    back = read_dataset(path)
    for a, b in zip(items, back, strict=True):
        assert _without_images(a) == _without_images(b)
        assert _pixels(a) == _pixels(b)  # PNG is lossless
    paths = read_dataset(path, load_images=False)[0]["images"]
    assert paths[0].startswith(str(tmp_path))


def test_read_dataset_reads_a_data_file_as_run_and_train_read_it(tmp_path):
    """One loader: an item without an id whose image sits inside its messages, relative to the
    file, is read by read_dataset exactly as vlrollout run and train read it."""
    Image.new("RGB", (4, 4), (9, 9, 9)).save(tmp_path / "a.png")
    part = {"type": "image", "image": "a.png"}
    rows = [{"messages": [{"role": "user", "content": [part, "how many?"]}], "answer": "1"}]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    (item,) = read_dataset(path, load_images=False)
    assert [item] == load_items(path)
    assert item["id"] == "0"
    assert item["messages"][0]["content"][0]["image"] == str(tmp_path / "a.png")
