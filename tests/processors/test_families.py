"""Per family: our PreparedPrompt equals a direct call of the same transformers processor, and the
image-token count in input_ids matches what the vision tensors imply."""

import importlib.util

import pytest
import torch
from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.processors.families import GENERIC, adapter_for

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava", "llava_onevision", "gemma3", "idefics3"]


def prepare_two(pre, rgb_png, tall_png):
    data = {
        "id": "fam",
        "messages": [{"role": "user", "content": "<image>Left or <image> right?"}],
        "images": [str(rgb_png), tall_png],
    }
    return pre.prepare(data)


def direct(processor, prompt_text, paths, **kwargs):
    images = [Image.open(p).convert("RGB") for p in paths]
    return processor(text=[prompt_text], images=[images], return_tensors="pt", **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_equals_direct_processor_call(family, offline, rgb_png, tall_png):
    processor = offline(family)
    pre = AutoProcessorPreprocessor(processor)
    assert pre.family == family
    prepared = prepare_two(pre, rgb_png, tall_png)
    ref = direct(processor, prepared.prompt_text, [rgb_png, tall_png])
    assert prepared.input_ids == ref["input_ids"][0].tolist()
    expected_mm = {
        k
        for k in ref
        if k not in {"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"}
    }
    assert set(prepared.multi_modal_input) == expected_mm
    assert "pixel_values" in expected_mm
    for key in expected_mm:
        assert torch.equal(prepared.multi_modal_input[key], ref[key]), key
    type_key = "token_type_ids" if family == "gemma3" else "mm_token_type_ids"
    if type_key in ref:
        assert prepared.mm_token_type_ids == ref[type_key][0].tolist()
        n_img = prepared.input_ids.count(prepared.image_token_id)
        assert sum(1 for t in prepared.mm_token_type_ids if t == 1) == n_img
    else:
        assert prepared.mm_token_type_ids is None
    assert prepared.num_images == 2 and len(prepared.image_data) == 2
    assert [g.original_width for g in prepared.geometry] == [70, 30]
    assert prepared.image_token_id == processor.image_token_id


def count(prepared):
    return prepared.input_ids.count(prepared.image_token_id)


@pytest.mark.parametrize(
    ("family", "patch"), [("qwen2_vl", 14), ("qwen2_5_vl", 14), ("qwen3_vl", 16)]
)
def test_qwen_token_count_and_geometry(family, patch, offline, rgb_png, tall_png):
    processor = offline(family)
    prepared = prepare_two(AutoProcessorPreprocessor(processor), rgb_png, tall_png)
    grid = prepared.multi_modal_input["image_grid_thw"]
    merge = processor.image_processor.merge_size
    assert prepared.multi_modal_input["pixel_values"].shape[0] == int(grid.prod(-1).sum())
    assert count(prepared) == int(grid.prod(-1).sum()) // merge**2
    for g, (_, gh, gw) in zip(prepared.geometry, grid.tolist(), strict=True):
        assert (g.model_width, g.model_height) == (gw * patch, gh * patch)
        assert g.model_width % (patch * merge) == 0 and g.model_height % (patch * merge) == 0
    # 70x40 keeps its landscape shape, 30x90 its portrait shape
    assert prepared.geometry[0].model_width > prepared.geometry[0].model_height
    assert prepared.geometry[1].model_width < prepared.geometry[1].model_height


def test_llava_token_count_and_geometry(offline, rgb_png, tall_png):
    prepared = prepare_two(AutoProcessorPreprocessor(offline("llava")), rgb_png, tall_png)
    assert prepared.multi_modal_input["pixel_values"].shape == (2, 3, 28, 28)
    assert count(prepared) == 2 * (28 // 14) ** 2
    assert {(g.model_width, g.model_height) for g in prepared.geometry} == {(28, 28)}


def test_llava_onevision_token_count(offline, rgb_png):
    processor = offline("llava_onevision")
    pre = AutoProcessorPreprocessor(processor)
    prepared = pre.prepare(
        {"messages": [{"role": "user", "content": "<image>Q"}], "images": [rgb_png]}
    )
    (h, w) = prepared.multi_modal_input["image_sizes"][0].tolist()
    assert (w, h) == (70, 40)
    tile = prepared.multi_modal_input["pixel_values"].shape[-1]
    assert count(prepared) == processor._get_number_of_features(h, w, tile, tile)
    # anyres: select_best_resolution keeps most of 70x40's pixels on the 56x56 canvas (scale 0.8)
    assert (prepared.geometry[0].model_width, prepared.geometry[0].model_height) == (56, 56)
    assert prepared.multi_modal_input["pixel_values"].shape[1] == 1 + 4  # base + 2x2 tiles


def test_gemma3_token_count(offline, rgb_png, tall_png):
    processor = offline("gemma3")
    prepared = prepare_two(AutoProcessorPreprocessor(processor), rgb_png, tall_png)
    assert prepared.multi_modal_input["pixel_values"].shape == (2, 3, 56, 56)
    assert count(prepared) == 2 * processor.image_seq_length
    assert {(g.model_width, g.model_height) for g in prepared.geometry} == {(56, 56)}


def test_idefics3_token_count_and_geometry(offline, rgb_png, tall_png):
    processor = offline("idefics3")
    prepared = prepare_two(AutoProcessorPreprocessor(processor), rgb_png, tall_png)
    mask = prepared.multi_modal_input["pixel_attention_mask"]
    real_tiles = int(mask.flatten(2).any(-1).sum())
    assert count(prepared) == processor.image_seq_len * real_tiles
    # 70x40 -> 56x32 -> 2x2 tiles of 28; 30x90 -> 19x56 -> 1 col x 2 rows
    assert [(g.model_width, g.model_height) for g in prepared.geometry] == [(56, 56), (28, 56)]
    assert real_tiles == (4 + 1) + (2 + 1)


@pytest.mark.skipif(
    importlib.util.find_spec("num2words") is not None, reason="num2words installed: see below"
)
def test_smolvlm_needs_num2words(offline):
    with pytest.raises(ImportError, match="num2words"):
        offline("smolvlm")


@pytest.mark.skipif(
    importlib.util.find_spec("num2words") is None,
    reason="SmolVLMProcessor needs the optional `num2words` package (not installed)",
)
def test_smolvlm_equals_direct_call(offline, rgb_png, tall_png):
    processor = offline("smolvlm")
    prepared = prepare_two(AutoProcessorPreprocessor(processor), rgb_png, tall_png)
    ref = direct(processor, prepared.prompt_text, [rgb_png, tall_png])
    assert prepared.input_ids == ref["input_ids"][0].tolist()
    assert torch.equal(prepared.multi_modal_input["pixel_values"], ref["pixel_values"])


def test_generic_fallback_for_unknown_processor_class(offline, rgb_png, tall_png):
    class MyProcessor:  # an unrelated class
        pass

    assert adapter_for(MyProcessor()) is GENERIC
    base = offline("llava")
    sub = type("MyLlava", (type(base),), {})  # a subclass keeps its parent's adapter
    assert adapter_for(sub.__new__(sub)).name == "llava"
    # the generic adapter on a real processor: same ids/pixels, geometry from pixel_values' H x W
    pre = AutoProcessorPreprocessor(base, adapter=GENERIC)
    prepared = prepare_two(pre, rgb_png, tall_png)
    ref = direct(base, prepared.prompt_text, [rgb_png, tall_png])
    assert prepared.input_ids == ref["input_ids"][0].tolist()
    assert torch.equal(prepared.multi_modal_input["pixel_values"], ref["pixel_values"])
    assert [(g.model_width, g.model_height) for g in prepared.geometry] == [(28, 28)] * 2
