"""Tasks on the items a new user's downloads hold: references that tokenize to nothing, boxes
at the edge of a threshold."""

from __future__ import annotations

from vlrollout.eval.tasks import get_task


def test_a_caption_item_whose_only_reference_is_punctuation_is_refused_by_name():
    """COCO's PTB tokenizer drops punctuation tokens, so a reference of "..." is an empty
    reference: no prediction can match it, and scoring the item would put a 0 in the split's
    numbers that says nothing about the model. It is refused, naming the field."""
    task = get_task("caption")
    item = {"id": "2", "images": ["x.jpg"], "captions": ["...", " , ! "]}
    why = task.check_item(item)
    assert why is not None and "captions" in why
    assert task.check_item({**item, "captions": ["...", "A red square."]}) is None
