"""COCO captions and instances JSON, and RefCOCO refs (pickle and JSON) joined with
instances.json: items with boxes x, y, w, h converted to x1, y1, x2, y2 in original pixels."""

from __future__ import annotations

import io
import pickle

import pytest

from tests.readers.conftest import save_image, write_json
from vlrollout.datasets import LOAD_ERROR, DataFileError, load_items
from vlrollout.processors.image_loading import load_image
from vlrollout.readers import detect_format, read_all_items
from vlrollout.readers.refcoco import RefsUnpickler


def _coco(tmp_path):
    """COCO's layout: annotations/*.json beside val2017/ with the images."""
    save_image(tmp_path / "val2017" / "1.jpg", (40, 30))
    save_image(tmp_path / "val2017" / "2.jpg", (20, 10))
    images = [{"id": 1, "file_name": "1.jpg"}, {"id": 2, "file_name": "2.jpg"}]
    images.append({"id": 3, "file_name": "missing.jpg"})
    return images


def test_captions_one_item_per_image_with_all_its_captions(tmp_path):
    images = _coco(tmp_path)
    anns = [
        {"id": 10, "image_id": 1, "caption": "a red box"},
        {"id": 11, "image_id": 2, "caption": "small"},
        {"id": 12, "image_id": 1, "caption": "red square"},
    ]
    path = write_json(
        tmp_path / "annotations" / "captions_val2017.json", {"images": images, "annotations": anns}
    )
    assert detect_format(path) == "coco_captions"
    items = load_items(path)
    good = [i for i in items if LOAD_ERROR not in i]
    assert [(i["id"], i["captions"]) for i in good] == [
        ("1", ["a red box", "red square"]),
        ("2", ["small"]),
    ]
    assert good[0]["images"] == [str(tmp_path / "val2017" / "1.jpg")]
    assert load_image(good[0]["images"][0]).original_size == (40, 30)
    assert good[0]["task"] == "caption" and good[0]["messages"][0]["content"][0] == {
        "type": "image"
    }
    (bad,) = [i for i in items if LOAD_ERROR in i]
    assert bad["id"] == "3" and bad[LOAD_ERROR]["reason"] == "image_not_found"
    assert bad[LOAD_ERROR]["detail"].startswith(f"{path} images row 3: field file_name: ")
    # With images_root only that folder is searched.
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(DataFileError, match="image_not_found|not found"):
        load_items(path, images_root=tmp_path / "elsewhere")
    assert load_items(path, images_root=tmp_path / "val2017")[0]["id"] == "1"


def test_instances_boxes_per_image_in_original_pixels(tmp_path):
    images = _coco(tmp_path)[:2]
    anns = [
        {"id": 1, "image_id": 1, "bbox": [1, 2, 3, 4], "category_id": 7},
        {"id": 2, "image_id": 1, "bbox": [10.5, 0, 5, 5], "category_id": 8},
        {"id": 3, "image_id": 2, "bbox": [0, 0, -1, 5], "category_id": 7},
    ]
    cats = [{"id": 7, "name": "dog"}, {"id": 8, "name": "cat"}]
    path = write_json(
        tmp_path / "annotations" / "instances_val2017.json",
        {"images": images, "annotations": anns, "categories": cats},
    )
    assert detect_format(path) == "coco_instances"
    items = load_items(path, prompt="Find every animal.")
    assert items[0]["boxes"] == [[1, 2, 4, 6], [10.5, 0, 15.5, 5]]
    assert items[0]["labels"] == ["dog", "cat"]
    assert items[0]["messages"][0]["content"][1]["text"] == "Find every animal."
    assert items[1][LOAD_ERROR]["reason"] == "bad_box"
    assert "images row 2: field bbox: " in items[1][LOAD_ERROR]["detail"]
    assert "annotations row 3" in items[1][LOAD_ERROR]["detail"]


def _refs_layout(tmp_path):
    """The refer API's layout: refcoco/refs(unc).p beside refcoco/instances.json; images in
    train2014/ beside the refcoco folder."""
    save_image(tmp_path / "train2014" / "COCO_train2014_000000000009.jpg", (50, 40))
    write_json(
        tmp_path / "refcoco" / "instances.json",
        {
            "images": [{"id": 9, "file_name": "COCO_train2014_000000000009.jpg"}],
            "annotations": [
                {"id": 100, "image_id": 9, "bbox": [5, 6, 20, 10], "category_id": 1},
                {"id": 101, "image_id": 9, "bbox": [0, 0, 3, 0], "category_id": 1},
            ],
            "categories": [{"id": 1, "name": "person"}],
        },
    )
    return [
        {
            "ref_id": 0,
            "ann_id": 100,
            "image_id": 9,
            "split": "testA",
            "file_name": "COCO_train2014_000000000009_100.jpg",
            "sentences": [{"sent": "man on left", "raw": "Man on left"}, {"sent": "guy"}],
        },
        {"ref_id": 1, "ann_id": 101, "image_id": 9, "split": "val", "sentences": [{"sent": "x"}]},
        {"ref_id": 2, "ann_id": 555, "image_id": 9, "split": "val", "sentences": [{"sent": "y"}]},
    ]


def _check_refs(items, path):
    good = [i for i in items if LOAD_ERROR not in i]
    assert [(i["id"], i["expression"], i["split"]) for i in good] == [
        ("0-0", "man on left", "testA"),
        ("0-1", "guy", "testA"),
    ]
    assert good[0]["boxes"] == [[5, 6, 25, 16]]
    assert load_image(good[0]["images"][0]).original_size == (50, 40)
    assert good[0]["task"] == "refcoco" and "man on left" in str(good[0]["messages"])
    bad = {i["id"]: i[LOAD_ERROR] for i in items if LOAD_ERROR in i}
    assert bad["1"]["reason"] == "bad_box" and bad["1"]["detail"].startswith(
        f"{path} row 2: field bbox"
    )
    assert bad["2"]["reason"] == "missing_field" and "row 3: field ann_id" in bad["2"]["detail"]


def test_refcoco_refs_pickle_and_json(tmp_path):
    refs = _refs_layout(tmp_path)
    pickled = tmp_path / "refcoco" / "refs(unc).p"
    pickled.write_bytes(pickle.dumps(refs, protocol=2))
    assert detect_format(pickled) == "refcoco"
    _check_refs(load_items(pickled), pickled)
    as_json = write_json(tmp_path / "refcoco" / "refs.json", refs)
    assert detect_format(as_json) == "refcoco"
    _check_refs(load_items(as_json), as_json)


def test_a_ref_whose_image_is_not_its_annotations_is_refused_naming_both(tmp_path):
    """The box of one image would be scored on another."""
    good = _refs_layout(tmp_path)[0]
    moved = {**good, "ref_id": 7, "image_id": 25}
    path = write_json(tmp_path / "refcoco" / "refs.json", [good, moved])
    item = load_items(path)[-1]
    assert item[LOAD_ERROR]["reason"] == "bad_row"
    assert (
        "image_id 25" in item[LOAD_ERROR]["detail"] and "image_id 9" in item[LOAD_ERROR]["detail"]
    )


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_the_refs_unpickler_builds_no_class(tmp_path):
    assert RefsUnpickler(io.BytesIO(pickle.dumps([{"a": (1, 2.0, "s")}]))).load() == [
        {"a": (1, 2.0, "s")}
    ]
    with pytest.raises(pickle.UnpicklingError, match="refuses builtins.print"):
        RefsUnpickler(io.BytesIO(pickle.dumps([Evil()]))).load()
    _refs_layout(tmp_path)
    path = tmp_path / "refcoco" / "refs(unc).p"
    path.write_bytes(pickle.dumps([Evil()]))
    with pytest.raises(DataFileError, match=r"refs\(unc\).p cannot be read as a refs pickle"):
        load_items(path)


def test_refs_without_instances_json_say_where_it_goes(tmp_path):
    path = tmp_path / "refs(unc).p"
    path.write_bytes(pickle.dumps([]))
    with pytest.raises(DataFileError, match="instances.json"):
        load_items(path)


def test_an_annotation_of_an_image_not_in_images_is_a_counted_bad_row(tmp_path):
    images = _coco(tmp_path)
    anns = [
        {"id": 10, "image_id": 1, "caption": "a red box"},
        {"id": 11, "image_id": 99, "caption": "an orphan"},
    ]
    path = write_json(
        tmp_path / "annotations" / "captions_val2017.json", {"images": images, "annotations": anns}
    )
    items = read_all_items(path)
    orphan = [i for i in items if LOAD_ERROR in i and "99" in i[LOAD_ERROR]["detail"]]
    assert len(orphan) == 1 and orphan[0][LOAD_ERROR]["reason"] == "missing_field"
    assert "image_id 99 is not in 'images'" in orphan[0][LOAD_ERROR]["detail"]


def test_image_not_found_under_images_root_does_not_ask_for_images_root(tmp_path):
    images = _coco(tmp_path)
    anns = [{"id": 10, "image_id": 1, "caption": "a red box"}]
    path = write_json(
        tmp_path / "annotations" / "captions_val2017.json", {"images": images, "annotations": anns}
    )
    (tmp_path / "empty").mkdir()
    item = read_all_items(path, images_root=tmp_path / "empty")[0]
    detail = item[LOAD_ERROR]["detail"]
    assert "not found under" in detail and "pass images_root" not in detail


def test_image_not_found_names_the_annotation_files_folder_after_other_images_were_found(tmp_path):
    """The search starts at the annotation file's folder; the folder an earlier image was found
    in (searched first) had been named as that start, so "its parent" pointed elsewhere."""
    images = _coco(tmp_path)
    anns = [{"id": 10 + k, "image_id": k, "caption": "a box"} for k in (1, 2, 3)]
    path = write_json(
        tmp_path / "annotations" / "captions_val2017.json", {"images": images, "annotations": anns}
    )
    (missing,) = [i for i in read_all_items(path) if LOAD_ERROR in i]
    detail = missing[LOAD_ERROR]["detail"]
    assert f"not found under {tmp_path / 'annotations'}, its parent" in detail, detail


def test_crowd_regions_are_kept_apart_from_the_object_boxes(tmp_path):
    """COCO marks a region of many objects ``iscrowd: 1`` (its evaluation ignores it): it is
    not one object a detector must box, so it goes to ``crowd_boxes``, not ``boxes``."""
    images = _coco(tmp_path)[:1]
    anns = [
        {"id": 1, "image_id": 1, "bbox": [1, 2, 3, 4], "category_id": 7, "iscrowd": 0},
        {"id": 2, "image_id": 1, "bbox": [0, 0, 30, 20], "category_id": 7, "iscrowd": 1},
    ]
    path = write_json(
        tmp_path / "annotations" / "instances_val2017.json",
        {"images": images, "annotations": anns, "categories": [{"id": 7, "name": "person"}]},
    )
    (item,) = load_items(path)
    assert (item["boxes"], item["labels"]) == ([[1, 2, 4, 6]], ["person"])
    assert (item["crowd_boxes"], item["crowd_labels"]) == ([[0, 0, 30, 20]], ["person"])
