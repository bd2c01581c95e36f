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


def test_glm4v_image_before_a_video_is_refused_with_its_reason(clip):
    pre = AutoProcessorPreprocessor(build_offline_processor("glm4v"))
    with pytest.raises(PreprocessError) as err:
        pre.prepare(_item("image", clip))
    assert err.value.reason == "placeholder_mismatch" and err.value.item == "item image"
    assert "10 image placeholder tokens" in err.value.detail and "4" in err.value.detail
    prepared = pre.prepare(_item("video", clip))  # the order its processor expands right
    assert prepared.multi_modal_input["video_grid_thw"].shape == (1, 3)


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
