"""Property-based fuzzing of the input surfaces that see untrusted data.

Image loading on arbitrary and on damaged image bytes either succeeds with an RGB image or raises
the one documented error type, and a valid image, in every source form, loads with its own size and
colours (so a loader that refused everything would fail); the tool-call parser and the format
reward never raise on any text.
"""

from __future__ import annotations

import base64
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import load_image
from vlrollout.rewards.format import ThinkAnswerFormat
from vlrollout.tools.parsing import parse_tool_calls

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF")
#: Largest per-channel difference between the colour drawn and the colour decoded, per format:
#: JPEG and WEBP are lossy (a one-colour image comes back within a few levels); the others,
#: GIF's palette included, are exact for a one-colour image.
COLOUR_TOLERANCE = {"PNG": 0, "BMP": 0, "TIFF": 0, "GIF": 0, "JPEG": 12, "WEBP": 12}
SIZE, COLOUR = (17, 9), (10, 120, 250)


def _encoded(fmt: str, size: tuple[int, int] = SIZE, colour: tuple[int, ...] = COLOUR) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format=fmt)
    return buf.getvalue()


VALID = {fmt: _encoded(fmt) for fmt in FORMATS}


def _load_or_documented_error(source) -> Image.Image | None:
    """The loaded RGB image, or ``None`` when loading raised the documented error."""
    try:
        loaded = load_image(source, "item fuzz, image 1", max_pixels=4096 * 4096)
    except PreprocessError as e:
        assert e.item == "item fuzz, image 1" and e.reason
        return None
    assert loaded.image.mode == "RGB" and min(loaded.image.size) > 0
    return loaded.image


def _assert_is(image: Image.Image | None, fmt: str, size: tuple[int, int], colour) -> None:
    assert image is not None, f"a valid {fmt} image was refused"
    assert image.size == size
    extrema = image.getextrema()  # (min, max) of each channel over the whole image
    tol = COLOUR_TOLERANCE[fmt]
    assert all(
        abs(lo - c) <= tol and abs(hi - c) <= tol
        for (lo, hi), c in zip(extrema, colour, strict=True)
    ), (fmt, extrema, colour)


@FUZZ
@given(
    st.sampled_from(FORMATS),
    st.tuples(st.integers(1, 64), st.integers(1, 64)),
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255)),
    st.sampled_from(["bytes", "base64", "data_url", "path", "pil"]),
)
def test_valid_images_load_with_their_size_and_colour(tmp_path_factory, fmt, size, colour, form):
    data = _encoded(fmt, size, colour)
    if form == "base64":
        source = base64.b64encode(data).decode()
    elif form == "data_url":
        source = f"data:image/{fmt.lower()};base64," + base64.b64encode(data).decode()
    elif form == "path":
        source = tmp_path_factory.mktemp("img") / f"x.{fmt.lower()}"
        source.write_bytes(data)
        source = str(source)
    elif form == "pil":
        source = Image.open(io.BytesIO(data))
    else:
        source = data
    _assert_is(_load_or_documented_error(source), fmt, size, colour)


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes(data):
    _load_or_documented_error(data)


@FUZZ
@given(
    st.sampled_from(sorted(VALID)),
    st.integers(min_value=0, max_value=4096),
    st.lists(st.tuples(st.integers(min_value=0, max_value=4096), st.integers(0, 255)), max_size=8),
)
def test_truncated_and_corrupted_images(fmt, cut, flips):
    data = bytearray(VALID[fmt][: max(1, cut)])
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    loaded = _load_or_documented_error(bytes(data))
    if bytes(data) == VALID[fmt]:  # neither cut nor changed: still the valid image
        _assert_is(loaded, fmt, SIZE, COLOUR)


@FUZZ
@given(st.text(max_size=300))
def test_random_strings_as_paths_base64_or_data_urls(text):
    _load_or_documented_error(text)
    _load_or_documented_error("data:image/png;base64," + text)
    _load_or_documented_error(base64.b64encode(text.encode()).decode())


@FUZZ
@given(
    st.text(max_size=400), st.sampled_from(["", "<tool_call>", "</tool_call>", '{"name": "rotate"'])
)
def test_tool_call_parser_never_raises(text, fragment):
    for call in parse_tool_calls(fragment + text + fragment):
        assert (call.name is None) == (call.error is not None) or call.error is not None
        assert isinstance(call.arguments, dict)


@FUZZ
@given(st.text(max_size=400))
def test_format_reward_is_defined_on_any_text(text):
    reward = ThinkAnswerFormat()
    for completion in (text, f"<think>{text}</think><answer>{text}</answer>"):
        value = reward("p", completion, [], [])
        assert 0.0 <= value <= 1.0


def test_a_corrupt_tiff_whose_decoder_raises_type_error_is_an_image_decode_error():
    """Found by the fuzz test above: PIL's TIFF plug-in raises ``TypeError: Missing dimensions``
    on this byte flip, which once escaped as a traceback."""
    data = bytearray(VALID["TIFF"][:599])
    data[130] = 1
    with pytest.raises(PreprocessError) as raised:
        load_image(bytes(data), "item fuzz, image 1", max_pixels=4096 * 4096)
    assert raised.value.reason == "image_decode"
