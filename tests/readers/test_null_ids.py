"""A null ``id`` is no id: the row's position stands in, as for a row without the key (a column
of ids with gaps, or ``"id": null`` lines, are not duplicates of the id "None")."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from vlrollout.readers import read_items


def test_null_ids_in_jsonl_take_the_line_position(tmp_path):
    path = tmp_path / "items.jsonl"
    rows = [{"id": None, "messages": "How many?", "answer": n} for n in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = read_items(path)
    assert [i["id"] for i in items] == ["0", "1", "2"]
    assert all("_load_error" not in i for i in items)


def test_null_ids_in_a_table_take_the_row_position(tmp_path):
    path = tmp_path / "rows.parquet"
    table = pa.table({"id": [None, None, "k"], "question": ["q"] * 3, "answer": ["1"] * 3})
    pq.write_table(table, path)
    items = read_items(path)
    assert [i["id"] for i in items] == ["0", "1", "k"]
    assert all("_load_error" not in i for i in items)


def test_an_id_that_is_a_list_or_an_object_is_a_bad_line(tmp_path):
    path = tmp_path / "items.jsonl"
    rows = [
        {"id": [1, 2], "messages": "x"},
        {"id": {"a": 1}, "messages": "x"},
        {"id": True, "messages": "x"},
    ]
    path.write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + json.dumps({"id": 7, "messages": "x"}) + "\n"
    )
    items = read_items(path)
    assert [i["_load_error"]["reason"] for i in items[:3]] == ["bad_item"] * 3
    assert "an id is a string or a number" in items[0]["_load_error"]["detail"]
    assert items[3]["id"] == "7" and "_load_error" not in items[3]


def test_jsonl_and_parquet_take_the_same_ids_and_choices_from_the_same_rows(tmp_path):
    """lmms-eval exports carry ``question_id`` and MMMU-style options as the text of a list; a
    row reads the same from JSONL as from parquet, so a repeated question_id is a duplicate in
    both, and scores join back to the benchmark's ids."""
    rows = [
        {"question_id": "q7", "question": "Which?", "choices": "['red', 'green']", "answer": "B"},
        {"question_id": "q7", "question": "Which?", "choices": '["red", "blue"]', "answer": "A"},
        {"question_id": "q9", "question": "Which?", "choices": "red or blue", "answer": "A"},
    ]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), table)
    for path in (jsonl, table):
        first, again, bad = read_items(path, prompt="{question}")
        assert first["id"] == "q7" and first["choices"] == ["red", "green"], path
        assert again["_load_error"]["reason"] == "duplicate_id", (path, again)
        assert bad["_load_error"]["reason"] == "bad_row", (path, bad)
        assert "'red or blue' is not a list of option texts" in bad["_load_error"]["detail"]


def test_a_jsonl_line_that_cannot_be_an_item_keeps_its_own_id_and_says_line(tmp_path):
    """As a table's bad row does: the rejection is found by the line's id, and the detail
    counts lines, as the file's other rejections do."""
    path = tmp_path / "items.jsonl"
    rows = [
        {"id": "g1", "question": "Which?", "options": "['a', 'b']", "answer": "A"},
        {"id": "g2", "question": "Which?", "answer": "A"},
        {"question": "Which?", "answer": "A"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    good, own, anonymous = read_items(path, mapping={"choices": "options"}, prompt="{question}")
    assert good["id"] == "g1" and "_load_error" not in good
    assert own["id"] == "g2" and own["_load_error"]["reason"] == "missing_field"
    assert own["_load_error"]["detail"].startswith(f"{path} line 2: field options")
    assert anonymous["id"] == "line-3"
