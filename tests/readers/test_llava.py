"""LLaVA conversation JSON: the last gpt turn becomes the answer, the turns before it messages,
the singular ``image`` becomes ``images``."""

from __future__ import annotations

from tests.readers.conftest import save_image, write_json
from vlrollout.datasets import LOAD_ERROR, load_items
from vlrollout.processors.image_loading import load_image
from vlrollout.readers import detect_format
from vlrollout.run.items import item_problems


def test_llava_rows_become_items(tmp_path):
    save_image(tmp_path / "images" / "coco" / "a.jpg", (12, 9))
    save_image(tmp_path / "images" / "coco" / "b.jpg", (4, 4))
    rows = [
        {
            "id": "r1",
            "image": "coco/a.jpg",
            "conversations": [
                {"from": "human", "value": "<image>\nWhat is it?"},
                {"from": "gpt", "value": "A box."},
                {"from": "human", "value": "Colour?"},
                {"from": "gpt", "value": "Red."},
            ],
        },
        {
            "id": "r2",
            "image": ["coco/a.jpg", "coco/b.jpg"],
            "conversations": [{"from": "human", "value": "<image><image>Same?"}],
        },
        {"id": "r3", "image": "coco/a.jpg", "conversations": []},
        {"id": "r4", "image": "coco/nope.jpg", "conversations": [{"from": "human", "value": "?"}]},
        {
            "id": "r5",
            "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}],
        },
    ]
    path = write_json(tmp_path / "llava.json", rows)
    assert detect_format(path) == "llava"
    items = load_items(path)
    first = items[0]
    assert first["answer"] == "Red."
    assert first["messages"] == [
        {"role": "user", "content": "<image>\nWhat is it?"},
        {"role": "assistant", "content": "A box."},
        {"role": "user", "content": "Colour?"},
    ]
    assert first["images"] == [str(tmp_path / "images" / "coco" / "a.jpg")]
    assert "image" not in first and "conversations" not in first
    assert item_problems(first) == []  # the media-field rule holds: images, not image
    assert load_image(first["images"][0]).original_size == (12, 9)
    assert "answer" not in items[1] and len(items[1]["images"]) == 2
    assert item_problems(items[1]) == []
    assert items[2][LOAD_ERROR]["reason"] == "missing_field"
    assert items[2][LOAD_ERROR]["detail"].startswith(f"{path} row 3: field conversations: ")
    assert items[3][LOAD_ERROR]["reason"] == "image_not_found"
    assert f"{path} row 4: field image: " in items[3][LOAD_ERROR]["detail"]
    assert items[4]["answer"] == "yo" and "images" not in items[4]


def test_a_row_whose_turns_do_not_hold_one_image_placeholder_per_image_is_named(tmp_path):
    # LLaVA's training code moves an existing <image> to its turn's front and inserts none.
    save_image(tmp_path / "a.jpg", (4, 4))
    ask = {"from": "human", "value": "Colour?"}
    rows = [
        {"id": "ok", "image": "a.jpg", "conversations": [{**ask, "value": "Colour?\n<image>"}]},
        {
            "id": "none",
            "image": "a.jpg",
            "conversations": [ask, {"from": "gpt", "value": "<image>"}],
        },
        {"id": "two", "image": ["a.jpg", "a.jpg"], "conversations": [{**ask, "value": "<image>?"}]},
        {"id": "extra", "conversations": [{**ask, "value": "<image> Colour?"}]},
    ]
    path = write_json(tmp_path / "llava.json", rows)
    items = {i["id"]: i for i in load_items(path)}
    assert item_problems(items["ok"]) == []
    for row, (item_id, found, images) in enumerate(
        [("none", 0, 1), ("two", 1, 2), ("extra", 1, 0)], 2
    ):
        error = items[item_id][LOAD_ERROR]
        assert error["reason"] == "placeholder_mismatch"
        detail = (
            f"{path} row {row}: field conversations: {found} <image> for the row's {images} image"
        )
        assert error["detail"].startswith(detail), error["detail"]


def test_conversations_of_the_wrong_type_are_a_bad_row_not_a_missing_field(tmp_path):
    rows = [
        {"id": "ok", "conversations": [{"from": "human", "value": "hi"}]},
        {"id": "str", "conversations": "not a list"},
        {"id": "none"},
    ]
    items = load_items(write_json(tmp_path / "llava.json", rows))
    assert items[1][LOAD_ERROR]["reason"] == "bad_row"
    assert "conversations is a list of turns, got a str" in items[1][LOAD_ERROR]["detail"]
    assert items[2][LOAD_ERROR]["reason"] == "missing_field"
