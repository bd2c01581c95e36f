"""Where a reader finds an item's images: Hugging Face image structs, and files named by an
annotation file (COCO ``file_name``, LLaVA ``image``) under an image folder.

The image-folder rule (stated in ``docs/datasets.md``): with ``images_root`` the name is looked up
under that folder only; without it, under the annotation file's folder and its parent, each as is
and in the subfolders :data:`SUBFOLDERS` (the layouts COCO, the refer API and LLaVA ship in), the
first existing file winning. A name found nowhere is a malformed row (``image_not_found``), never a
guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrollout.readers.fields import RowError
from vlrollout.readers.sources import resolve_source

SUBFOLDERS = (
    "",
    "images",
    "train2014",
    "val2014",
    "train2017",
    "val2017",
    "test2017",
    "images/train2014",
    "images/val2014",
    "images/train2017",
    "images/val2017",
    "images/mscoco/images/train2014",
)
"""Subfolders searched (in this order) under the annotation file's folder and its parent."""


def image_source(value: Any, base: Path, column: str) -> Any:
    """An image source from a Hugging Face image value: raw ``bytes`` of a ``{"bytes", "path"}``
    struct, else its path (resolved against ``base``); plain strings and bytes pass through.

    Raises:
        RowError: the value holds no image (``missing_field``).
    """
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        value = value.get("path")
    if isinstance(value, (bytes, bytearray)) and value:
        return bytes(value)
    if isinstance(value, str) and value:
        return resolve_source(value, base)
    raise RowError(
        "missing_field", column, "no image (null, or a struct with neither bytes nor path)"
    )


def image_sources(value: Any, base: Path, column: str) -> list[Any]:
    """:func:`image_source` of one image value or of each entry of a list of them."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise RowError("missing_field", column, "an empty list of images")
        return [image_source(v, base, f"{column}[{k}]") for k, v in enumerate(value)]
    return [image_source(value, base, column)]


@dataclass
class ImageFolders:
    """Finds files named by an annotation file (see the module docstring for the rule)."""

    annotation_file: Path
    images_root: Path | None = None
    _last: Path | None = field(default=None, repr=False)

    def candidates(self) -> list[Path]:
        """The folders searched, in order."""
        if self.images_root is not None:
            return [self.images_root]
        here = self.annotation_file.resolve().parent
        return [base / sub if sub else base for base in (here, here.parent) for sub in SUBFOLDERS]

    def find(self, name: str, field_name: str) -> str:
        """The absolute path of image ``name``.

        Raises:
            RowError: ``image_not_found``, naming the folders searched and ``images_root``.
        """
        if Path(name).is_absolute() and Path(name).is_file():
            return name
        searched = self.candidates()
        folders = searched if self._last is None else [self._last, *searched]
        for folder in folders:
            if (folder / name).is_file():
                self._last = folder
                return str(folder / name)
        if self.images_root is not None:
            where = f"images_root (--images-root) {self.images_root}; is it the right folder?"
        else:
            where = (
                f"{searched[0]}, its parent, or their images/, train2014/, val2017/... "
                "subfolders; pass images_root (--images-root) naming the folder that holds it"
            )
        raise RowError("image_not_found", field_name, f"image {name!r} not found under {where}")
