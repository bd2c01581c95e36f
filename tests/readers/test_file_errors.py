"""A file no reader can read stops with one DataFileError naming the path and the fix."""

from __future__ import annotations

import pytest

from tests.readers.conftest import write_json
from vlrollout.datasets import DataFileError, load_items


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda p: (p / "x.parquet").write_bytes(b"not parquet") and p / "x.parquet",
            "cannot be read as parquet",
        ),
        (lambda p: (p / "x.json").write_text("{oops") and p / "x.json", "is not JSON"),
        (lambda p: write_json(p / "x.json", {"a": 1}), "JSON of no known layout.*pass --format"),
        (lambda p: (p / "d").mkdir() or p / "d", "neither state.json nor dataset_dict.json"),
        (
            lambda p: (p / "x.p").write_bytes(b"\x80\x04junk") and p / "x.p",
            "cannot be read as a refs pickle",
        ),
    ],
)
def test_unreadable_files_name_the_path_and_the_fix(tmp_path, make, match):
    path = make(tmp_path)
    with pytest.raises(DataFileError, match=match) as e:
        load_items(path)
    assert str(path) in str(e.value)


def test_a_mapping_or_format_a_reader_cannot_take_is_refused(tmp_path):
    path = write_json(tmp_path / "c.json", {"images": [], "annotations": [{"caption": "x"}]})
    with pytest.raises(DataFileError, match="--map applies to jsonl, parquet, hf_disk, llava"):
        load_items(path, mapping={"captions": "caption"})
    with pytest.raises(DataFileError, match="--format 'csv': expected one of jsonl, parquet"):
        load_items(path, fmt="csv")


@pytest.mark.parametrize("name", ["refcoco_val.parquet", "items.jsonl", "captions.json"])
def test_a_missing_data_file_is_told_what_to_pass_whatever_its_format(tmp_path, name):
    """The fix names no format the user did not ask for: a missing parquet file is not told to
    pass a JSONL one."""
    with pytest.raises(DataFileError) as info:
        load_items(tmp_path / name)
    message = str(info.value)
    assert message == f"data file {tmp_path / name} does not exist; give an existing file"


def test_a_file_given_as_a_save_to_disk_folder_is_called_a_file(tmp_path):
    path = write_json(tmp_path / "rows.json", [{"id": "a"}])
    with pytest.raises(DataFileError, match="is a file, not a folder written by save_to_disk"):
        load_items(path, fmt="hf_disk")
