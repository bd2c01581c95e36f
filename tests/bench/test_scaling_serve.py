"""The scaling benchmark's served requests (bench/scaling_serve.py): every round trip sends
pictures no earlier request sent, so the server encodes them as it would a new request's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scaling_points import item  # noqa: E402
from scaling_serve import marked  # noqa: E402


def test_marked_items_differ_from_each_other_and_from_the_item_in_one_pixel_only():
    data = item("tiny", 64, 2)
    first, second = marked(data, 0), marked(data, 1)
    assert first["messages"] == data["messages"]
    for k, original in enumerate(data["images"]):
        a, b = (np.asarray(d["images"][k]) for d in (first, second))
        base = np.asarray(original)
        assert a.shape == base.shape and not np.array_equal(a, b)
        assert np.count_nonzero((a != base).any(-1)) <= 1
    assert not any(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x in first["images"]
        for y in second["images"]
    )
