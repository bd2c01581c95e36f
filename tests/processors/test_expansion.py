"""The preprocessor refuses a prompt its processor expanded wrong: as many image and video
placeholder tokens (by the processor's own modality ids) as the grids imply."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from tests.workflows.test_video_workflows import write_clip
from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.expansion import check_expansion
from vlrollout.testing.offline_processors import build_offline_processor


def _item(first: str, clip: str) -> dict:
    content = [{"type": first}, {"type": "video" if first == "image" else "image"}]
    content.append({"type": "text", "text": "?"})
    return {
        "id": first,
        "messages": [{"role": "user", "content": content}],
        "images": [Image.new("RGB", (56, 56), "red")],
        "videos": [clip],
    }


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return str(write_clip(tmp_path_factory.mktemp("video") / "clip.mp4"))


@pytest.mark.parametrize("first", ["image", "video"])
def test_glm4v_images_beside_videos_are_refused_in_either_order(clip, first):
    """transformers 5.3's GLM-4.1V processor expands an image before a video wrong, and its model
    counts a video's frame tokens as image tokens, so a prompt with both fails in the forward
    whatever the order: refused when it is prepared, naming the item and why."""
    pre = AutoProcessorPreprocessor(build_offline_processor("glm4v"))
    with pytest.raises(PreprocessError) as err:
        pre.prepare(_item(first, clip))
    assert err.value.reason == "mixed_media_unsupported" and err.value.item == f"item {first}"
    assert "GLM-4.1V" in err.value.detail and "one prompt" in err.value.detail


def test_glm4v_takes_a_video_alone(clip):
    pre = AutoProcessorPreprocessor(build_offline_processor("glm4v"))
    item = {"id": "v", "messages": "<video>?", "videos": [clip]}
    assert pre.prepare(item).multi_modal_input["video_grid_thw"].shape == (1, 3)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_qwen_image_and_video_in_either_order_pass(family, clip):
    pre = AutoProcessorPreprocessor(build_offline_processor(family))
    for first in ("image", "video"):
        assert pre.prepare(_item(first, clip)).multi_modal_input["video_grid_thw"].shape == (1, 3)


def test_check_expansion_counts_each_modality():
    outputs = {
        "image_grid_thw": torch.tensor([[1, 2, 4]]),
        "video_grid_thw": torch.tensor([[2, 2, 2]]),
        "mm_token_type_ids": torch.tensor([[0, 1, 1, 0, 2, 2, 0]]),
    }
    check_expansion(outputs, "mm_token_type_ids", 2, "item x")
    outputs["mm_token_type_ids"] = torch.tensor([[0, 1, 1, 0, 2, 0, 0]])
    with pytest.raises(PreprocessError, match="1 video placeholder tokens .* 2"):
        check_expansion(outputs, "mm_token_type_ids", 2, "item x")
    check_expansion({"image_grid_thw": outputs["image_grid_thw"]}, "mm_token_type_ids", 2, "x")


def test_the_glm4v_model_still_fails_on_a_video_before_an_image():
    """Why the refusal above stands: transformers' own processor output for a video then an
    image, fed to the GLM-4.1V model, fails in its forward. When this test fails, transformers
    takes the mix and the refusal can go."""
    from vlrollout.testing.tiny_families import tiny_vlm

    model, processor = tiny_vlm("glm4v")[:2]
    frames = [Image.new("RGB", (56, 56), "red")] * 4
    content = [{"type": "video"}, {"type": "image"}, {"type": "text", "text": "?"}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    inputs = processor(
        text=[text],
        images=[Image.new("RGB", (56, 56), "blue")],
        videos=[frames],
        videos_kwargs={"do_sample_frames": False},
        return_tensors="pt",
    )
    with torch.no_grad(), pytest.raises(ValueError, match="do not match"):
        model(**inputs)
