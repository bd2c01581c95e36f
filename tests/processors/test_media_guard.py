"""No medium is silently dropped: media fields nothing reads, placeholders without media and media
for a processor that cannot take them are errors naming the item and the reason, in prepare(),
in the prepare-once cache's keys and through a workflow's ledger."""

from __future__ import annotations

import asyncio

import pytest
from areal.api.cli_args import GenerationHyperparameters
from PIL import Image

from tests.processors.test_video import mp4_bytes, processor
from vlrollout.processors import AutoProcessorPreprocessor, PreprocessError, item_key
from vlrollout.processors.messages import normalize_messages
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import VisionRLVRWorkflow

ISSUE_ITEM = {
    "id": "q1",
    "messages": [{"role": "user", "content": "<video>What does the red square do?"}],
    "videos": ["clip.gif"],
}


def _reason(pre, data) -> PreprocessError:
    with pytest.raises(PreprocessError) as e:
        pre.prepare(data)
    assert e.value.item == "item q1"
    return e.value


@pytest.fixture(scope="module")
def qwen():
    return AutoProcessorPreprocessor(processor("qwen2_vl"))


@pytest.mark.parametrize("family", ["llava", "gemma3", "smolvlm"])
def test_videos_for_a_family_without_video_are_refused(family):
    pre = AutoProcessorPreprocessor(processor(family))
    error = _reason(pre, ISSUE_ITEM)
    assert error.reason == "media_field_unsupported" and "'videos'" in error.detail
    inline = {
        "id": "q1",
        "messages": [{"role": "user", "content": [{"type": "video", "video": b"x"}]}],
    }
    assert _reason(pre, inline).reason == "videos_unsupported"


@pytest.mark.parametrize(
    ("text", "fields", "kind"),
    [
        ("<video>What does the red square do?", {}, "video"),
        ("<image>What colour?", {}, "image"),
        ("What colour?", {"images": [Image.new("RGB", (8, 8))]}, "image"),
        ("Where?", {"videos": [b"x"]}, "video"),
    ],
)
def test_placeholders_and_media_must_pair(qwen, text, fields, kind):
    data = {"id": "q1", "messages": [{"role": "user", "content": text}], **fields}
    error = _reason(qwen, data)
    assert error.reason == "placeholder_mismatch" and f"data['{kind}s']" in error.detail


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("audio", "a.wav"),
        ("audios", ["a.wav"]),
        ("image", "a.png"),
        ("video", "clip.mp4"),
        ("video_url", "clip.mp4"),
    ],
)
def test_unread_media_fields_are_refused(qwen, field, value):
    data = {"id": "q1", "messages": "Describe.", field: value}
    error = _reason(qwen, data)
    assert error.reason == "media_field_unsupported" and repr(field) in error.detail


def test_task_fields_and_empty_media_fields_stay_free(qwen):
    data = {
        "id": "q1",
        "messages": "Describe.",
        "answer": 3,
        "shapes": [{"colour": "red"}],
        "audio": None,
        "images": [],
        "videos": [],
    }
    assert qwen.prepare(data).num_videos == 0


def test_image_only_helper_refuses_inline_videos():
    with pytest.raises(PreprocessError, match="videos_unsupported"):
        normalize_messages(
            [{"role": "user", "content": [{"type": "video", "video": b"x"}]}], None, "i"
        )
    with pytest.raises(PreprocessError, match="video placeholder"):
        normalize_messages("<video>Where?", None, "i")


def test_cache_keys_follow_media_content(tmp_path):
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(mp4_bytes(frames=4))
    base = {"messages": "<video>Where?", "videos": [str(clip)]}
    first = item_key(base)
    clip.write_bytes(mp4_bytes(frames=8))  # same path, other content
    assert item_key(base) != first
    assert item_key({**base, "videos": [b"a"]}) != item_key({**base, "videos": [b"b"]})
    assert item_key({**base, "audio": "a.wav"}) != item_key(base)
    frames = [Image.new("RGB", (8, 8), c) for c in ("red", "blue")]
    swapped = [frames[1], frames[0]]
    assert item_key({**base, "videos": [frames]}) != item_key({**base, "videos": [swapped]})
    copies = [Image.new("RGB", (8, 8), c) for c in ("red", "blue")]  # same pixels, new objects
    assert item_key({**base, "videos": [frames]}) == item_key({**base, "videos": [copies]})


def never(prompt, completions, prompt_ids, completion_ids, **kw):
    return 0.0


def test_the_issue_item_is_rejected_with_its_reason_not_run_as_text():
    llava = processor("llava")
    wf = VisionRLVRWorkflow(
        "tests.processors.test_media_guard.never",
        GenerationHyperparameters(max_new_tokens=4),
        llava.tokenizer,
        llava,
    )
    engine = ScriptedEngine([[llava.tokenizer.eos_token_id]])
    assert asyncio.run(wf.arun_episode(engine, dict(ISSUE_ITEM))) is None
    assert engine.requests == []
    assert wf.ledger.summary()["rejected_by_reason"] == {"media_field_unsupported": 1}
