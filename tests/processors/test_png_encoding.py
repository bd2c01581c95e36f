"""The engine's PNG of re-encoded images: exact pixels through PIL, the decoder SGLang and vLLM use."""

import io
import zlib

import numpy as np
import pytest
from PIL import Image

from vlrollout.processors.png_encoding import encode_rgb_png


def decoded(data: bytes) -> Image.Image:
    """What a server decoding with PIL + ``convert("RGB")`` sees."""
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    return image.convert("RGB")


def noise(w: int, h: int, seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


@pytest.mark.parametrize(
    "image",
    [
        noise(37, 23),  # incompressible, odd width
        noise(1, 1, 1),
        noise(1, 9, 2),  # one column
        noise(9, 1, 3),  # one row
        Image.new("RGB", (64, 48), (12, 200, 7)),  # flat
        Image.linear_gradient("L").convert("RGB").resize((50, 70)),  # rows differ by small steps
        Image.merge("RGB", [Image.linear_gradient("L").rotate(a) for a in (0, 90, 180)]),
    ],
    ids=["noise", "1x1", "column", "row", "flat", "gradient", "rotated-gradients"],
)
def test_png_decodes_to_exactly_the_pixels(image):
    data = encode_rgb_png(image)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    out = decoded(data)
    assert out.size == image.size and out.tobytes() == image.tobytes()


def test_png_of_a_photo_like_image_is_compressed_and_exact():
    # Smooth content with texture compresses below raw size: the payload every request carries.
    base = Image.linear_gradient("L").resize((96, 64)).convert("RGB")
    image = Image.blend(base, noise(96, 64, 4), 0.1)
    data = encode_rgb_png(image)
    assert decoded(data).tobytes() == image.tobytes()
    assert len(data) < 0.8 * 96 * 64 * 3


def test_png_chunks_are_well_formed():
    # libpng (browsers, other decoders) checks every chunk's CRC; PIL checks them too when asked.
    data = encode_rgb_png(noise(5, 4))
    pos, kinds = 8, []
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        crc = int.from_bytes(data[pos + 8 + length : pos + 12 + length], "big")
        assert crc == zlib.crc32(kind + body), kind
        kinds.append(kind)
        pos += 12 + length
    assert kinds == [b"IHDR", b"IDAT", b"IEND"]
    Image.open(io.BytesIO(data)).verify()


@pytest.mark.parametrize("mode", ["RGBA", "L", "P", "I;16"])
def test_only_rgb_images_are_encoded(mode):
    with pytest.raises(ValueError, match="RGB"):
        encode_rgb_png(Image.new(mode, (2, 2)))
