"""Data files: image sources recognised by form, file-level errors, the item schema checker."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from vlrollout.datasets import DataFileError, load_items, source_form
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import load_image
from vlrollout.processors.messages import normalize_media
from vlrollout.run.items import item_problems, validate_data


def _b64_png() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (5, 7), (9, 9, 9)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_image_sources_are_recognised_by_form(tmp_path):
    (tmp_path / "sub").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "sub" / "rel.png")
    Image.new("RGB", (8, 2)).save(tmp_path / "abs.png")
    b64 = _b64_png()
    sources = [
        "sub/rel.png",
        str(tmp_path / "abs.png"),
        f"file://{tmp_path / 'abs.png'}",
        b64,
        f"data:image/png;base64,{b64}",
        "http://example.com/x.png",
    ]
    data = _write(tmp_path / "d.jsonl", [{"id": "a", "messages": "x", "images": sources}])
    (item,) = load_items(data)
    sizes, reasons = [], []
    for s in item["images"]:
        try:
            sizes.append(load_image(s, "item a").original_size)
        except PreprocessError as e:
            reasons.append((e.reason, e.detail))
    assert sizes == [(4, 4), (8, 2), (8, 2), (5, 7), (5, 7)]
    assert len(reasons) == 1 and reasons[0][0] == "image_source" and "not fetched" in reasons[0][1]


def test_sources_inside_messages_are_resolved_too(tmp_path):
    Image.new("RGB", (4, 4)).save(tmp_path / "m.png")
    row = {
        "id": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "m.png"}},
                    {"type": "image", "image": "m.png"},
                    {"type": "text", "text": "?"},
                ],
            }
        ],
    }
    (item,) = load_items(_write(tmp_path / "d.jsonl", [row]))
    parts = item["messages"][0]["content"]
    assert parts[0]["image_url"]["url"] == str(tmp_path / "m.png")
    assert parts[1]["image"] == str(tmp_path / "m.png")


def test_source_form():
    assert source_form("a/b.png") == "path"
    assert source_form("/9j/4AAQSkZJRgABAQ==") == "base64"
    assert source_form("ftp://h/x") == "url"


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: p, "is a folder holding neither"),
        (lambda p: p / "missing.jsonl", "does not exist"),
        (lambda p: (p / "e.jsonl").write_text("") and None or p / "e.jsonl", "has no items"),
        (lambda p: (p / "d.csv").write_text("a") and None or p / "d.csv", "expected a .jsonl"),
    ],
)
def test_data_file_errors(tmp_path, make, match):
    with pytest.raises(DataFileError, match=match):
        load_items(make(tmp_path))


def test_validate_data_reports_every_bad_line(tmp_path):
    rows = [
        {"id": "ok", "messages": "hi"},
        "{not json",
        {"id": "n", "messages": [{"role": "user", "content": None}]},
        {"id": "b", "messages": "x", "boxes": [[1, 2, 3]]},
        {"id": "ok", "messages": "again"},
        "[1, 2]",
    ]
    n, bad = validate_data(_write(tmp_path / "d.jsonl", rows))
    assert n == 6
    assert [(b.line, b.reason) for b in bad] == [
        (2, "bad_json"),
        (3, "bad_message"),
        (4, "bad_field"),
        (5, "duplicate_id"),
        (6, "bad_item"),
    ]


def test_lone_surrogates_and_carriage_returns_inside_a_record(tmp_path):
    """A lone \\ud800 escape is legal JSON but no text: its item is refused naming the field
    (its id crashed the run when the outcome file was named). A carriage return inside a record
    is JSON whitespace: the record stays one item, and later lines keep their numbers."""
    good = json.dumps({"id": "g", "messages": "hi", "task": "x"})
    rows = [
        '{"id": "s\\ud800", "messages": "hi"}',
        '{"id": "t", "messages": [{"role": "user", "content": "a \\udcff b"}]}',
        good.replace('"task"', '\r"task"'),
        {"id": "g", "messages": "again"},
    ]
    path = _write(tmp_path / "d.jsonl", rows)
    n, bad = validate_data(path)
    assert n == 4
    assert [(b.line, b.reason) for b in bad] == [
        (1, "bad_item"),
        (2, "bad_item"),
        (4, "duplicate_id"),
    ]
    assert "field id holds half of a UTF-16 pair" in bad[0].detail
    assert "field messages[0].content holds" in bad[1].detail
    items = load_items(path)
    assert items[2]["task"] == "x" and len(items) == 4
    for item in items:
        json.dumps(item["id"]).encode()  # every id can name a file


def test_validate_data_lists_a_lines_field_problems_and_its_missing_image_together(tmp_path):
    """Every problem of a line at once: the fields it gets wrong and the image it cannot open,
    not the image only after the fields are fixed."""
    rows = [
        {"id": "p", "messages": "<image>x", "images": ["gone.png"], "prompt": "y"},
        {"id": "b", "messages": "<image>x", "images": ["gone.png"], "boxes": [[1, 2, 3]]},
    ]
    _, bad = validate_data(_write(tmp_path / "d.jsonl", rows))
    assert [(b.line, b.reason) for b in bad] == [
        (1, "reserved_field"),
        (1, "image_not_found"),
        (2, "bad_field"),
        (2, "image_not_found"),
    ]


def test_inline_images_are_told_from_names_by_their_bytes():
    """A base64 source is one whose bytes start as an image or video does: base64url and
    unpadded text are inline images, a bare file name that happens to be base64 text is a
    path."""
    png = _b64_png()
    url_safe = png.replace("+", "-").replace("/", "_").rstrip("=")
    assert source_form(url_safe) == "base64"
    assert source_form(png.rstrip("=")) == "base64"
    assert source_form("photo001") == "path"
    assert source_form("d41d8cd98f00b204e9800998ecf8427e") == "path"


@pytest.mark.parametrize("name", ["photo001", "d41d8cd98f00b204e9800998ecf8427e"])
def test_validate_data_finds_a_bare_name_missing_as_run_does(tmp_path, monkeypatch, name):
    """From the data file's folder, by a relative path: the name is a path beside the file and
    missing (image_not_found naming where), not base64 that fails to decode."""
    from vlrollout.run.items import validate_data

    _write(tmp_path / "d.jsonl", [{"id": "a", "messages": "<image>x", "images": [name]}])
    monkeypatch.chdir(tmp_path)
    _, (bad,) = validate_data("d.jsonl")
    assert bad.reason == "image_not_found" and str(tmp_path / name) in bad.detail
    with pytest.raises(PreprocessError) as info:
        load_image(name, "item a")  # a bare name that is no file here, whatever its letters
    assert info.value.reason == "image_not_found"


def test_a_missing_bare_file_name_is_not_found_and_base64url_loads(tmp_path):
    png = _b64_png()
    url_safe = png.replace("+", "-").replace("/", "_").rstrip("=")
    rows = [{"id": "a", "messages": "x", "images": [url_safe, "photo001"]}]
    (item,) = load_items(_write(tmp_path / "d.jsonl", rows))
    assert load_image(item["images"][0], "item a").original_size == (5, 7)
    with pytest.raises(PreprocessError) as info:
        load_image(item["images"][1], "item a")
    assert (
        info.value.reason == "image_not_found" and str(tmp_path / "photo001") in info.value.detail
    )


def test_a_missing_path_that_decodes_as_base64_is_not_found():
    with pytest.raises(PreprocessError) as info:
        load_image("/nonexistent/photo0001", "item a")  # 22 base64 characters, padded: 15 bytes
    assert info.value.reason == "image_not_found"


def test_a_home_relative_path_is_read_from_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "pics").mkdir(parents=True)
    Image.new("RGB", (3, 2)).save(tmp_path / "home" / "pics" / "a.png")
    rows = [{"id": "a", "messages": "x", "images": ["~/pics/a.png"]}]
    (item,) = load_items(_write(tmp_path / "d.jsonl", rows))
    assert load_image(item["images"][0], "item a").original_size == (3, 2)


def test_image_parts_written_the_transformers_way_are_read(tmp_path):
    """transformers' chat templates take ``{"type": "image", "url" | "path": ...}``: the same
    parts name the image here, resolved against the data file like any path."""
    Image.new("RGB", (4, 4)).save(tmp_path / "m.png")
    parts = [{"type": "image", "url": "m.png"}, {"type": "image", "path": "m.png"}]
    row = {"id": "hf", "messages": [{"role": "user", "content": [*parts, "Same?"]}]}
    (item,) = load_items(_write(tmp_path / "d.jsonl", [row]))
    got = normalize_media(item["messages"], None, None, "item hf").images
    assert got == [str(tmp_path / "m.png")] * 2


def test_source_forms_name_what_the_user_wrote(tmp_path):
    """``file:/abs`` is a file URL, a ``file://`` URL naming a host is refused (it is not a
    relative path), whitespace around a URL is not part of it, an empty source is refused by the
    checker, and a ``{"bytes", "path"}`` struct's path is relative to the data file, as in
    parquet."""
    Image.new("RGB", (3, 2)).save(tmp_path / "a.png")
    b64 = _b64_png()
    rows = [
        {"id": "one_slash", "messages": "<image>x", "images": [f"file:{tmp_path / 'a.png'}"]},
        {"id": "host", "messages": "<image>x", "images": ["file://media/a.png"]},
        {"id": "space", "messages": "<image>x", "images": [f" data:image/png;base64,{b64}\n"]},
        {"id": "struct", "messages": "<image>x", "images": [{"bytes": None, "path": "a.png"}]},
    ]
    one_slash, host, space, struct = load_items(_write(tmp_path / "d.jsonl", rows))
    assert load_image(one_slash["images"][0], "item").original_size == (3, 2)
    with pytest.raises(PreprocessError) as info:
        load_image(host["images"][0], "item")
    assert info.value.reason == "image_source" and "host 'media'" in info.value.detail
    assert load_image(space["images"][0], "item").original_size == (5, 7)
    assert load_image(struct["images"][0], "item").original_size == (3, 2)
    rows = [{"id": f"e{k}", "messages": "<image>x", "images": [blank]} for k, blank in
            enumerate(["", "   "])]  # fmt: skip
    for empty in load_items(_write(tmp_path / "e.jsonl", rows)):  # as run checks them, read
        assert item_problems(empty) == [("bad_images", "images has an empty entry")]


def test_a_file_that_is_not_utf8_is_refused_naming_the_line(tmp_path):
    """One Latin-1 byte on line 2: the refusal says where it is."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"id": "a", "messages": "hi"}\n{"id": "b", "messages": "caf\xe9"}\n')
    with pytest.raises(DataFileError, match=r"not UTF-8 text .*at line 2, column 29 \(byte 0xe9\)"):
        load_items(path)
    with pytest.raises(DataFileError, match="at line 2"):
        validate_data(path)


def test_a_relative_file_url_is_refused_wherever_the_command_runs(tmp_path, monkeypatch):
    """``file:imgs/a.png`` was read against the working folder: from a folder holding its own
    ``imgs/a.png`` the line named another file than from elsewhere."""
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (3, 2)).save(tmp_path / "imgs" / "a.png")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PreprocessError) as info:
        load_image("file:imgs/a.png", "item")
    assert info.value.reason == "image_source" and "relative path" in info.value.detail


def test_a_position_id_never_takes_another_items_own_id(tmp_path):
    """Line 1 names itself "2" and lines 2-3 give no id: line 3's position id "2" was taken for
    a duplicate of line 1, an id the file never gave it."""
    rows = [{"id": "2", "messages": "a"}, {"messages": "b"}, {"messages": "c"}]
    path = _write(tmp_path / "d.jsonl", rows)
    assert [item["id"] for item in load_items(path)] == ["2", "1", "2~2"]
    assert validate_data(path) == (3, [])


def test_a_symlinked_data_file_gets_one_verdict_from_validate_data_and_run(tmp_path):
    """Media paths are read against the folder the file is named in, by both commands (as a
    Hugging Face cache snapshot names its files): validate-data resolved the link."""
    real, linked = tmp_path / "real", tmp_path / "linked"
    real.mkdir()
    linked.mkdir()
    Image.new("RGB", (3, 2)).save(linked / "a.png")
    _write(real / "d.jsonl", [{"id": "a", "messages": "<image>x", "images": ["a.png"]}])
    (linked / "d.jsonl").symlink_to(real / "d.jsonl")
    n, bad = validate_data(linked / "d.jsonl")
    assert (n, bad) == (1, [])
    (item,) = load_items(linked / "d.jsonl")
    assert item["images"] == [str(linked / "a.png")]


def test_validate_data_names_label_boxes_no_reward_can_score(tmp_path):
    """Reversed corners are refused by every grounding reward, in any frame, after generating;
    validate-data names the box before (run reports it as the reward's refusal, bad_field being
    validate-data's alone). A zero-area box (a point for the
    centre reward) and 0-1 numbers (right for a reward whose label frame is norm1) depend on the
    reward: its refusal fails every completion of the item alike."""
    rows = [
        {"id": "rev", "messages": "x", "boxes": [[12, 30, 88, 70], [310, 85, 205, 270]]},
        {"id": "nan", "messages": "x", "boxes": [40, 60, float("nan"), 90]},
        {"id": "flat", "messages": "x", "boxes": [40, 60, 40, 90]},
        {"id": "frac", "messages": "x", "boxes": [[0.15, 0.2, 0.45, 0.6]]},
    ]
    _, bad = validate_data(_write(tmp_path / "d.jsonl", rows))
    assert [(b.line, b.reason) for b in bad] == [(1, "bad_field"), (2, "bad_field")]
    assert "boxes[1]" in bad[0].detail and "inverted_box" in bad[0].detail
    assert "boxes[0]" in bad[1].detail and "nan" in bad[1].detail


def test_media_given_as_one_string_is_reported_once(tmp_path):
    rows = [{"id": "v", "messages": "<video>What happens?", "videos": "clip.mp4"}]
    _, bad = validate_data(_write(tmp_path / "d.jsonl", rows))
    assert [(b.reason, b.detail) for b in bad] == [
        ("bad_videos", "videos must be a list, got a str")
    ]
