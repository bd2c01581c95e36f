"""Per family: our PreparedPrompt equals a direct call of the same transformers processor, and the
image-token count in input_ids matches what the vision tensors imply."""

import copy
import importlib.util

import numpy as np
import pytest
import torch
from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor, PreprocessError
from vlrollout.processors.families import GENERIC, adapter_for

FAMILIES = [
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "llava",
    "llava_onevision",
    "gemma3",
    "idefics3",
    "internvl",
    "glm4v",
    "mistral3",
    "lfm2_vl",
]


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
    ("family", "patch"), [("qwen2_vl", 14), ("qwen2_5_vl", 14), ("qwen3_vl", 16), ("glm4v", 14)]
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


def _spans(prepared, start_id: int, end_id: int) -> list[int]:
    """Image placeholders between each ``start_id`` and the next ``end_id``."""
    counts, inside = [], None
    for tid in prepared.input_ids:
        if tid == start_id:
            inside = 0
        elif tid == end_id and inside is not None:
            counts.append(inside)
            inside = None
        elif tid == prepared.image_token_id and inside is not None:
            inside += 1
    return counts


def test_internvl_tiles_and_geometry(offline, rgb_png, tall_png):
    """70x40 (aspect 1.75) takes the 2x1 grid of 56-pixel tiles, 30x90 (1/3) the 1x3 grid; each
    adds a thumbnail tile. The 1x1 grid is one tile, no thumbnail."""
    processor = offline("internvl")
    prepared = prepare_two(AutoProcessorPreprocessor(processor), rgb_png, tall_png)
    assert [(g.model_width, g.model_height) for g in prepared.geometry] == [(112, 56), (56, 168)]
    per_tile = processor.image_seq_length
    spans = _spans(prepared, processor.start_image_token_id, processor.end_image_token_id)
    assert spans == [(2 + 1) * per_tile, (3 + 1) * per_tile]
    assert prepared.multi_modal_input["pixel_values"].shape == (3 + 4, 3, 56, 56)
    square = AutoProcessorPreprocessor(processor).prepare(
        {"messages": [{"role": "user", "content": "<image>Q"}], "images": [_image(50, 50)]}
    )
    assert (square.geometry[0].model_width, square.geometry[0].model_height) == (56, 56)
    assert square.multi_modal_input["pixel_values"].shape[0] == 1


def _image(w: int, h: int):
    return Image.new("RGB", (w, h), (120, 30, 200))


def test_glm4v_pixel_budget_counts_both_temporal_copies(offline):
    """GLM-4.1V's smart_resize counts an image twice (temporal patch 2), so max_pixels=N must
    give at most N pixels per image, as Qwen2-VL's does."""
    processor = offline("glm4v")
    pre = AutoProcessorPreprocessor(processor, min_pixels=28 * 28, max_pixels=56 * 56)
    prepared = pre.prepare(
        {"messages": [{"role": "user", "content": "<image>Q"}], "images": [_image(200, 200)]}
    )
    geom = prepared.geometry[0]
    assert (geom.model_width, geom.model_height) == (56, 56)
    grid = prepared.multi_modal_input["image_grid_thw"]
    assert grid.tolist() == [[1, 4, 4]] and count(prepared) == 4


def test_mistral3_longest_edge_and_patch_rounding(offline, rgb_png, tall_png):
    """Pixtral: no downscale under the 112-pixel longest edge; sides rounded up to multiples of
    28 (patch 14 x merge 2): 70x40 -> 84x56, 30x90 -> 56x112; a 300x120 image is scaled by
    300/112 (floor) to 112x44 -> 112x56. One [IMG] per merged patch."""
    processor = offline("mistral3")
    pre = AutoProcessorPreprocessor(processor)
    prepared = prepare_two(pre, rgb_png, tall_png)
    assert [(g.model_width, g.model_height) for g in prepared.geometry] == [(84, 56), (56, 112)]
    assert prepared.multi_modal_input["image_sizes"].tolist() == [[56, 84], [112, 56]]
    assert count(prepared) == 3 * 2 + 2 * 4
    wide = pre.prepare(
        {"messages": [{"role": "user", "content": "<image>Q"}], "images": [_image(300, 120)]}
    )
    assert (wide.geometry[0].model_width, wide.geometry[0].model_height) == (112, 56)


def test_lfm2_vl_smart_resize_and_tiles(offline, rgb_png, tall_png):
    """Below the budget, smart_resize to multiples of 32: 70x40 -> 96x64 (scaled up to the
    4-token minimum), 30x90 -> 64x128. A 300x120 image exceeds twice the 16-token budget and is
    split into a 3x1 grid of 64-pixel tiles plus a thumbnail; its frame is the 192x64 canvas."""
    processor = offline("lfm2_vl")
    pre = AutoProcessorPreprocessor(processor)
    prepared = prepare_two(pre, rgb_png, tall_png)
    assert [(g.model_width, g.model_height) for g in prepared.geometry] == [(96, 64), (64, 128)]
    shapes = prepared.multi_modal_input["spatial_shapes"].tolist()
    assert shapes == [[4, 6], [8, 4]]  # patches of 16
    assert count(prepared) == (2 * 3) + (4 * 2)
    tiled = pre.prepare(
        {"messages": [{"role": "user", "content": "<image>Q"}], "images": [_image(300, 120)]}
    )
    assert (tiled.geometry[0].model_width, tiled.geometry[0].model_height) == (192, 64)
    tiles = tiled.multi_modal_input["spatial_shapes"].tolist()
    assert tiles[:3] == [[4, 4]] * 3 and len(tiles) == 4  # three tiles, then the thumbnail


@pytest.mark.parametrize("family", ["internvl", "glm4v"])
def test_video_families_carry_their_video_processor(offline, family):
    """transformers has video processors for InternVL and GLM-4.1V: the offline processors keep
    them, so items with videos reach the family's own frame processing."""
    processor = offline(family)
    assert processor.video_processor is not None
    assert AutoProcessorPreprocessor(processor).has_video


def test_internvl_geometry_skips_video_frames(offline, rgb_png):
    """InternVL writes each video frame as an image span after ``Frame{i}: ``; the geometry
    belongs to the image only (70x40 -> the 2x1 tile canvas), wherever the video sits."""
    processor = offline("internvl")
    frames = [_image(64, 48) for _ in range(4)]
    for content in ("<video><image>Q", "<image><video>Q"):
        prepared = AutoProcessorPreprocessor(processor).prepare(
            {
                "messages": [{"role": "user", "content": content}],
                "images": [str(rgb_png)],
                "videos": [frames],
            }
        )
        assert [(g.model_width, g.model_height) for g in prepared.geometry] == [(112, 56)]


def test_internvl_images_after_the_users_own_frame_labels_are_images(offline, rgb_png, tall_png):
    """ "Frame1: <image>" written by the user, with no video, labels two images (not frames)."""
    processor = offline("internvl")
    prepared = AutoProcessorPreprocessor(processor).prepare(
        {
            "messages": [{"role": "user", "content": "Frame1: <image>Frame2: <image>Which?"}],
            "images": [str(rgb_png), str(tall_png)],
        }
    )
    assert [(g.model_width, g.model_height) for g in prepared.geometry] == [(112, 56), (56, 168)]


@pytest.mark.parametrize("family", ["glm4v", "internvl"])
def test_prepared_video_equals_the_processor_on_the_same_frames(family, offline, tmp_path):
    """GLM-4.1V and InternVL video through the preprocessor equals their processor called on the
    same independently decoded frames with the same metadata: ids and every tensor. GLM-4.1V
    writes a video as image tokens per temporal patch with ``video_grid_thw``; InternVL as one
    image span per frame in ``pixel_values``."""
    from tests.processors.test_video import SIZE, decoded, item, mp4_bytes, reference

    clip = tmp_path / "clip.mp4"
    clip.write_bytes(mp4_bytes())
    processor = offline(family)
    prepared = AutoProcessorPreprocessor(processor).prepare(item(str(clip)))
    indices = prepared.videos[0].frame_indices
    frames = np.stack([decoded(clip.read_bytes())[k] for k in indices])
    metadata = [
        {
            "total_num_frames": 8,
            "fps": 4.0,
            "frames_indices": indices,
            "width": SIZE,
            "height": SIZE,
            "duration": 2.0,
        }
    ]
    ref = reference(processor, family, prepared.prompt_text, [frames], metadata)
    assert prepared.input_ids == ref["input_ids"][0].tolist()
    tensors = {k for k in ref if k not in {"input_ids", "attention_mask", "mm_token_type_ids"}}
    assert tensors and tensors <= prepared.multi_modal_input.keys()
    for key in tensors:
        assert torch.equal(prepared.multi_modal_input[key], ref[key]), key
    assert prepared.geometry == [] and prepared.num_videos == 1


def test_a_max_pixels_below_the_processors_own_minimum_says_whose_minimum(offline):
    from vlrollout.processors.families import qwen_resize_kwargs

    processor = offline("qwen2_vl")
    own = processor.image_processor.size["shortest_edge"]
    with pytest.raises(ValueError) as refused:
        qwen_resize_kwargs(processor, None, own - 1)
    message = str(refused.value)
    assert f"max_pixels={own - 1} is below the processor's own min_pixels {own}" in message
    assert "set min_pixels too" in message
    with pytest.raises(ValueError, match="min_pixels=50 exceeds max_pixels=40; swap or fix"):
        qwen_resize_kwargs(processor, 50, 40)


@pytest.mark.parametrize("family", ["qwen2_vl", "glm4v"])
@pytest.mark.parametrize(("low", "high"), [(0, 0), (-1, 3136), (None, 0)])
def test_a_pixel_budget_below_one_is_refused_naming_it(offline, family, low, high):
    from vlrollout.processors.auto import AutoProcessorPreprocessor

    with pytest.raises(ValueError, match=r"(min|max)_pixels=-?\d+ must be at least 1"):
        AutoProcessorPreprocessor(offline(family), min_pixels=low, max_pixels=high)


@pytest.mark.parametrize("family", ["qwen2_vl", "idefics3", "glm4v", "mistral3"])
def test_an_image_three_pixels_tall_keeps_its_orientation(offline, family):
    # transformers' slow image processors guess the channel axis from the array's shape, and a
    # (3, W, 3) array looked channels-first: the image was read transposed.
    pre = AutoProcessorPreprocessor(offline(family))
    item = {"messages": "<image>x", "images": [Image.new("RGB", (100, 3), "red")]}
    geometry = pre.prepare(item).geometry[0]
    assert geometry.model_width > geometry.model_height, geometry


def test_an_image_the_fast_processor_cannot_resize_is_a_processor_error(tmp_path):
    """Mistral 3's fast image processor resizes a 500x3 image to 0 pixels tall and torch raises
    RuntimeError: the item is refused as processor_error naming it (the server answers 400),
    not a workflow error with a traceback."""
    from transformers import AutoProcessor

    from vlrollout.testing.tiny_families import save_tiny_vlm

    processor = AutoProcessor.from_pretrained(str(save_tiny_vlm("mistral3", tmp_path / "m")))
    pre = AutoProcessorPreprocessor(processor)
    item = {"id": "thin", "messages": "<image>?", "images": [Image.new("RGB", (500, 3))]}
    with pytest.raises(PreprocessError) as e:
        pre.prepare(item)
    assert (e.value.item, e.value.reason) == ("item thin", "processor_error")
    assert "greater than 0" in e.value.detail


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_an_image_three_pixels_tall_beside_a_video_keeps_its_orientation(offline, family):
    pre = AutoProcessorPreprocessor(offline(family))
    frames = [Image.new("RGB", (56, 56), "red")] * 4
    item = {
        "messages": "<video><image>x",
        "images": [Image.new("RGB", (300, 3))],
        "videos": [frames],
    }
    geometry = pre.prepare(item).geometry[0]
    assert geometry.model_width > geometry.model_height, geometry


def _crop_offset_seen(ip, image: Image.Image) -> tuple[int, int]:
    """Where the processor's centre crop starts in its resized image: the (left, top) at which
    the resized, uncropped pixels equal the cropped output."""
    cropped = ip(images=[image], return_tensors="pt")["pixel_values"][0]
    full = ip(images=[image], do_center_crop=False, return_tensors="pt")["pixel_values"][0]
    h, w = cropped.shape[-2:]
    hits = [
        (left, top)
        for top in range(full.shape[-2] - h + 1)
        for left in range(full.shape[-1] - w + 1)
        if torch.equal(full[:, top : top + h, left : left + w], cropped)
    ]
    assert len(hits) == 1, hits
    return hits[0]


@pytest.mark.parametrize("fast", [False, True], ids=["slow", "fast"])
@pytest.mark.parametrize("size", [(100, 37), (37, 100), (101, 28), (57, 41)])
def test_llava_centre_crop_offset_is_the_processors_own(offline, fast, size):
    """An odd ``resized - crop`` puts the crop at the floor of half of it in both CLIP image
    processors (transformers 5's fast one overrides torchvision's rounding): a box converted with
    a rounded offset lands a pixel off."""
    from transformers import CLIPImageProcessorFast

    processor = copy.copy(offline("llava"))  # the fixture's processor is shared
    if fast:
        settings = processor.image_processor.to_dict()
        settings.pop("image_processor_type", None)
        processor.image_processor = CLIPImageProcessorFast(**settings)
    rng = np.random.default_rng(sum(size))
    image = Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))
    (geometry,) = (
        AutoProcessorPreprocessor(processor)
        .prepare({"messages": "<image>x", "images": [image]})
        .geometry
    )
    left, top = _crop_offset_seen(processor.image_processor, image)
    assert (-geometry.offset_x, -geometry.offset_y) == (left, top)


@pytest.mark.parametrize("family", ["qwen2_vl", "glm4v"])
def test_the_image_the_processor_refuses_is_named(offline, family):
    """Qwen's resize refuses an aspect ratio over 200 for the whole call; the error names which
    of the prompt's images it was."""
    images = [Image.new("RGB", (32, 32)), Image.new("RGB", (48, 32)), Image.new("RGB", (4000, 4))]
    item = {"id": "strip", "messages": "<image><image><image>Compare.", "images": images}
    with pytest.raises(PreprocessError) as e:
        AutoProcessorPreprocessor(offline(family)).prepare(item)
    assert e.value.reason == "processor_error"
    assert e.value.detail.startswith("image 3 (4000x4): ") and "aspect ratio" in e.value.detail


@pytest.mark.parametrize(
    "limit", ["max_image_pixels", "max_image_bytes", "max_video_frames", "max_video_bytes"]
)
@pytest.mark.parametrize("value", [0, -1, 2.5])
def test_a_media_limit_below_one_is_refused_at_construction(offline, limit, value):
    """Else every image or video is refused one by one, and the run ends 'nothing accepted'."""
    with pytest.raises(ValueError, match=f"{limit}={value} must be a whole number"):
        AutoProcessorPreprocessor(offline("qwen2_vl"), **{limit: value})
