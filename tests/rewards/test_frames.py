"""Frame conversion: hand-computed conversions and round trips."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vlrollout.rewards.frames import Frame, convert_boxes, convert_points, frame_size

GEO = {"original_width": 640, "original_height": 480, "model_width": 644, "model_height": 476}


def test_hand_computed_conversions():
    # original -> model: x * 644/640, y * 476/480; 160 -> 161, 120 -> 119, 480 -> 483, 360 -> 357
    assert convert_boxes([(160, 120, 480, 360)], "original", "model", GEO)[0] == pytest.approx(
        (161, 119, 483, 357)
    )
    # original -> norm1000: x / 640 * 1000, y / 480 * 1000
    assert convert_boxes([(160, 120, 480, 360)], "original", "norm1000", GEO)[0] == pytest.approx(
        (250, 250, 750, 750)
    )
    # norm1 -> model: x * 644, y * 476
    assert convert_points([(0.5, 0.25)], Frame.NORM1, Frame.MODEL, GEO)[0] == pytest.approx(
        (322, 119)
    )
    # normalised frames need no geometry: 0..1000 -> 0..1 divides by 1000
    assert convert_boxes([(100, 200, 300, 400)], "norm1000", "norm1")[0] == pytest.approx(
        (0.1, 0.2, 0.3, 0.4)
    )


def test_geometry_errors_name_the_problem():
    with pytest.raises(ValueError, match="needs the image geometry"):
        convert_boxes([(0, 0, 1, 1)], "model", "original", None)
    with pytest.raises(ValueError, match="missing \\['model_height'\\]"):
        frame_size("model", {k: v for k, v in GEO.items() if k != "model_height"})
    with pytest.raises(ValueError, match="positive"):
        frame_size("original", {**GEO, "original_width": 0})


class _Geo:  # ImageGeometry-like object (attribute access)
    original_width, original_height, model_width, model_height = 100, 50, 112, 56


def test_accepts_geometry_objects():
    assert frame_size("model", _Geo()) == (112, 56)


sizes = st.integers(min_value=1, max_value=5000)
coords = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False)
frames = st.sampled_from(list(Frame))


@given(sizes, sizes, sizes, sizes, frames, frames, st.tuples(coords, coords, coords, coords))
def test_round_trip(ow, oh, mw, mh, src, dst, box):
    geo = {"original_width": ow, "original_height": oh, "model_width": mw, "model_height": mh}
    there = convert_boxes([box], src, dst, geo)
    back = convert_boxes(there, dst, src, geo)[0]
    assert back == pytest.approx(box, rel=1e-9, abs=1e-9)
    pts = convert_points([box[:2]], src, dst, geo)
    assert pts[0] == pytest.approx(there[0][:2])
