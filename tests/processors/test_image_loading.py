import base64
import io
from pathlib import Path

import numpy as np
import pytest
from areal.api.io_struct import detect_image_mime
from PIL import Image

from tests.processors.images import halves, png_bytes
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import WEBP_MAX_SIDE, load_image, read_source

RED, BLUE, GREEN = (255, 0, 0), (0, 0, 255), (0, 255, 0)


def engine_pixels(loaded):
    """What an engine decoding the base64 with PIL + convert('RGB') sees (SGLang/vLLM)."""
    raw = base64.b64decode(loaded.to_base64())
    return Image.open(io.BytesIO(raw)).convert("RGB")


def same_pixels(a: Image.Image, b: Image.Image) -> bool:
    return a.size == b.size and a.tobytes() == b.tobytes()


def close(rgb, expected, tol=8):
    return all(abs(x - y) <= tol for x, y in zip(rgb, expected, strict=True))


# --- every input kind -------------------------------------------------------------------------


@pytest.fixture
def png(tmp_path):
    raw = png_bytes(halves((40, 20)))
    path = tmp_path / "a.png"
    path.write_bytes(raw)
    return path, raw


@pytest.mark.parametrize(
    "kind", ["path_str", "path_obj", "file_url", "bytes", "base64", "data_url"]
)
def test_encoded_sources_decode_and_pass_through(png, kind):
    path, raw = png
    source = {
        "path_str": str(path),
        "path_obj": Path(path),
        "file_url": f"file://{path}",
        "bytes": raw,
        "base64": base64.b64encode(raw).decode(),
        "data_url": "data:image/png;base64," + base64.b64encode(raw).decode(),
    }[kind]
    loaded = load_image(source, "item 1, image 1")
    assert loaded.image.mode == "RGB" and loaded.original_size == (40, 20)
    assert loaded.image.getpixel((0, 0)) == RED and loaded.image.getpixel((39, 0)) == BLUE
    # unchanged RGB PNG: the engine gets the original bytes, not a re-encode
    assert loaded.passthrough
    assert base64.b64decode(loaded.to_base64()) == raw
    assert loaded.to_data_url().startswith("data:image/png;base64,")
    assert loaded.source_kind == kind.replace("_str", "").replace("_obj", "").replace(
        "file_url", "path"
    )


def test_pil_input_is_reencoded_losslessly():
    image = halves((40, 20))
    loaded = load_image(image)
    assert not loaded.passthrough and loaded.source_kind == "pil"
    assert same_pixels(engine_pixels(loaded), image)


def test_jpeg_passthrough_engine_sees_trainer_pixels(tmp_path):
    path = tmp_path / "a.jpg"
    halves((40, 20)).save(path, quality=90)
    loaded = load_image(path)
    assert loaded.passthrough and loaded.mime == "image/jpeg"
    assert same_pixels(engine_pixels(loaded), loaded.image)


def test_hf_datasets_image_dict(png):
    path, raw = png
    assert load_image({"bytes": raw, "path": None}).original_size == (40, 20)
    assert load_image({"bytes": None, "path": str(path)}).original_size == (40, 20)


# --- EXIF orientation ---------------------------------------------------------------------------


def test_exif_rotated_jpeg_is_upright_and_reencoded(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # stored column 0 is the visual top: rotate 90° clockwise to display
    path = tmp_path / "rot.jpg"
    halves((40, 20)).save(path, exif=exif, quality=95)
    loaded = load_image(path)
    assert loaded.original_size == (20, 40)
    assert close(loaded.image.getpixel((10, 2)), RED)  # left half became the top
    assert close(loaded.image.getpixel((10, 37)), BLUE)
    assert "exif_transpose" in loaded.notes
    # an engine ignoring EXIF would see 40x20: the engine must get the rotated pixels
    assert not loaded.passthrough
    assert same_pixels(engine_pixels(loaded), loaded.image)


# --- modes, frames ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "fmt", "expected"),
    [
        (Image.new("L", (4, 4), 90), "PNG", (90, 90, 90)),
        (Image.new("LA", (4, 4), (0, 0)), "PNG", (255, 255, 255)),
        (Image.new("RGBA", (4, 4), (0, 0, 0, 0)), "PNG", (255, 255, 255)),
        (Image.new("RGBA", (4, 4), (0, 0, 0, 0)), "WEBP", (255, 255, 255)),
        (Image.new("CMYK", (4, 4), (0, 255, 255, 0)), "JPEG", RED),
        (Image.new("CMYK", (4, 4), (0, 255, 255, 0)), "TIFF", RED),
        (Image.new("I;16", (4, 4), 65535), "PNG", (255, 255, 255)),
        (Image.new("I", (4, 4), 32896), "TIFF", (128, 128, 128)),
        (Image.new("F", (4, 4), 0.5), "TIFF", (128, 128, 128)),
    ],
    ids=["L", "LA", "RGBA", "RGBA-webp", "CMYK-jpeg", "CMYK-tiff", "I16", "I", "F"],
)
def test_every_mode_becomes_rgb_and_engine_sees_same_pixels(image, fmt, expected):
    loaded = load_image(png_bytes(image, fmt, **({"lossless": True} if fmt == "WEBP" else {})))
    assert loaded.image.mode == "RGB"
    assert close(loaded.image.getpixel((1, 1)), expected, tol=3)
    # grey L converts like servers do: its bytes pass through; other modes are re-encoded
    assert loaded.passthrough == (image.mode == "L")
    assert same_pixels(engine_pixels(loaded), loaded.image)


def test_palette_png_with_transparency(tmp_path):
    image = Image.new("P", (4, 1), 1)
    image.putpalette([0, 0, 0, 0, 200, 0] + [0] * 762)
    image.putpixel((0, 0), 0)
    path = tmp_path / "p.png"
    image.save(path, transparency=0)
    loaded = load_image(path)
    assert loaded.image.getpixel((0, 0)) == (255, 255, 255)
    assert loaded.image.getpixel((1, 0)) == (0, 200, 0)
    assert same_pixels(engine_pixels(loaded), loaded.image)


def test_animated_gif_first_frame(tmp_path):
    frames = [Image.new("RGB", (8, 8), c) for c in (RED, BLUE, GREEN)]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
    loaded = load_image(path)
    assert loaded.image.getpixel((3, 3)) == RED
    assert "frame 0 of 3" in loaded.notes and not loaded.passthrough
    assert same_pixels(engine_pixels(loaded), loaded.image)


def test_multipage_tiff_first_page(tmp_path):
    pages = [Image.new("RGB", (6, 5), c) for c in (GREEN, BLUE)]
    path = tmp_path / "pages.tiff"
    pages[0].save(path, save_all=True, append_images=pages[1:])
    loaded = load_image(path)
    assert loaded.original_size == (6, 5) and loaded.image.getpixel((0, 0)) == GREEN
    assert "frame 0 of 2" in loaded.notes


# --- errors ---------------------------------------------------------------------------------------


def reason(source, **kwargs):
    with pytest.raises(PreprocessError) as info:
        load_image(source, "item 17, image 2", **kwargs)
    assert info.value.item == "item 17, image 2"
    assert "item 17, image 2" in str(info.value)
    return info.value.reason


def test_truncated_jpeg(tmp_path):
    raw = png_bytes(Image.effect_noise((64, 64), 50).convert("RGB"), "JPEG")
    assert reason(raw[: len(raw) // 2]) == "image_decode"


def test_corrupt_bytes():
    assert reason(b"\x89PNG\r\n\x1a\n garbage") == "image_decode"
    assert reason(b"definitely not an image") == "image_decode"


def test_size_limit_before_decoding():
    raw = png_bytes(Image.new("RGB", (200, 100)))
    assert reason(raw, max_pixels=200 * 100 - 1) == "image_too_large"
    assert load_image(raw, max_pixels=200 * 100).original_size == (200, 100)


def test_pil_decompression_bomb_maps_to_image_too_large(monkeypatch):
    raw = png_bytes(Image.new("L", (100, 100)))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 10_000 px > 2 x limit -> PIL raises
    assert reason(raw) == "image_too_large"


def test_byte_limit(tmp_path, png):
    path, raw = png
    assert reason(raw, max_bytes=len(raw) - 1) == "image_too_large"
    assert reason(path, max_bytes=len(raw) - 1) == "image_too_large"


def test_zero_size_rejected():
    assert reason(Image.new("RGB", (0, 5))) == "image_empty"


def test_missing_file_and_bad_strings(tmp_path):
    assert reason(str(tmp_path / "nope.png")) == "image_not_found"
    assert reason("data:image/png,notbase64") == "image_source"
    assert reason("data:image/png;base64,@@@") == "image_source"
    assert reason("https://example.com/x.png") == "image_source"
    assert reason(12345) == "image_source"


def test_read_source_classifies_bytes_like():
    assert read_source(bytearray(b"ab"), "x") == ("bytes", b"ab")


@pytest.mark.parametrize("fmt", ["PNG", "GIF"])
def test_grey_and_opaque_palette_files_pass_through_unchanged(fmt):
    grey = Image.linear_gradient("L").resize((40, 30))
    palette = halves((40, 30)).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    for image in (grey, palette):
        raw = png_bytes(image, fmt)
        loaded = load_image(raw)
        assert loaded.passthrough and loaded.engine_bytes() is raw  # no re-encode
        assert same_pixels(engine_pixels(loaded), loaded.image)


def test_transparent_palette_is_still_reencoded(tmp_path):
    image = Image.new("P", (4, 1), 1)
    image.putpalette([0, 0, 0, 0, 200, 0] + [0] * 762)
    raw = png_bytes(image, "PNG", transparency=0)
    loaded = load_image(raw)
    assert not loaded.passthrough and same_pixels(engine_pixels(loaded), loaded.image)


@pytest.mark.parametrize("size", [(1, 1), (37, 23), (200, 3)])
def test_re_encoded_images_are_lossless_webp_the_fastest_lossless_codec_pil_has(size):
    """WebP lossless at its fastest effort encodes a photo 1.6-4x faster than PNG at zlib level 1
    and decodes faster on the server; AReaL's vLLM client labels it image/webp."""
    rng = np.random.default_rng(size[0])
    noise = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    loaded = load_image(noise)
    assert not loaded.passthrough and loaded.mime == "image/webp"
    assert Image.open(io.BytesIO(loaded.engine_bytes())).format == "WEBP"
    assert detect_image_mime(loaded.to_base64()) == "image/webp"
    assert same_pixels(engine_pixels(loaded), loaded.image)


def test_images_past_webps_size_limit_are_re_encoded_as_png():
    loaded = load_image(Image.new("RGB", (WEBP_MAX_SIDE + 1, 1), (1, 2, 3)))
    assert loaded.mime == "image/png"
    assert Image.open(io.BytesIO(loaded.engine_bytes())).format == "PNG"
    assert same_pixels(engine_pixels(loaded), loaded.image)


@pytest.mark.parametrize(
    "prefix",
    ["DATA:IMAGE/PNG;BASE64,", "Data:image/png;base64,", "data:image/png;BASE64,", "FILE://"],
)
def test_url_schemes_and_the_base64_parameter_are_case_insensitive(tmp_path, prefix):
    from vlrollout.processors.image_loading import load_image
    from vlrollout.readers.sources import source_form

    buffer = io.BytesIO()
    Image.new("RGB", (6, 4), "red").save(buffer, format="PNG")
    if prefix == "FILE://":
        (tmp_path / "a.png").write_bytes(buffer.getvalue())
        source = f"FILE://{tmp_path / 'a.png'}"
        assert source_form(source) == "file_url"
    else:
        source = prefix + base64.b64encode(buffer.getvalue()).decode()
        assert source_form(source) == "data_url"
    assert load_image(source, "item 1").image.size == (6, 4)


def test_url_safe_base64_padded_or_not_is_read():
    """JavaScript's and JWT-style encoders write base64url (``-`` and ``_``) without padding;
    its alphabet cannot be mistaken for the standard one."""
    from vlrollout.processors.image_loading import decode_inline

    out = io.BytesIO()
    Image.new("RGB", (7, 5), (250, 251, 252)).save(out, format="PNG")
    raw = out.getvalue()
    for text in (
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "data:image/png;base64," + base64.urlsafe_b64encode(raw).decode(),
    ):
        assert decode_inline(text, "image 1") == raw
    with pytest.raises(PreprocessError, match="invalid base64"):
        decode_inline("ab+c-d__", "image 1")  # both alphabets: not base64
