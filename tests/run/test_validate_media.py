"""validate-data on media: the reported item, unread media fields, placeholders without media,
and every video opened as the preprocessor opens it (relative paths against the data file)."""

from __future__ import annotations

import json

from PIL import Image

from tests.processors.test_video import gif_bytes, mp4_bytes
from vlrollout import cli
from vlrollout.run.items import BLOCKING, item_problems, validate_data

ASK = "<video>What does the red square do?"


def _write(tmp_path, *items):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def test_the_reported_item_is_checked_against_its_clip(tmp_path, capsys):
    item = {"id": "q1", "messages": [{"role": "user", "content": ASK}], "videos": ["clip.gif"]}
    path = _write(tmp_path, item)
    assert cli.main(["validate-data", str(path)]) == 1  # clip.gif is not there
    out = capsys.readouterr().out
    assert f"{path}:line 1 (id q1): video_not_found: video 1: " in out and "clip.gif" in out
    (tmp_path / "clip.gif").write_bytes(gif_bytes())
    assert cli.main(["validate-data", str(path)]) == 0
    assert "1 items, all good" in capsys.readouterr().out


def test_media_problems_name_line_field_and_reason(tmp_path):
    (tmp_path / "clip.mp4").write_bytes(mp4_bytes(frames=4))
    (tmp_path / "broken.mp4").write_bytes(b"not a video" * 10)
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    items = [
        {"id": "ok", "messages": ASK, "videos": ["clip.mp4"], "images": []},
        {"id": "text", "messages": ASK},
        {"id": "audio", "messages": "Listen.", "audio": "a.wav"},
        {"id": "single", "messages": [{"role": "user", "content": "<image>Hi"}], "image": "a.png"},
        {"id": "broken", "messages": ASK, "videos": ["broken.mp4"]},
        {"id": "shape", "messages": ASK, "videos": "clip.mp4"},
        {"id": "frames", "messages": ASK, "videos": [["a.png", "a.png"]]},
        {"id": "free", "messages": "Hi", "answer": 3, "shapes": [{"box": [1, 2, 3, 4]}]},
    ]
    n, bad = validate_data(_write(tmp_path, *items))
    got = {(b.id, b.reason) for b in bad}
    assert n == 8
    assert got == {
        ("text", "placeholder_mismatch"),
        ("audio", "media_field_unsupported"),
        ("single", "media_field_unsupported"),
        ("single", "placeholder_mismatch"),
        ("broken", "video_decode"),
        ("shape", "bad_videos"),
    }
    details = {(b.id, b.reason): b.detail for b in bad}
    assert "'audio'" in details[("audio", "media_field_unsupported")]
    assert "data['videos'] has 0" in details[("text", "placeholder_mismatch")]


def test_run_rejects_media_problems_before_any_episode():
    problems = item_problems({"id": "x", "messages": ASK})
    assert problems and all(reason in BLOCKING for reason, _ in problems)
    assert item_problems({"id": "x", "messages": "Hi", "audio": "a.wav"})[0][0] in BLOCKING


def test_a_field_named_as_a_reward_argument_blocks_the_item():
    item = {"id": "t", "messages": "How many?", "answer": 3, "prompt": "How many?"}
    assert [reason for reason, _ in item_problems(item)] == ["reserved_field"]
    assert "reserved_field" in BLOCKING


def test_every_image_is_opened_as_the_preprocessor_opens_it(tmp_path):
    import base64
    import io

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, format="PNG")
    png = buffer.getvalue()
    (tmp_path / "a.png").write_bytes(png)
    (tmp_path / "cut.png").write_bytes(png[:40])
    (tmp_path / "text.png").write_text("not an image")
    (tmp_path / "folder.png").mkdir()
    one = [{"role": "user", "content": "<image>How many?"}]
    part = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "gone.png"}},
                                          {"type": "text", "text": "How many?"}]}]  # fmt: skip
    items = [
        {"id": "ok", "messages": one, "images": ["a.png"]},
        {"id": "inline", "messages": one, "images": [base64.b64encode(png).decode()]},
        {"id": "remote", "messages": one, "images": ["https://example.com/a.png"]},
        {"id": "missing", "messages": one, "images": ["nope.png"]},
        {"id": "cut", "messages": one, "images": ["cut.png"]},
        {"id": "text", "messages": one, "images": ["text.png"]},
        {"id": "folder", "messages": one, "images": ["folder.png"]},
        {"id": "part", "messages": part},
    ]
    n, bad = validate_data(_write(tmp_path, *items))
    assert n == len(items)
    assert {(b.id, b.reason) for b in bad} == {
        ("remote", "image_source"),
        ("missing", "image_not_found"),
        ("cut", "image_decode"),
        ("text", "image_decode"),
        ("folder", "image_not_found"),
        ("part", "image_not_found"),
    }
    assert all("image 1" in b.detail for b in bad)


def test_a_role_chat_templates_do_not_know_is_a_bad_message():
    for role in ("wizard", "usr", "User"):
        item = {"id": "r", "messages": [{"role": role, "content": "How many?"}], "answer": 3}
        [(reason, detail)] = item_problems(item)
        assert reason == "bad_message" and f"role {role!r}" in detail
    for role in ("system", "user", "assistant", "tool"):
        messages = [{"role": role, "content": "x"}, {"role": "user", "content": "How many?"}]
        assert item_problems({"id": "r", "messages": messages, "answer": 3}) == []


def test_every_frame_of_a_frame_list_is_opened(tmp_path):
    """A frame list is images: each one is opened, so frames of two sizes or a missing frame are
    found before a run (the preprocessor refuses both)."""
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    Image.new("RGB", (8, 6)).save(tmp_path / "b.png")
    items = [
        {"id": "sizes", "messages": ASK, "videos": [["a.png", "a.png", "b.png"]]},
        {"id": "gone", "messages": ASK, "videos": [["a.png", "a.png", "nope.png"]]},
        {"id": "ok", "messages": ASK, "videos": [["a.png", "a.png", "a.png"]]},
    ]
    n, bad = validate_data(_write(tmp_path, *items))
    assert n == 3
    assert {(b.id, b.reason) for b in bad} == {
        ("sizes", "video_frames"),
        ("gone", "image_not_found"),
    }


def test_validate_data_refuses_what_run_refuses_in_the_prompt():
    """A per-medium setting on a part (``fps``, ``max_pixels``) is ``bad_message`` in a run, and
    a plain question with media but no ``<image>``/``<video>`` marker has no placeholder for
    them; a string that starts with a bracket may be a chat-templated prompt and is left to the
    preprocessor."""
    fps = [{"role": "user", "content": [{"type": "video", "video": "c.mp4", "fps": 1.0},
                                        {"type": "text", "text": "x"}]}]  # fmt: skip
    pixels = [{"role": "user", "content": [{"type": "image", "image": "a.png", "max_pixels": 9},
                                           {"type": "text", "text": "x"}]}]  # fmt: skip
    assert [r for r, _ in item_problems({"id": "f", "messages": fps})] == ["bad_message"]
    assert [r for r, _ in item_problems({"id": "p", "messages": pixels})] == ["bad_message"]
    plain = {"id": "s", "messages": "What colour is it?", "images": ["a.png"]}
    assert [r for r, _ in item_problems(plain)] == ["placeholder_mismatch"]
    templated = {"id": "t", "messages": "<|vision_start|><|image_pad|>What?", "images": ["a.png"]}
    assert item_problems(templated) == []
    # A templated prompt starts with a special token (the preprocessor's rule); brackets inside
    # a question are text, and the question is checked as any other.
    questions = ("Is 3 < 4 in the picture?", "Describe [the] picture.", "Is a < b?")
    for text in (*questions, "[Q] Where is it?", "<b>Where</b> is it?"):  # a start is no token
        question = {"id": "q", "messages": text, "images": ["a.png"]}
        assert [r for r, _ in item_problems(question)] == ["placeholder_mismatch"], text
    system = {"id": "b", "messages": "<|im_start|>system\nHi<|im_end|>", "images": ["a.png"]}
    assert item_problems(system) == []


def test_validate_data_refuses_choices_run_cannot_read():
    """``choices`` as free text (not the text of a list) is a ``bad_row`` when run loads it."""
    item = {"id": "c", "messages": "Which?", "choices": "one, two, three", "answer": "A"}
    problems = item_problems(item)
    assert [r for r, _ in problems] == ["bad_row"], problems
    assert "not a list of option texts" in problems[0][1]
    listed = {"id": "l", "messages": "Which?", "choices": "['one', 'two']", "answer": "A"}
    assert item_problems(listed) == []


def test_videos_given_inside_message_parts_are_opened_too(tmp_path):
    """``{"type": "video", "video": SOURCE}`` and ``video_url`` parts are videos as run reads
    them: a missing or broken one is reported, as one in ``videos`` is."""
    (tmp_path / "clip.mp4").write_bytes(mp4_bytes(frames=4))
    (tmp_path / "broken.mp4").write_bytes(b"not a video" * 10)

    def part(kind, source):
        value = {"url": source} if kind == "video_url" else source
        content = [{"type": kind, kind: value}, {"type": "text", "text": "What?"}]
        return [{"role": "user", "content": content}]

    items = [
        {"id": "ok", "messages": part("video", "clip.mp4")},
        {"id": "missing", "messages": part("video", "nope.mp4")},
        {"id": "url_missing", "messages": part("video_url", "missing/clip.mp4")},
        {"id": "broken", "messages": part("video", "broken.mp4")},
    ]
    n, bad = validate_data(_write(tmp_path, *items))
    assert n == 4
    assert {(b.id, b.reason) for b in bad} == {
        ("missing", "video_not_found"),
        ("url_missing", "video_not_found"),
        ("broken", "video_decode"),
    }
