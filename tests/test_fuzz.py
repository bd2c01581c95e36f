"""Property-based fuzzing of the input surfaces that see untrusted data.

Image loading on arbitrary and on damaged image bytes either succeeds with an RGB image or raises
the one documented error type; the tool-call parser and the format reward never raise on any text.
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


def _encoded(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (17, 9), (10, 120, 250)).save(buf, format=fmt)
    return buf.getvalue()


VALID = {fmt: _encoded(fmt) for fmt in ("PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF")}


def _load_or_documented_error(source) -> None:
    try:
        loaded = load_image(source, "item fuzz, image 1", max_pixels=4096 * 4096)
    except PreprocessError as e:
        assert e.item == "item fuzz, image 1" and e.reason
        return
    assert loaded.image.mode == "RGB" and min(loaded.image.size) > 0


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
    _load_or_documented_error(bytes(data))


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
