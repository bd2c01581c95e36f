import numpy as np
import pytest
from PIL import Image

from vlrollout.processors.image_mode import has_alpha, to_rgb


def px(image):
    return to_rgb(image).getpixel((0, 0))


def test_rgb_is_returned_unchanged():
    image = Image.new("RGB", (2, 2), (1, 2, 3))
    assert to_rgb(image) is image


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (Image.new("L", (1, 1), 77), (77, 77, 77)),
        (Image.new("1", (1, 1), 1), (255, 255, 255)),
        (Image.new("CMYK", (1, 1), (0, 255, 255, 0)), (255, 0, 0)),
        # alpha composited on white: fully transparent -> white, half-transparent black -> grey
        (Image.new("RGBA", (1, 1), (0, 0, 0, 0)), (255, 255, 255)),
        (Image.new("RGBA", (1, 1), (0, 0, 0, 128)), (127, 127, 127)),
        (Image.new("RGBA", (1, 1), (10, 20, 30, 255)), (10, 20, 30)),
        (Image.new("LA", (1, 1), (0, 0)), (255, 255, 255)),
        (Image.new("LA", (1, 1), (40, 255)), (40, 40, 40)),
    ],
    ids=["L", "1", "CMYK", "RGBA-clear", "RGBA-half", "RGBA-opaque", "LA-clear", "LA-opaque"],
)
def test_mode_rule(image, expected):
    out = to_rgb(image)
    assert out.mode == "RGB" and out.size == image.size
    assert out.getpixel((0, 0)) == expected


def test_palette_with_transparency_composites_on_white():
    image = Image.new("P", (2, 1), 0)
    image.putpalette([0, 0, 0, 200, 0, 0] + [0] * 762)
    image.putpixel((1, 0), 1)
    image.info["transparency"] = 0  # index 0 (black) is transparent
    assert has_alpha(image)
    out = to_rgb(image)
    assert out.getpixel((0, 0)) == (255, 255, 255)
    assert out.getpixel((1, 0)) == (200, 0, 0)


def test_palette_without_transparency_is_a_lookup():
    image = Image.new("P", (1, 1), 1)
    image.putpalette([0, 0, 0, 5, 6, 7] + [0] * 762)
    assert px(image) == (5, 6, 7)


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (65535, 255), (32896, 128), (257, 1)])
def test_sixteen_bit_scaled_by_full_range(value, expected):
    image = Image.new("I;16", (1, 1), value)
    assert px(image) == (expected,) * 3


def test_int32_clipped_then_scaled_like_sixteen_bit():
    values = np.array([[-5, 65535, 100000, 32896]], dtype=np.int32)
    out = to_rgb(Image.fromarray(values, mode="I"))
    assert [out.getpixel((x, 0))[0] for x in range(4)] == [0, 255, 255, 128]


def test_float_in_unit_range_is_normalised():
    values = np.array([[0.0, 0.5, 1.0]], dtype=np.float32)
    out = to_rgb(Image.fromarray(values, mode="F"))
    assert [out.getpixel((x, 0)) for x in range(3)] == [(0,) * 3, (128,) * 3, (255,) * 3]


def test_float_outside_unit_range_is_clipped():
    values = np.array([[-3.0, 2.0, 300.0, 100.4]], dtype=np.float32)
    out = to_rgb(Image.fromarray(values, mode="F"))
    assert [out.getpixel((x, 0))[0] for x in range(4)] == [0, 2, 255, 100]


def test_custom_background():
    assert to_rgb(Image.new("RGBA", (1, 1), (0, 0, 0, 0)), (0, 0, 0)).getpixel((0, 0)) == (0, 0, 0)


def test_an_rgb_png_with_a_transparent_colour_is_composited_on_white(tmp_path):
    """PNG's tRNS chunk makes one RGB colour transparent; it is composited on white as an
    alpha band or a grey tRNS is."""
    image = Image.new("RGB", (2, 1), (200, 200, 200))
    image.putpixel((1, 0), (10, 20, 30))
    image.save(tmp_path / "t.png", transparency=(200, 200, 200))
    with Image.open(tmp_path / "t.png") as opened:
        rgb = to_rgb(opened)
    assert rgb.getpixel((0, 0)) == (255, 255, 255) and rgb.getpixel((1, 0)) == (10, 20, 30)


@pytest.mark.parametrize(
    ("mode", "value", "straight"),
    [("La", (100, 128), "LA"), ("RGBa", (100, 50, 20, 128), "RGBA")],
)
def test_premultiplied_alpha_is_composited_as_its_straight_alpha_twin(mode, value, straight):
    """PIL converts ``La`` to nothing but ``LA``: it raised a bare ValueError naming no image."""
    image = Image.new(mode, (3, 3), value)
    assert to_rgb(image).getpixel((0, 0)) == to_rgb(image.convert(straight)).getpixel((0, 0))


def test_a_palette_of_rgba_colours_is_composited_on_white_as_its_png_is(tmp_path):
    """PIL's ``RGBA -> P`` keeps alpha in the palette (``palette.mode == "RGBA"``), with no
    ``transparency`` entry: the PIL image and its PNG bytes must give the same pixels."""
    rgba = np.zeros((4, 6, 4), np.uint8)
    rgba[..., 0], rgba[:, :3, 3] = 255, 255  # red, the right half fully transparent
    palette = Image.fromarray(rgba, "RGBA").convert("P")
    assert palette.palette.mode == "RGBA" and "transparency" not in palette.info
    assert has_alpha(palette)
    path = tmp_path / "p.png"
    palette.save(path)
    with Image.open(path) as reread:
        from_png = np.asarray(to_rgb(reread))
    got = np.asarray(to_rgb(palette))
    assert got[0, 5].tolist() == [255, 255, 255] and got[0, 0].tolist() == [255, 0, 0]
    assert np.array_equal(got, from_png)
