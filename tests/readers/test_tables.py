"""Hugging Face tables: parquet with ``{"bytes", "path"}`` image structs (lmms-lab layouts and
mapped columns) and ``save_to_disk`` folders, read into items with no conversion step."""

from __future__ import annotations

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.readers.conftest import png
from vlrollout.datasets import LOAD_ERROR, DataFileError, load_items
from vlrollout.processors.image_loading import load_image
from vlrollout.readers import detect_format, parse_mapping
from vlrollout.readers.tables import option_texts

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _parquet(path, columns: dict, types: dict | None = None):
    types = types or {}
    table = pa.table({k: pa.array(v, type=types.get(k)) for k, v in columns.items()})
    pq.write_table(table, path)
    return path


def test_lmms_lab_refcoco_rows_give_one_item_per_expression(tmp_path):
    # As lmms-lab/RefCOCO publishes it: bbox x, y, w, h in pixels, answer = expressions.
    data = _parquet(
        tmp_path / "val-00000-of-00001.parquet",
        {
            "question_id": ["17", "18"],
            "image": [
                {"bytes": png((40, 30)), "path": "a.jpg"},
                {"bytes": png((8, 8)), "path": None},
            ],
            "answer": [["left dog", "brown dog"], ["cup"]],
            "bbox": [[2.0, 3.0, 10.0, 5.0], [1.0, 1.0, 2.0, 2.0]],
            "segmentation": [[1.0], [2.0]],
        },
        {"image": IMAGE},
    )
    items = load_items(data)
    assert [i["id"] for i in items] == ["17-0", "17-1", "18-0"]
    assert [i["expression"] for i in items] == ["left dog", "brown dog", "cup"]
    assert items[0]["boxes"] == [[2.0, 3.0, 12.0, 8.0]]  # x1 = x, x2 = x + w
    assert items[2]["boxes"] == [[1.0, 1.0, 3.0, 3.0]]
    assert {i["split"] for i in items} == {"val"} and {i["task"] for i in items} == {"refcoco"}
    assert "segmentation" not in items[0] and "image" not in items[0]
    assert load_image(items[0]["images"][0]).original_size == (40, 30)
    text = items[0]["messages"][0]["content"]
    assert text[0] == {"type": "image"} and "left dog" in text[1]["text"]


def test_coco_caption_rows_give_captions(tmp_path):
    data = _parquet(
        tmp_path / "c.parquet",
        {
            "id": [5],
            "image": [{"bytes": png((6, 4)), "path": None}],
            "question": ["Provide a one-sentence caption for the provided image."],
            "answer": [["a red square.", "a square"]],
        },
        {"image": IMAGE},
    )
    (item,) = load_items(data)
    assert item["id"] == "5" and item["captions"] == ["a red square.", "a square"]
    assert item["task"] == "caption" and "answer" not in item
    assert load_image(item["images"][0]).original_size == (6, 4)


def test_mapping_renames_columns_and_an_image_list_becomes_images(tmp_path):
    data = _parquet(
        tmp_path / "rl.parquet",
        {
            "problem": ["How many?", "What colour?"],
            "solution": ["3", "red"],
            "pics": [
                [{"bytes": png((3, 3)), "path": None}] * 2,
                [{"bytes": png((5, 2)), "path": None}],
            ],
        },
        {"pics": pa.list_(IMAGE)},
    )
    mapping = parse_mapping(["question=problem", "answer=solution", "images=pics"])
    items = load_items(data, mapping=mapping, prompt="{question}")
    assert [i["question"] for i in items] == ["How many?", "What colour?"]
    assert [i["answer"] for i in items] == ["3", "red"]
    assert "problem" not in items[0] and "pics" not in items[0]
    assert [len(i["images"]) for i in items] == [2, 1]
    assert items[0]["messages"][0]["content"][:2] == [{"type": "image"}, {"type": "image"}]
    assert load_image(items[1]["images"][0]).original_size == (5, 2)


def test_a_mapping_gathers_several_columns_into_a_list(tmp_path):
    """MMBench keeps its options in columns A to D (null past the last) and MMMU its images in
    image_1 to image_7: ``choices=A,B,C,D`` and ``images=image_1,image_2`` gather a row's
    non-null values in order; a null before a value is refused, since it would move letters."""
    picture = {"bytes": png((4, 4)), "path": None}
    data = _parquet(
        tmp_path / "mmbench.parquet",
        {
            "index": ["m1", "m2", "m3"],
            "question": ["Which?"] * 3,
            "A": ["cat", "red", "x"],
            "B": ["dog", "blue", None],
            "C": ["cow", None, "z"],
            "D": [None, None, None],
            "answer": ["B", "A", "A"],
            "image_1": [picture, picture, picture],
            "image_2": [picture, None, None],
        },
        {"image_1": IMAGE, "image_2": IMAGE},
    )
    mapping = parse_mapping(["id=index", "choices=A,B,C,D", "images=image_1,image_2"])
    first, second, gap = load_items(data, mapping=mapping, prompt="{question}")
    assert first["choices"] == ["cat", "dog", "cow"] and len(first["images"]) == 2
    assert second["choices"] == ["red", "blue"] and len(second["images"]) == 1
    assert not {"A", "B", "image_1"} & set(first)
    assert gap["id"] == "m3" and gap[LOAD_ERROR]["reason"] == "bad_row"
    assert "field B: null before C, which has a value" in gap[LOAD_ERROR]["detail"]
    with pytest.raises(DataFileError, match=r"field E: mapped to choices, absent"):
        load_items(data, mapping=parse_mapping(["choices=A,B,C,D,E"]), prompt="{question}")
    with pytest.raises(DataFileError, match=r"--map images=image_1,image_2 "):  # all of them
        load_items(data, mapping=parse_mapping(["choices=A,B,C,D"]), prompt="{question}")


def test_a_mapped_column_that_is_absent_is_named(tmp_path):
    data = _parquet(tmp_path / "d.parquet", {"problem": ["q"], "solution": ["a"]})
    with pytest.raises(DataFileError, match=r"field answer_text: mapped to answer, absent"):
        load_items(data, mapping={"answer": "answer_text"})
    with pytest.raises(DataFileError, match="CANONICAL=COLUMN"):
        parse_mapping(["question"])


def test_malformed_rows_are_named_and_skipped(tmp_path):
    data = _parquet(
        tmp_path / "val-00000-of-00001.parquet",
        {
            "question_id": ["a", "b", "c", "d"],
            "image": [
                {"bytes": png((9, 9)), "path": None},
                None,
                {"bytes": png((9, 9)), "path": None},
                {"bytes": png((9, 9)), "path": None},
            ],
            "answer": [["x"], ["y"], ["z"], ["w"]],
            "bbox": [[0.0, 0.0, 4.0, 4.0], [0.0, 0.0, 4.0, 4.0], [0.0, 0.0, 0.0, 4.0], [1.0, 2.0]],
        },
        {"image": IMAGE},
    )
    items = load_items(data)
    assert [i["id"] for i in items if LOAD_ERROR not in i] == ["a-0"]
    bad = {i["id"]: i[LOAD_ERROR] for i in items if LOAD_ERROR in i}
    assert bad["b"]["reason"] == "missing_field"
    assert bad["b"]["detail"].startswith(f"{data} row 2: field image: ")
    assert bad["c"]["reason"] == "bad_box" and f"{data} row 3: field bbox: " in bad["c"]["detail"]
    assert "width or height <= 0" in bad["c"]["detail"]
    assert bad["d"]["reason"] == "bad_box" and "row 4" in bad["d"]["detail"]


def test_save_to_disk_folders_dataset_and_dataset_dict(tmp_path):
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "question": datasets.Value("string"),
            "answer": datasets.Value("string"),
        }
    )
    rows = {"image": [{"bytes": png((7, 3)), "path": None}] * 2, "question": ["q1", "q2"]}
    rows["answer"] = ["1", "2"]
    one = datasets.Dataset.from_dict(rows, features=features)
    one.save_to_disk(str(tmp_path / "one"))
    assert detect_format(tmp_path / "one") == "hf_disk"
    items = load_items(tmp_path / "one")
    assert [(i["id"], i["question"], i["answer"]) for i in items] == [
        ("0", "q1", "1"),
        ("1", "q2", "2"),
    ]
    assert load_image(items[0]["images"][0]).original_size == (7, 3)
    both = datasets.DatasetDict({"train": one, "test": one.select([1])})
    both.save_to_disk(str(tmp_path / "both"))
    items = load_items(tmp_path / "both", prompt="{question}")
    assert [(i["id"], i["split"]) for i in items] == [
        ("train-0", "train"),
        ("train-1", "train"),
        ("test-0", "test"),
    ]
    assert items[2]["messages"][0]["content"][1]["text"] == "q2"


def test_a_dataset_dict_of_several_splits_prefixes_every_id_by_its_split(tmp_path):
    # lmms-lab numbers question_id per split: the same ids in val and test are different rows.
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "question_id": datasets.Value("string"),
            "answer": datasets.Sequence(datasets.Value("string")),
            "bbox": datasets.Sequence(datasets.Value("float64")),
        }
    )
    image = {"bytes": png((9, 9)), "path": None}
    rows = {"image": [image] * 2, "question_id": ["7", "8"], "answer": [["a", "b"], ["c"]]}
    good = datasets.Dataset.from_dict({**rows, "bbox": [[0, 0, 4, 4]] * 2}, features=features)
    bad = datasets.Dataset.from_dict({**rows, "bbox": [[0, 0, 4, 4], [1, 2]]}, features=features)
    datasets.DatasetDict({"val": good, "test": bad}).save_to_disk(str(tmp_path / "dd"))
    items = load_items(tmp_path / "dd")
    assert [(i["id"], i.get("split")) for i in items] == [
        ("val-7-0", "val"),
        ("val-7-1", "val"),
        ("val-8-0", "val"),
        ("test-7-0", "test"),
        ("test-7-1", "test"),
        ("test-8", None),
    ]
    assert items[-1][LOAD_ERROR]["reason"] == "bad_box"
    assert items[-1][LOAD_ERROR]["detail"].startswith(
        f"{tmp_path / 'dd' / 'test'} row 2: field bbox"
    )
    # One split: its own ids are kept (nothing to collide with).
    datasets.DatasetDict({"test": good}).save_to_disk(str(tmp_path / "one"))
    assert [i["id"] for i in load_items(tmp_path / "one")] == ["7-0", "7-1", "8-0"]


def test_image_columns_that_are_not_read_refuse_the_row(tmp_path):
    """MMMU and BLINK keep images in image_1 ... image_7, MathVista in decoded_image: read as
    other columns they would leave the model blind while the item is scored."""
    picture = {"bytes": png((9, 9)), "path": None}
    data = _parquet(
        tmp_path / "val-00000-of-00001.parquet",
        {
            "id": ["a", "b"],
            "question": ["Which?", "Which?"],
            "image_1": [picture, picture],
            "image_2": [None, picture],
            "answer": ["A", "B"],
        },
        {"image_1": IMAGE, "image_2": IMAGE},
    )
    with pytest.raises(DataFileError, match=r"field image_1: holds images that are not read"):
        load_items(data)
    with pytest.raises(DataFileError, match=r"--map images=image_1"):
        load_items(data)
    mapped = load_items(data, mapping={"images": "image_1"})
    assert LOAD_ERROR not in mapped[0] and "image_2" in mapped[1][LOAD_ERROR]["detail"]


@pytest.mark.parametrize("empty", [[], None])
def test_a_row_whose_images_are_empty_or_null_is_missing_its_image(tmp_path, empty):
    data = _parquet(
        tmp_path / "d.parquet",
        {
            "id": ["a", "b"],
            "question": ["What colour?", "What colour?"],
            "images": [[{"bytes": png((9, 9)), "path": None}], empty],
            "answer": ["red", "red"],
        },
        {"images": pa.list_(IMAGE)},
    )
    items = load_items(data)
    assert LOAD_ERROR not in items[0]
    assert items[1][LOAD_ERROR]["reason"] == "missing_field", items[1]
    assert "field images" in items[1][LOAD_ERROR]["detail"]


def test_our_own_items_with_a_list_answer_are_not_read_as_captions(tmp_path):
    """Only lmms-lab's COCO-Caption2017 rows become captions: an item of ours (with messages, or
    a task) keeps its answer list, in parquet as in JSONL."""
    picture = [{"bytes": png((9, 9)), "path": None}]
    data = _parquet(
        tmp_path / "own.parquet",
        {
            "id": ["a", "b"],
            "messages": [[{"role": "user", "content": "<image>Colour?"}], None],
            "question": [None, "Which caption fits?"],
            "task": [None, "vqa"],
            "images": [picture, picture],
            "answer": [["red", "crimson"], ["the first", "first"]],
        },
        {"images": pa.list_(IMAGE)},
    )
    items = load_items(data, prompt="{question}")
    assert [i.get("answer") for i in items] == [["red", "crimson"], ["the first", "first"]]
    assert all("captions" not in i for i in items)
    assert items[1]["question"] == "Which caption fits?"


@pytest.mark.parametrize(
    ("answer", "says"),
    [([], "is an empty list"), (None, "is not a list but NoneType"), (["a dog", " "], "blank")],
)
def test_a_caption_row_without_captions_is_missing_them(tmp_path, answer, says):
    """A COCO-Caption2017 row whose answer is empty, null or holds a blank caption is a caption
    row missing its captions, not an item missing its messages."""
    picture = [{"bytes": png((9, 9)), "path": None}]
    question = "Provide a one-sentence caption for the provided image."
    data = _parquet(
        tmp_path / "captions.parquet",
        {
            "question_id": ["good", "bad"],
            "question": [question, question],
            "images": [picture, picture],
            "answer": [["a red square", "a square"], answer],
        },
        {"images": pa.list_(IMAGE), "answer": pa.list_(pa.string())},
    )
    good, bad = load_items(data)
    assert good["task"] == "caption" and good["captions"] == ["a red square", "a square"]
    assert bad[LOAD_ERROR]["reason"] == "missing_field", bad
    assert "field answer" in bad[LOAD_ERROR]["detail"] and says in bad[LOAD_ERROR]["detail"]
    assert "caption" in bad[LOAD_ERROR]["detail"]


def test_choices_stored_as_the_text_of_a_list_are_read_as_that_list(tmp_path):
    """MMMU keeps its options as the text of a Python list ("['Baroque', 'Rococo']"), which
    lmms-eval reads with ast.literal_eval."""
    picture = {"bytes": png((9, 9)), "path": None}
    data = _parquet(
        tmp_path / "validation-00000-of-00001.parquet",
        {
            "id": ["a", "b"],
            "question": ["Which style?", "Which style?"],
            "image": [picture, picture],
            "options": ["['Baroque', 'Rococo', 'Gothic']", "['unclosed"],
            "answer": ["B", "A"],
        },
        {"image": IMAGE},
    )
    items = load_items(data, mapping={"choices": "options"}, prompt="{question}\n{options}")
    assert items[0]["choices"] == ["Baroque", "Rococo", "Gothic"]
    assert "B. Rococo" in items[0]["messages"][0]["content"][1]["text"]
    assert items[1][LOAD_ERROR]["reason"] == "bad_row"
    assert "field choices" in items[1][LOAD_ERROR]["detail"]


def _shard(path, ids):
    picture = {"bytes": png((9, 9)), "path": None}
    return _parquet(
        path,
        {
            "question_id": ids,
            "question": ["?"] * len(ids),
            "image": [picture] * len(ids),
            "answer": ["a"] * len(ids),
        },
        {"image": IMAGE},
    )


def test_a_folder_of_hub_parquet_shards_reads_every_shard_of_every_split(tmp_path):
    """A dataset repository as downloaded: data/val-0000k-of-00002.parquet and a test split."""
    data = tmp_path / "RefCOCO" / "data"
    data.mkdir(parents=True)
    _shard(data / "val-00000-of-00002.parquet", ["1", "2"])
    _shard(data / "val-00001-of-00002.parquet", ["3"])
    _shard(data / "test-00000-of-00001.parquet", ["1"])
    for folder in (data, data.parent):  # the data folder, or the repository above it
        items = load_items(folder, prompt="{question}")
        assert [i["id"] for i in items] == ["test-1", "val-1", "val-2", "val-3"]
        assert [i["split"] for i in items] == ["test", "val", "val", "val"]
    one = tmp_path / "one"
    one.mkdir()
    _shard(one / "val-00000-of-00001.parquet", ["1"])
    assert [i["id"] for i in load_items(one, prompt="{question}")] == ["1"]


def test_one_shard_of_several_says_the_others_are_not_read(tmp_path, monkeypatch):
    import vlrollout.readers as readers

    warnings: list[str] = []
    monkeypatch.setattr(readers.logger, "warning", lambda msg, *a: warnings.append(msg % a))
    path = _shard(tmp_path / "val-00000-of-00004.parquet", ["1"])
    load_items(path, prompt="{question}")
    assert len(warnings) == 1 and "1 of 4 shards" in warnings[0] and str(tmp_path) in warnings[0]


@pytest.mark.parametrize(
    ("column", "value", "arrow_type"),
    [
        ("picture", {"bytes": None, "path": "blue.png"}, IMAGE),  # a path-only image struct
        ("img", png((9, 9)), pa.binary()),  # raw image bytes
        ("imgs", [[{"bytes": png((9, 9)), "path": None}]], pa.list_(pa.list_(IMAGE))),
        ("meta", {"image": {"bytes": png((9, 9)), "path": None}}, pa.struct([("image", IMAGE)])),
    ],
)
def test_images_held_in_other_shapes_of_column_refuse_the_row(tmp_path, column, value, arrow_type):
    data = _parquet(
        tmp_path / "d.parquet",
        {"id": ["a"], "question": ["?"], column: [value], "answer": ["x"]},
        {column: arrow_type},
    )
    with pytest.raises(DataFileError, match=f"field {column}: holds images that are not read"):
        load_items(data, prompt="{question}")


def test_a_folder_of_parquet_files_named_by_split_reads_each_as_its_split(tmp_path):
    """train.parquet and test.parquet in one folder are two splits, never one mixed set; a
    split name may hold a hyphen (test-dev)."""
    _shard(tmp_path / "train.parquet", ["1"])
    _shard(tmp_path / "test-dev-00000-of-00001.parquet", ["1"])
    items = load_items(tmp_path, prompt="{question}")
    assert sorted((i["split"], i["id"]) for i in items) == [
        ("test-dev", "test-dev-1"),
        ("train", "train-1"),
    ]


def test_mmbench_nan_strings_are_options_past_the_last(tmp_path):
    """MMBench's TSV-born tables hold the text "nan" where an option is missing; lmms-eval skips
    it (``create_options_prompt``), so the model is not shown "C. nan" and "D. nan"."""
    data = _parquet(
        tmp_path / "mmbench_nan.parquet",
        {
            "index": ["m1", "m2"],
            "question": ["Which one?"] * 2,
            "A": ["cat", "cat"],
            "B": ["dog", "nan"],
            "C": ["nan", "cow"],
            "D": ["nan", "nan"],
            "answer": ["B", "A"],
        },
        {},
    )
    mapping = parse_mapping(["id=index", "choices=A,B,C,D"])
    two, gap = load_items(data, mapping=mapping, prompt="{question}")
    assert two["choices"] == ["cat", "dog"]
    assert gap[LOAD_ERROR]["reason"] == "bad_row"
    assert option_texts(["red", "blue", "nan", "nan"]) == ["red", "blue"]


def test_a_mapping_with_an_empty_column_name_is_refused():
    for pair in ("choices=A,,B", "choices=A,B,", "images=,image_1"):
        with pytest.raises(DataFileError, match="empty column name"):
            parse_mapping([pair])


def test_a_rejected_lines_name_never_takes_another_items_id(tmp_path):
    """A duplicate id is named ``ID@line-N``: when another line has that very id, the two wrote
    one outcome file, one item was lost and every rerun flipped which."""
    import json

    rows = [
        {"id": "a", "messages": "first a"},
        {"id": "a", "messages": "second a"},  # a duplicate on line 2: a@line-2
        {"id": "a@line-2", "messages": "its own id"},
        {"id": "line-5", "messages": "an id like a bad line's name"},
        "not an object",  # line 5
    ]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_items(data)
    ids = [item["id"] for item in items]
    assert len(set(ids)) == len(ids), ids
    assert ids[2] == "a@line-2" and LOAD_ERROR not in items[2]
    assert ids[3] == "line-5" and LOAD_ERROR not in items[3]
    assert [items[k][LOAD_ERROR]["reason"] for k in (1, 4)] == ["duplicate_id", "bad_item"]
