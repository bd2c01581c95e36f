"""Prompt templates: items without messages get one user message, fields filled from the item."""

from __future__ import annotations

import json
import re

import pytest

from vlrollout.datasets import LOAD_ERROR, DataFileError, load_items
from vlrollout.readers import read_all_items
from vlrollout.readers.prompts import TASK_PROMPTS, PromptFieldError, with_prompt


def test_with_prompt_fills_fields_and_adds_one_image_part_per_image():
    item = {"id": "1", "images": ["a", "b"], "question": "Which?", "choices": ["cat", "dog"]}
    out = with_prompt(item, TASK_PROMPTS["mc"])
    content = out["messages"][0]["content"]
    assert content[:2] == [{"type": "image"}, {"type": "image"}]
    assert content[2]["text"].startswith("Which?\nA. cat\nB. dog\n")
    kept = {"id": "2", "messages": "already", "question": "x"}
    assert with_prompt(kept, "{question}") is kept
    with pytest.raises(PromptFieldError, match="field expression"):
        with_prompt({"id": "3"}, TASK_PROMPTS["refcoco"])


def test_a_prompt_over_a_missing_field_makes_that_item_a_named_placeholder(tmp_path):
    rows = [{"id": "a", "question": "q?", "images": []}, {"id": "b", "images": []}]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_items(path, prompt="Q: {question}")
    assert items[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Q: q?"}]}
    ]
    assert items[1][LOAD_ERROR]["reason"] == "missing_field"
    assert f"{path} item 2: field question" in items[1][LOAD_ERROR]["detail"]
    assert "messages" not in load_items(path)[0]  # JSONL unchanged without a prompt


def test_a_template_str_format_cannot_read_is_refused_naming_prompt_and_doubled_braces(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "expression": "the dog", "choices": ["x"]}) + "\n")
    for template in ("Locate {expression} {", 'Locate {expression}. Answer {"bbox_2d": [x1]}'):
        with pytest.raises(DataFileError, match=r"^--prompt .*write a literal brace as \{\{"):
            load_items(data, prompt=template)
    (item,) = load_items(data, prompt='Locate {expression}. Answer {{"bbox_2d": [x1]}}')
    assert item["messages"][0]["content"][-1]["text"] == 'Locate the dog. Answer {"bbox_2d": [x1]}'


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("{choices[3]}", "reads an attribute or an item of {choices}"),
        ("{images[0]}", "reads an attribute or an item of {images}"),  # a local file's path
        ("{expression.__class__}", "reads an attribute or an item of {expression}"),
        ("Locate {expression}: {boxes}", "{boxes} is the reference"),
        ("{question} ({answer})", "{answer} is the reference"),
        ("Describe it like {captions}", "{captions} is the reference"),
    ],
)
def test_a_template_that_reads_into_a_field_or_shows_a_reference_is_refused(
    tmp_path, template, words
):
    """Such a prompt shows the model a path, a Python repr or its own label, and inflates every
    score made on it, silently."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "expression": "the dog", "answer": "2"}) + "\n")
    with pytest.raises(DataFileError, match=re.escape(words)):
        read_all_items(data, prompt=template)


def test_image_markers_in_the_prompt_text_place_the_images_there(tmp_path):
    # EasyR1-style rows: the question places its image; the model sees it once, at the marker.
    item = {"id": "g", "images": ["a.png", "b.png"], "question": "<image>Find x in<image>."}
    content = with_prompt(item, "{question} Answer briefly.")["messages"][0]["content"]
    assert content == [
        {"type": "image"},
        {"type": "text", "text": "Find x in"},
        {"type": "image"},
        {"type": "text", "text": ". Answer briefly."},
    ]
    data = tmp_path / "d.jsonl"
    rows = [{"id": "one", "images": ["a.png"], "question": "<image><image>Same?"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (bad,) = read_all_items(data, prompt="{question}")
    assert bad[LOAD_ERROR]["reason"] == "placeholder_mismatch"
    assert (
        "item 1: the prompt text has 2 <image> for the item's 1 image(s)"
        in bad[LOAD_ERROR]["detail"]
    )


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("How many?", [{"type": "video"}, {"type": "text", "text": "How many?"}]),
        ("<video>How many?", [{"type": "video"}, {"type": "text", "text": "How many?"}]),
    ],
)
def test_a_templated_item_carries_its_videos_as_it_does_images(question, expected):
    """Video-R1 / EasyR1 rows: no messages, a question (``<video>`` where the clip goes, or no
    marker: the clip first) and ``videos``."""
    item = {"id": "v", "question": question, "videos": ["clip.mp4"]}
    assert with_prompt(item, "{question}")["messages"][0]["content"] == expected


def test_images_and_videos_of_a_templated_item_keep_the_text_order():
    item = {"id": "m", "q": "<video> then <image>?", "images": ["a.png"], "videos": ["c.mp4"]}
    content = with_prompt(item, "{q}")["messages"][0]["content"]
    assert content == [
        {"type": "video"},
        {"type": "text", "text": " then "},
        {"type": "image"},
        {"type": "text", "text": "?"},
    ]


def test_a_video_marker_count_that_does_not_pair_is_named():
    item = {"id": "v", "question": "<video><video>?", "videos": ["clip.mp4"]}
    with pytest.raises(PromptFieldError, match=r"2 <video> for the item's 1 video"):
        with_prompt(item, "{question}")


@pytest.mark.parametrize("value", [["<image>", "list"], {"text": "q"}])
def test_a_template_field_that_is_not_text_makes_a_named_row(tmp_path, value):
    """Its Python repr would be the prompt, with the image inside the brackets."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "e8", "problem": value, "images": ["a.png"]}) + "\n")
    (bad,) = read_all_items(data, prompt="{problem}")
    assert bad[LOAD_ERROR]["reason"] == "missing_field"
    assert "field problem" in bad[LOAD_ERROR]["detail"] and "not text" in bad[LOAD_ERROR]["detail"]
