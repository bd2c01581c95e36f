"""RefCOCO / RefCOCO+ / RefCOCOg refs in the refer API's layout: ``refs(unc).p`` (a pickle) or
the same refs as JSON, beside the ``instances.json`` that holds their boxes and images.

Each ref (``ref_id``, ``ann_id``, ``image_id``, ``split``, ``sentences``) is joined with its
annotation by ``ann_id`` (``bbox`` x, y, w, h in pixels -> ``boxes`` ``[[x1, y1, x2, y2]]``) and
with its image by ``image_id`` (``file_name`` under the image folder; the ref's own ``file_name``
carries an annotation suffix no file has). One item per sentence, as lmms-eval evaluates them: id
``<ref_id>-<k>``, ``expression`` the sentence's ``sent`` (else ``raw``), ``split`` the ref's,
``task: "refcoco"``.

The pickle is read by :class:`RefsUnpickler`, which builds builtin containers, strings and
numbers only: a pickle that names any class or function (which is how a pickle runs code) is
refused with :class:`~vlrollout.readers.sources.DataFileError`.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlrollout.readers.coco import load_json
from vlrollout.readers.fields import RowError, placeholder, xywh_box
from vlrollout.readers.images import ImageFolders
from vlrollout.readers.orientation import upright_boxes
from vlrollout.readers.sources import DataFileError

SAFE_BUILTINS = frozenset(
    {"dict", "list", "tuple", "set", "frozenset", "str", "int", "float", "bool"}
)
"""The only globals a refs pickle may name (Python 2 pickles name some containers this way)."""


class RefsUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global but :data:`SAFE_BUILTINS` (no class is built, no
    function called). Python 2 byte strings are decoded as UTF-8 (bad bytes replaced)."""

    def find_class(self, module: str, name: str) -> Any:
        if module in ("builtins", "__builtin__") and name in SAFE_BUILTINS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"refuses {module}.{name}: a refs pickle holds lists, dicts, strings and numbers only"
        )


def load_refs(path: Path) -> Any:
    """The refs of a ``.p``/``.pkl`` pickle (restricted) or a ``.json`` file.

    Raises:
        DataFileError: the file cannot be read, or the pickle names a class or function.
    """
    if path.suffix == ".json":
        return load_json(path)
    try:
        with path.open("rb") as f:
            return RefsUnpickler(f, encoding="utf-8", errors="replace").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        raise DataFileError(
            f"data file {path} cannot be read as a refs pickle ({e}); pass the refer API's "
            "refs(unc).p or the refs as JSON"
        ) from None


def _index(items: Any, key: str) -> dict[Any, dict]:
    return {x[key]: x for x in items or [] if isinstance(x, dict) and key in x}


def _instances(path: Path) -> tuple[dict[Any, dict], dict[Any, dict]]:
    instances = path.parent / "instances.json"
    if not instances.is_file():
        raise DataFileError(
            f"refs {path} need their boxes and images from {instances} (the refer API's layout: "
            "refs(unc).p beside instances.json); put it there"
        )
    data = load_json(instances)
    if not isinstance(data, dict):
        raise DataFileError(f"{instances} is not a COCO instances file (no annotations)")
    return _index(data.get("annotations"), "id"), _index(data.get("images"), "id")


def _ref_fields(ref: Any, anns: dict, images: dict, folders: ImageFolders) -> dict[str, Any]:
    if not isinstance(ref, dict):
        raise RowError("bad_row", "ref", f"a ref is a dict, got a {type(ref).__name__}")
    ann = anns.get(ref.get("ann_id"))
    if ann is None:
        raise RowError("missing_field", "ann_id", f"{ref.get('ann_id')!r} not in instances.json")
    if "image_id" in ref and ref["image_id"] != ann.get("image_id"):
        raise RowError(
            "bad_row",
            "image_id",
            f"the ref's image_id {ref['image_id']!r} is not its annotation's (ann_id "
            f"{ref.get('ann_id')!r} is on image_id {ann.get('image_id')!r})",
        )
    image = images.get(ref.get("image_id", ann.get("image_id")))
    if image is None or not image.get("file_name"):
        raise RowError("missing_field", "image_id", "its image is not in instances.json")
    sentences = ref.get("sentences")
    if not isinstance(sentences, list) or not sentences:
        raise RowError("missing_field", "sentences", "the ref has no sentences")
    found = folders.find(image["file_name"], "file_name")
    return {
        "images": [found],
        "boxes": upright_boxes([xywh_box(ann.get("bbox"), "bbox")], found),
        "sentences": sentences,
    }


def refcoco_items(path: Path, folders: ImageFolders) -> Iterator[dict[str, Any]]:
    """Items of a refs file (see the module docstring)."""
    refs = load_refs(path)
    if not isinstance(refs, list):
        raise DataFileError(f"data file {path}: refs are a list, got a {type(refs).__name__}")
    anns, images = _instances(path)
    for row, ref in enumerate(refs, 1):
        ref_id = str(ref.get("ref_id", f"ref-{row}")) if isinstance(ref, dict) else f"ref-{row}"
        try:
            fields = _ref_fields(ref, anns, images, folders)
        except RowError as e:
            yield placeholder(ref_id, str(path), row, e)
            continue
        for k, sentence in enumerate(fields["sentences"]):
            text = (
                sentence.get("sent") or sentence.get("raw") if isinstance(sentence, dict) else None
            )
            if not isinstance(text, str) or not text.strip():
                error = RowError("missing_field", f"sentences[{k}]", "no sent/raw text")
                yield placeholder(f"{ref_id}-{k}", str(path), row, error)
                continue
            yield {
                "id": f"{ref_id}-{k}",
                "images": fields["images"],
                "expression": text,
                "boxes": fields["boxes"],
                "split": str(ref.get("split") or "all"),
                "task": "refcoco",
                **{key: ref[key] for key in ("ref_id", "ann_id", "image_id") if key in ref},
            }
