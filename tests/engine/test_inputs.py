"""Request → prefill inputs: image sources, placeholder checks, ids, positions."""

from __future__ import annotations

import base64

import pytest
import torch
from areal.api.io_struct import ModelRequest
from PIL import Image

from tests.processors.images import bomb_png, png_bytes
from vlrollout.engine.inputs import (
    PlaceholderMismatchError,
    check_placeholders,
    decode_image,
    placeholder_token_ids,
    prepare_inputs,
    prompt_positions,
)
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import DEFAULT_MAX_PIXELS, load_image


def prepare(tiny, req):
    model, processor = tiny
    return prepare_inputs(req, processor, model.config, "cpu", torch.float32)


def test_multi_modal_input_is_used_as_given(tiny, vision_prompt):
    p = vision_prompt(seed=3)
    out = prepare(
        tiny, ModelRequest(input_ids=p["input_ids"], metadata={"multi_modal_input": p["mm"]})
    )
    assert out.vision["pixel_values"] is p["mm"]["pixel_values"]  # same tensor, not rebuilt
    assert out.mm_token_type_ids[0].tolist() == p["mm_token_type_ids"]
    # The trajectory form (a list of per-sample dicts) works too.
    listed = prepare(
        tiny, ModelRequest(input_ids=p["input_ids"], metadata={"multi_modal_input": [p["mm"]]})
    )
    torch.testing.assert_close(listed.vision["pixel_values"], p["mm"]["pixel_values"])


def test_image_data_runs_the_image_processor(tiny, vision_prompt):
    p = vision_prompt(seed=3, n_images=2)
    data_urls = ["data:image/png;base64," + s for s in p["image_data"]]
    out = prepare(tiny, ModelRequest(input_ids=p["input_ids"], image_data=data_urls))
    torch.testing.assert_close(out.vision["pixel_values"], p["mm"]["pixel_values"])
    assert out.vision["image_grid_thw"].tolist() == p["mm"]["image_grid_thw"].tolist()


def test_text_only(tiny, text_prompt):
    out = prepare(tiny, ModelRequest(input_ids=text_prompt()))
    assert out.vision == {} and out.mm_token_type_ids is None


def test_check_placeholders_counts_runs_and_videos():
    grid = {"image_grid_thw": torch.tensor([[1, 2, 2], [1, 2, 2]])}
    check_placeholders([9, 5, 8, 9, 5, 8], grid, 5, 6, 2)
    with pytest.raises(PlaceholderMismatchError, match="2 image placeholder tokens in 1 run"):
        check_placeholders([9, 5, 5, 8], grid, 5, 6, 2)
    with pytest.raises(PlaceholderMismatchError, match="video"):
        check_placeholders([9, 6, 8], {}, 5, 6, 2)
    with pytest.raises(PlaceholderMismatchError, match="hold no image placeholder token"):
        check_placeholders([1], {"pixel_values": torch.zeros(4, 3)}, 5, 6, 2)


def test_each_image_needs_its_own_grid_rows_run_of_placeholders():
    """Two images whose runs are swapped (4 then 8 tokens for grids of 8 then 4): the totals and
    the number of runs agree, but the first image's features would fill the second's run."""
    grid = {"image_grid_thw": torch.tensor([[1, 4, 8], [1, 4, 4]])}
    check_placeholders([9, *[5] * 8, 8, 9, *[5] * 4, 8], grid, 5, 6, 2)
    with pytest.raises(PlaceholderMismatchError, match=r"runs of 4, 8 .* 8, 4 tokens"):
        check_placeholders([9, *[5] * 4, 8, 9, *[5] * 8, 8], grid, 5, 6, 2)


def test_families_without_grids_need_placeholders_and_pixels_together():
    """LLaVA, Gemma 3 and Idefics3 send pixel_values without image_grid_thw; their placeholder
    layout (one run, or tiles plus a global view) is the model's to check."""
    pixels = {"pixel_values": torch.zeros(1, 3, 8, 8)}
    check_placeholders([9, 5, 5, 8, 5, 5], pixels, 5, None, 1)  # two runs: tiles of one image
    with pytest.raises(PlaceholderMismatchError, match="has no images"):
        check_placeholders([9, 5, 5, 8], {}, 5, None, 1)


def test_decode_image_errors():
    with pytest.raises(ValueError, match="Cannot decode"):
        decode_image("bm90IGFuIGltYWdl")
    with pytest.raises(TypeError, match="base64"):
        decode_image(b"raw")


def test_image_data_is_held_to_the_processors_limits():
    """image_data arrives as base64 or data URLs and is decoded by the processors' loader: a
    decompression bomb is refused by the processors' pixel limit before its pixels are decoded,
    and an oversize payload by their byte limit."""
    bomb = base64.b64encode(bomb_png(8193, 8192)).decode()  # 8193 * 8192 > DEFAULT_MAX_PIXELS
    with pytest.raises(PreprocessError, match="image_too_large"):
        load_image(bomb)
    for source in (bomb, "data:image/png;base64," + bomb):
        with pytest.raises(
            ValueError, match=f"image_too_large.*max_image_pixels={DEFAULT_MAX_PIXELS}"
        ):
            decode_image(source)
    raw = png_bytes(Image.new("RGB", (8, 6)))
    small = base64.b64encode(raw).decode()
    assert decode_image(small, max_bytes=len(raw)).size == (8, 6)
    with pytest.raises(ValueError, match=f"image_too_large.*max_bytes={len(raw) - 1}"):
        decode_image(small, max_bytes=len(raw) - 1)
    with pytest.raises(ValueError, match="image_too_large"):
        decode_image(small, max_pixels=8 * 6 - 1)


def test_image_data_is_loaded_like_the_processors_load_it():
    """The engine sees the trainer's pixels: alpha composited on white (not dropped to black)."""
    rgba = Image.new("RGBA", (4, 4), (255, 0, 0, 0))
    source = base64.b64encode(png_bytes(rgba)).decode()
    assert decode_image(source).tobytes() == load_image(source).image.tobytes()
    assert decode_image(source).getpixel((0, 0)) == (255, 255, 255)


def test_image_data_paths_are_not_read(tmp_path):
    """Only inline images: a string naming a file is not base64, and the file is never opened."""
    path = tmp_path / "a.png"
    path.write_bytes(png_bytes(Image.new("RGB", (4, 4))))
    with pytest.raises(ValueError, match="Cannot decode"):
        decode_image(str(path))


def test_placeholder_ids_come_from_config_processor_and_tokenizer(tiny):
    model, processor = tiny
    tok = processor.tokenizer
    ids = placeholder_token_ids(model.config, processor, tok)
    names = [
        "<|image_pad|>",
        "<|video_pad|>",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|vision_pad|>",
    ]
    assert ids == set(tok.convert_tokens_to_ids(names))


def test_prompt_positions_match_the_model(tiny, vision_prompt):
    model, _ = tiny
    p = vision_prompt(seed=1, n_images=2)
    ids = torch.tensor([p["input_ids"]])
    types = torch.tensor([p["mm_token_type_ids"]])
    pos, delta = prompt_positions(model, ids, types, p["mm"])
    expected, expected_delta = model.model.get_rope_index(
        ids, mm_token_type_ids=types, image_grid_thw=p["mm"]["image_grid_thw"]
    )
    assert torch.equal(pos, expected) and delta == int(expected_delta) and delta < 0
    # Generated text tokens continue from the last prompt position + 1 on all three axes.
    longer = torch.cat([ids, torch.tensor([[100, 101]])], dim=1)
    pos2, delta2 = prompt_positions(model, longer, types, p["mm"])
    assert delta2 == delta and pos2[:, 0, -1].tolist() == [longer.shape[1] - 1 + delta] * 3
