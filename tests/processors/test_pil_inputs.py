"""PIL inputs behave as the same image given as a file: decode errors, frames, every mode."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from tests.processors.images import png_bytes
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import load_image

RED, BLUE, GREEN = (255, 0, 0), (0, 0, 255), (0, 255, 0)


def _lazy(raw: bytes) -> Image.Image:
    """How HF ``datasets`` hands images over: opened, not yet decoded."""
    return Image.open(io.BytesIO(raw))


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_pil_image_is_an_image_decode_rejection(fmt):
    raw = png_bytes(Image.effect_noise((64, 64), 50).convert("RGB"), fmt)
    with pytest.raises(PreprocessError) as info:
        load_image(_lazy(raw[: len(raw) // 2]), "item 4, image 1")
    assert info.value.reason == "image_decode" and info.value.item == "item 4, image 1"


def test_multi_frame_pil_image_gives_the_first_frame_and_is_left_as_found(tmp_path):
    colours = [RED, BLUE, GREEN, RED, BLUE, GREEN]
    frames = [Image.new("RGB", (8, 6), c) for c in colours]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
    image = Image.open(path)
    image.seek(5)
    loaded = load_image(image)
    assert loaded.image.getpixel((3, 3)) == RED  # frame 0, not frame 5 (GREEN)
    assert loaded.original_size == (8, 6)
    assert "frame 0 of 6" in loaded.notes
    assert image.tell() == 5  # the caller's image is not moved


def _modes():
    p = Image.new("P", (4, 2), 1)
    p.putpalette([0, 0, 0, 0, 200, 0] + [0] * 762)
    p.putpixel((0, 0), 0)
    return [
        ("L", Image.new("L", (4, 2), 90), "PNG", {}),
        ("LA", Image.new("LA", (4, 2), (10, 0)), "PNG", {}),
        ("RGBA", Image.new("RGBA", (4, 2), (9, 9, 9, 100)), "PNG", {}),
        ("1", Image.new("1", (4, 2), 1), "PNG", {}),
        ("P", p, "PNG", {}),
        ("P-transparent", p, "PNG", {"transparency": 0}),
        ("I;16", Image.new("I;16", (4, 2), 40000), "PNG", {}),
        ("CMYK", Image.new("CMYK", (4, 2), (0, 255, 255, 0)), "TIFF", {}),
        ("F", Image.new("F", (4, 2), 0.25), "TIFF", {}),
    ]


@pytest.mark.parametrize(("name", "image", "fmt", "save"), _modes(), ids=[m[0] for m in _modes()])
def test_every_pil_mode_gives_the_pixels_of_the_same_image_as_a_file(name, image, fmt, save):
    raw = png_bytes(image, fmt, **save)
    from_file = load_image(raw)
    from_pil = load_image(_lazy(raw))
    assert from_pil.image.mode == "RGB"
    assert from_pil.image.tobytes() == from_file.image.tobytes()
    assert from_pil.original_size == from_file.original_size


def test_exif_rotation_of_a_pil_image_as_for_a_file(tmp_path):
    image = Image.new("RGB", (40, 20), BLUE)
    image.paste(Image.new("RGB", (20, 20), RED), (0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6
    raw = png_bytes(image, "JPEG", exif=exif, quality=95)
    assert load_image(_lazy(raw)).image.tobytes() == load_image(raw).image.tobytes()
    assert load_image(_lazy(raw)).original_size == (20, 40)


def test_truncated_pil_image_through_prepare_names_item_and_reason(offline):
    from vlrollout.processors import AutoProcessorPreprocessor

    raw = png_bytes(Image.effect_noise((64, 64), 50).convert("RGB"), "PNG")
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"))
    data = {"id": 9, "messages": [{"role": "user", "content": "<image>Q"}]}
    with pytest.raises(PreprocessError) as info:
        pre.prepare({**data, "images": [_lazy(raw[: len(raw) // 2])]})
    assert info.value.reason == "image_decode" and info.value.item == "item 9, image 1"
