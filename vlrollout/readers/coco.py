"""COCO annotation JSON: captions (``captions_*.json``) and instances (``instances_*.json``),
with images found by ``file_name`` under the image folder (:mod:`vlrollout.readers.images`).

- captions: one item per image, ``captions`` all its captions, ``task: "caption"``;
- instances: one item per image, ``boxes`` every annotation's ``bbox`` (x, y, w, h in pixels)
  as ``[x1, y1, x2, y2]`` pixels and ``labels`` their category names (an image with no
  annotation has ``boxes: []``); crowd regions (``iscrowd: 1``) go to ``crowd_boxes`` and
  ``crowd_labels`` instead, since they are not one object to box.

Item ids are the COCO image ids. Rows are numbered from 1 in the file's ``images`` (or
``annotations``) list.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlrollout.readers.fields import RowError, placeholder, text_list_problem, xywh_box
from vlrollout.readers.images import ImageFolders
from vlrollout.readers.orientation import upright_boxes
from vlrollout.readers.sources import DataFileError


def load_json(path: Path) -> Any:
    """The parsed JSON of ``path``.

    Raises:
        DataFileError: not UTF-8 JSON (naming the path and the parser's reason).
    """
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataFileError(f"data file {path} is not JSON ({e})") from None


def _section(data: Any, key: str, path: Path) -> list[Any]:
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, list):
        raise DataFileError(f"{path}: no {key!r} list; is it a COCO annotation file?")
    return value


def _by_image(
    annotations: list[Any], path: Path
) -> tuple[dict[Any, list[tuple[int, dict]]], list[dict[str, Any]]]:
    """Annotations grouped by ``image_id`` (with their row numbers), and placeholders of the
    annotations that are not objects with an ``image_id``."""
    groups: dict[Any, list[tuple[int, dict]]] = defaultdict(list)
    bad = []
    for row, ann in enumerate(annotations, 1):
        if not isinstance(ann, dict) or "image_id" not in ann:
            error = RowError("missing_field", "image_id", "an annotation needs its image_id")
            bad.append(placeholder(f"annotation-{row}", f"{path} annotations", row, error))
            continue
        groups[ann["image_id"]].append((row, ann))
    return groups, bad


def _orphans(
    groups: dict[Any, list[tuple[int, dict]]], data: Any, path: Path
) -> list[dict[str, Any]]:
    """Placeholders of the annotations whose ``image_id`` names no entry of ``images`` (counted
    as bad rows, not dropped)."""
    known = {image.get("id") for image in data.get("images") or [] if isinstance(image, dict)}
    out = []
    for image_id, anns in groups.items():
        if image_id in known:
            continue
        for row, _ in anns:
            error = RowError(
                "missing_field", "image_id", f"image_id {image_id!r} is not in 'images'"
            )
            out.append(placeholder(f"annotation-{row}", f"{path} annotations", row, error))
    return out


def _images(data: Any, path: Path, folders: ImageFolders) -> Iterator[tuple[int, Any, Any]]:
    """``(row, image id, path or RowError)`` of each entry of ``images``."""
    for row, image in enumerate(_section(data, "images", path), 1):
        if not isinstance(image, dict) or "id" not in image:
            yield row, f"image-{row}", RowError("missing_field", "id", "an image needs its id")
            continue
        name = image.get("file_name")
        if not isinstance(name, str) or not name:
            yield row, image["id"], RowError("missing_field", "file_name", "no file name")
            continue
        try:
            yield row, image["id"], folders.find(name, "file_name")
        except RowError as e:
            yield row, image["id"], e


def caption_items(data: Any, path: Path, folders: ImageFolders) -> Iterator[dict[str, Any]]:
    """Items of a COCO captions file (see the module docstring)."""
    groups, bad = _by_image(_section(data, "annotations", path), path)
    yield from bad
    yield from _orphans(groups, data, path)
    for row, image_id, found in _images(data, path, folders):
        try:
            if isinstance(found, RowError):
                raise found
            captions = [ann.get("caption") for _, ann in groups.get(image_id, [])]
            if not captions:
                raise RowError("missing_field", "caption", "the image has no caption annotation")
            if (problem := text_list_problem(captions, "caption")) is not None:
                raise RowError("missing_field", "caption", f"the image's {problem}")
        except RowError as e:
            yield placeholder(str(image_id), f"{path} images", row, e)
            continue
        yield {"id": str(image_id), "images": [found], "captions": captions, "task": "caption"}


def _boxes(anns: list[tuple[int, dict]], names: dict[Any, str], path: Path) -> dict[str, list]:
    """``boxes``/``labels`` of the objects and ``crowd_boxes``/``crowd_labels`` of the crowd
    regions (``iscrowd: 1``: many objects in one region, which COCO's evaluation ignores)."""
    fields: dict[str, list] = {"boxes": [], "labels": [], "crowd_boxes": [], "crowd_labels": []}
    for row, ann in anns:
        try:
            box = xywh_box(ann.get("bbox"), "bbox")
        except RowError as e:
            raise RowError(
                e.reason, e.field, f"{e.why} (annotations row {row}, id {ann.get('id')})"
            ) from None
        crowd = "crowd_" if ann.get("iscrowd") else ""
        fields[f"{crowd}boxes"].append(box)
        fields[f"{crowd}labels"].append(
            names.get(ann.get("category_id"), str(ann.get("category_id")))
        )
    return fields


def instance_items(data: Any, path: Path, folders: ImageFolders) -> Iterator[dict[str, Any]]:
    """Items of a COCO instances file (see the module docstring)."""
    groups, bad = _by_image(_section(data, "annotations", path), path)
    yield from bad
    yield from _orphans(groups, data, path)
    names = {
        c.get("id"): c.get("name") for c in data.get("categories") or [] if isinstance(c, dict)
    }
    for row, image_id, found in _images(data, path, folders):
        try:
            if isinstance(found, RowError):
                raise found
            fields = _boxes(groups.get(image_id, []), names, path)
        except RowError as e:
            yield placeholder(str(image_id), f"{path} images", row, e)
            continue
        for key in ("boxes", "crowd_boxes"):
            fields[key] = upright_boxes(fields[key], found)
        yield {"id": str(image_id), "images": [found], **fields}
