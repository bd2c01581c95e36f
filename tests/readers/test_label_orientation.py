"""COCO-family boxes are annotated on the stored pixels; vlrollout shows the model the upright
image (EXIF orientation applied), so the readers turn the boxes with it."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vlrollout.datasets import load_items
from vlrollout.processors.image_loading import load_image
from vlrollout.readers.orientation import upright_box

STORED = (1000, 667)
BOX = [100, 200, 500, 600]  # x1, y1, x2, y2 in the stored pixels


@pytest.mark.parametrize(
    ("orientation", "expected"),
    [
        (1, [100, 200, 500, 600]),
        (2, [500, 200, 900, 600]),
        (3, [500, 67, 900, 467]),
        (4, [100, 67, 500, 467]),
        (5, [200, 100, 600, 500]),
        (6, [67, 100, 467, 500]),
        (7, [67, 500, 467, 900]),
        (8, [200, 500, 600, 900]),
    ],
)
def test_the_box_lands_on_the_object_in_the_upright_image(orientation, expected):
    """Each orientation checked against PIL's own exif_transpose of a painted object."""
    image = Image.new("RGB", STORED, "white")
    image.paste((255, 0, 0), tuple(BOX))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    image.save(buf, "PNG", exif=exif.tobytes())
    upright = load_image(buf.getvalue()).image
    red = [(x, y) for x in range(0, upright.width, 1) for y in (expected[1] + 5,)
           if upright.getpixel((x, y))[1] < 100]  # fmt: skip
    assert (min(x for x, _ in red), max(x for x, _ in red) + 1) == (expected[0], expected[2])
    assert upright_box(BOX, orientation, *STORED) == expected


def test_a_refcoco_row_whose_jpeg_is_rotated_has_its_box_turned_with_it(tmp_path):
    image = Image.new("RGB", STORED, "white")
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    image.save(buf, "JPEG", exif=exif.tobytes())
    row = {"question_id": "e", "image": {"bytes": buf.getvalue(), "path": "e.jpg"},
           "question": "q", "answer": ["the box"], "bbox": [100.0, 200.0, 400.0, 400.0],
           "file_name": "e.jpg"}  # fmt: skip
    (tmp_path / "RefCOCO").mkdir()
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "RefCOCO" / "val-00000-of-00001.parquet")
    (item,) = load_items(tmp_path / "RefCOCO")
    assert item["boxes"] == [[67.0, 100.0, 467.0, 500.0]]
