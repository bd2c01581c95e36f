"""Files saved with a UTF-8 byte order mark (Windows editors, ``encoding="utf-8-sig"``) read as
the same items as without it."""

from __future__ import annotations

import json

import pytest

from vlrollout.readers import read_items


@pytest.mark.parametrize("name", ["items.jsonl", "llava.json"])
def test_a_byte_order_mark_changes_nothing(tmp_path, name):
    if name.endswith(".jsonl"):
        text = json.dumps({"id": "a", "messages": "How many?", "answer": 1}) + "\n"
    else:
        rows = [{"id": "a", "conversations": [{"from": "human", "value": "Hi?"},
                                              {"from": "gpt", "value": "Hello"}]}]  # fmt: skip
        text = json.dumps(rows)
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    plain.mkdir(), marked.mkdir()
    (plain / name).write_text(text, encoding="utf-8")
    (marked / name).write_text(text, encoding="utf-8-sig")
    want = read_items(plain / name)
    assert "_load_error" not in want[0], want[0]
    got = read_items(marked / name)
    assert [{k: v for k, v in i.items() if k != "images"} for i in got] == [
        {k: v for k, v in i.items() if k != "images"} for i in want
    ]
