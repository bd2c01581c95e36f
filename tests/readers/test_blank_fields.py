"""A blank text field a prompt or a metric needs is named as blank: a prompt template never fills
an empty expression ("Locate  in the image"), and a caption list with one empty caption says
which one is empty instead of calling the field missing."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from vlrollout.eval.tasks import get_task
from vlrollout.readers import read_all_items
from vlrollout.readers.fields import RowError, strings
from vlrollout.readers.prompts import PromptFieldError, with_prompt


@pytest.mark.parametrize("expression", ["", "   "])
def test_a_template_refuses_a_blank_field(expression):
    item = {"id": "r0", "images": ["a.png"], "expression": expression}
    with pytest.raises(PromptFieldError, match="field expression: .*is blank"):
        with_prompt(item, "Locate {expression} in the image.")


@pytest.mark.parametrize(
    ("captions", "said"),
    [
        (["", "a red square"], "caption 1 of 2 is blank"),
        (["a red square", None], "caption 2 of 2 is not a string but NoneType"),
        ("a red square", "is a string: give a list"),
        ([], "is an empty list"),
    ],
)
def test_a_caption_item_says_which_reference_is_wrong(captions, said):
    problem = get_task("caption").check_item({"id": "c", "images": ["a.png"], "captions": captions})
    assert problem is not None and said in problem and "missing" not in problem


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (["cmyk", ""], "entry 2 of 2 is blank"),
        ([], "is an empty list"),
        ("x", "is a string"),
        (3, "is not a list but int"),
    ],
)
def test_strings_names_the_bad_entry(value, said):
    with pytest.raises(RowError, match=said):
        strings(value, "answer")


def test_a_coco_image_with_a_blank_caption_names_it(tmp_path):
    (tmp_path / "val2017").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "val2017" / "a.png")
    data = {
        "images": [{"id": 3, "file_name": "a.png", "width": 8, "height": 8}],
        "annotations": [
            {"id": 1, "image_id": 3, "caption": ""},
            {"id": 2, "image_id": 3, "caption": "a red square"},
        ],
    }
    path = tmp_path / "captions_val2017.json"
    path.write_text(json.dumps(data))
    item = read_all_items(path, fmt="coco_captions")[0]
    assert "caption 1 of 2 is blank" in item["_load_error"]["detail"]


def test_a_missing_options_field_names_the_choices_it_is_built_from():
    item = {"id": "m", "images": ["a.png"], "question": "Which?", "choices": None, "answer": "A"}
    with pytest.raises(PromptFieldError, match="field options: .*built from 'choices'"):
        with_prompt(item, "{question}\n{options}")
