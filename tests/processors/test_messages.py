import pytest

from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.messages import normalize_messages, to_openai_messages


def test_string_placeholders_become_parts_in_order():
    msgs, sources = normalize_messages(
        [{"role": "user", "content": "A <image> then <image>."}], ["a", "b"], "item 0"
    )
    assert msgs[0]["content"] == [
        {"type": "text", "text": "A "},
        {"type": "image"},
        {"type": "text", "text": " then "},
        {"type": "image"},
        {"type": "text", "text": "."},
    ]
    assert sources == ["a", "b"]


def test_text_only_string_stays_a_string():
    msgs, sources = normalize_messages([{"role": "user", "content": "hi"}], None, "item 0")
    assert msgs == [{"role": "user", "content": "hi"}] and sources == []


def test_openai_parts_and_inline_sources_keep_prompt_order():
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:inline1"}},
                {"type": "text", "text": "and"},
                {"type": "image"},
                {"type": "image", "image": "inline2"},
            ],
        },
    ]
    msgs, sources = normalize_messages(messages, ["from_images"], "item 0")
    assert sources == ["data:inline1", "from_images", "inline2"]
    parts = [p for m in msgs if isinstance(m["content"], list) for p in m["content"]]
    assert sum(p["type"] == "image" for p in parts) == 3
    assert msgs[0] == {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize(
    ("content", "images", "n_slots"),
    [("<image><image>", ["a"], 2), ("no image", ["a"], 0), ([{"type": "image"}], [], 1)],
)
def test_placeholder_mismatch_states_both_numbers(content, images, n_slots):
    with pytest.raises(PreprocessError) as info:
        normalize_messages([{"role": "user", "content": content}], images, "item 9")
    err = info.value
    assert err.reason == "placeholder_mismatch" and err.item == "item 9"
    assert f"{n_slots} image placeholder" in err.detail and f"{len(images)} image(s)" in err.detail


def test_inline_images_do_not_consume_data_images():
    content = [{"type": "image_url", "image_url": {"url": "x"}}]
    with pytest.raises(PreprocessError, match="0 image placeholder.*1 image"):
        normalize_messages([{"role": "user", "content": content}], ["extra"], "item 0")


@pytest.mark.parametrize(
    "messages",
    [[], [{"content": "no role"}], [{"role": "user", "content": [{"type": "audio"}]}]],
)
def test_bad_messages(messages):
    with pytest.raises(PreprocessError) as info:
        normalize_messages(messages, None, "item 0")
    assert info.value.reason == "bad_message"


@pytest.mark.parametrize(
    ("messages", "got"),
    [(5, "an int"), ([], "an empty list"), (None, "None"), ({"a": 1}, "a dict")],
)
def test_messages_that_are_no_chat_name_both_forms_a_chat_may_take(messages, got):
    with pytest.raises(PreprocessError) as e:
        normalize_messages(messages, None, "item 0")
    assert e.value.detail == (
        "data['messages'] must be a prompt string or a non-empty list of {role, content} "
        f"messages, got {got}"
    )


def test_openai_messages_get_data_urls():
    msgs, _ = normalize_messages([{"role": "user", "content": "<image>Q"}], ["a"], "item 0")
    out = to_openai_messages(msgs, ["data:image/png;base64,AAA"])
    assert out[0]["content"][0] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AAA"},
    }
    assert out[0]["content"][1] == {"type": "text", "text": "Q"}
    assert msgs[0]["content"][0] == {"type": "image"}  # input not mutated


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": None}],
        [{"role": "user", "content": 42}],
        [{"role": "user", "content": [7]}],
        [{"role": "user", "content": [{"type": "text", "text": 3}]}],
        42,
    ],
)
def test_malformed_messages_are_bad_message_not_a_crash(messages):
    """Called directly (as ``train`` and AReaL-driven workflows do), malformed messages are a
    ``bad_message`` rejection naming the item, never a ``TypeError``/``AttributeError``."""
    with pytest.raises(PreprocessError) as e:
        normalize_messages(messages, [], "item x")
    assert e.value.reason == "bad_message" and e.value.item == "item x"


def test_video_placeholders_pair_with_videos_in_prompt_order():
    from vlrollout.processors.messages import normalize_media

    content = [
        {"type": "video"},
        "<image> then <video>",
        {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
        {"type": "video", "video": "inline.mp4"},
    ]
    n = normalize_media([{"role": "user", "content": content}], ["a.png"], ["v1", "v2"], "item 0")
    kinds = [p["type"] for p in n.messages[0]["content"]]
    assert kinds == ["video", "image", "text", "video", "video", "video"]
    assert n.images == ["a.png"]
    assert n.videos == ["v1", "v2", "data:video/mp4;base64,AAAA", "inline.mp4"]
    with pytest.raises(PreprocessError, match=r"2 video placeholder\(s\).*has 1 video"):
        normalize_media("<video><video>", None, ["v1"], "item 0")
    with pytest.raises(PreprocessError, match="video_url part without a url"):
        normalize_media([{"role": "user", "content": [{"type": "video_url"}]}], None, None, "i")


@pytest.mark.parametrize(
    ("part", "named", "setting"),
    [
        (
            {"type": "video", "video": ["a.png", "b.png"], "sample_fps": 1.0},
            "sample_fps",
            "video_fps",
        ),
        ({"type": "video", "video": "clip.mp4", "fps": 1.0}, "fps", "video_fps"),
        ({"type": "video", "video": "clip.mp4", "max_frames": 8}, "max_frames", "video_max_frames"),
        ({"type": "video", "video": "clip.mp4", "nframes": 8}, "nframes", "video_max_frames"),
        ({"type": "image", "image": "a.png", "max_pixels": 4096}, "max_pixels", "max_pixels"),
        ({"type": "image", "image": "a.png", "resized_height": 28}, "resized_height", "max_pixels"),
    ],
)
def test_per_medium_settings_in_a_part_are_refused_not_ignored(part, named, setting):
    """qwen-vl-utils reads sampling and resize settings from each part; here they are settings
    of the run, so a part that carries one is an error naming it and the run's setting."""
    from vlrollout.processors.messages import normalize_media

    with pytest.raises(PreprocessError) as e:
        normalize_media([{"role": "user", "content": [part]}], None, None, "item 3")
    assert e.value.reason == "bad_message"
    assert repr(named) in e.value.detail and setting in e.value.detail, e.value.detail


def test_empty_keys_of_a_datasets_struct_column_are_not_settings():
    """HF datasets store parts as one struct: every part has every key, unused ones None."""
    from vlrollout.processors.messages import normalize_media

    part = {"type": "image", "image": "a.png", "text": None, "max_pixels": None, "fps": None}
    out = normalize_media([{"role": "user", "content": [part]}], None, None, "item 3")
    assert out.images == ["a.png"]


def test_markers_inside_a_text_part_are_placeholders_as_in_a_string_part():
    """LLaVA-style text moved into OpenAI parts: ``{"type": "text", "text": "<image>..."}``. The
    marker pairs with an image, as it does in a string part, and is never sent as literal text."""
    content = [{"type": "text", "text": "Compare <image> with"}, "<image>, please."]
    msgs, sources = normalize_messages([{"role": "user", "content": content}], ["p", "q"], "it")
    assert msgs[0]["content"] == [
        {"type": "text", "text": "Compare "},
        {"type": "image"},
        {"type": "text", "text": " with"},
        {"type": "image"},
        {"type": "text", "text": ", please."},
    ]
    assert sources == ["p", "q"]
    alone = [{"role": "user", "content": [{"type": "text", "text": "<image>Which side?"}]}]
    with pytest.raises(PreprocessError, match="1 image placeholder.*0 image"):
        normalize_messages(alone, [], "it")
