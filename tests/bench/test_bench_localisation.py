"""``bench/bench_localisation.py``'s scoring, on fabricated answers to synthetic grounding items.

The benchmark decodes a model (seconds per model); what is checked here is what its columns mean:
a box in the target's cell counts, a box in a distractor's cell counts only as "any shape", the
image-blind ceiling is what a constant answer per image size can reach and no more.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from bench_localisation import blind_ceiling, results_table, score  # noqa: E402

from vlrollout.tiny.synthetic import box_to_qwen2vl_text, cell_of, make_item  # noqa: E402


@pytest.fixture(scope="module")
def items():
    return [make_item("ground", 31, i) for i in range(60)]


def _answer(box, item) -> str:
    return box_to_qwen2vl_text(box, *item["image_size"])


def test_the_solutions_land_in_the_targets_cell(items):
    r = score(items, [it["solution"] for it in items])
    assert (r.cell, r.row, r.column, r.any_shape, r.unparsable) == (1.0, 1.0, 1.0, 1.0, 0)
    assert r.mean_iou > 0.9  # 0-1000 rounding only


def test_a_distractors_cell_is_any_shape_but_not_the_target(items):
    multi = [it for it in items if len(it["shapes"]) > 1]
    answers = []
    for it in multi:
        other = next(s for s in it["shapes"] if s["box"] != it["boxes"][0])
        answers.append(_answer(other["box"], it))
    r = score(multi, answers)
    assert r.cell == 0.0 and r.any_shape == 1.0 and r.mean_iou == 0.0


def test_a_constant_answer_stays_within_the_blind_ceiling(items):
    for corner in ([1, 1, 20, 20], [90, 90, 104, 104]):
        r = score(items, [_answer(corner, it) for it in items])
        share = sum(
            cell_of(it["boxes"][0], it["image_size"]) == cell_of(corner, it["image_size"])
            for it in items
        ) / len(items)
        assert r.cell == pytest.approx(share)
        assert r.cell <= r.blind_cell
        assert 1 / 16 <= r.chance <= 1 / 12  # 4 x 4, 4 x 3 and 3 x 4 cells


def test_the_blind_ceiling_is_the_most_frequent_cell_per_image_size():
    item = {"image_size": [112, 112], "boxes": [[1, 1, 20, 20]]}
    other = {"image_size": [112, 112], "boxes": [[60, 60, 80, 80]]}
    assert blind_ceiling([item, item, other]) == pytest.approx(2 / 3)
    wide = {"image_size": [140, 105], "boxes": [[60, 60, 80, 80]]}
    assert blind_ceiling([item, other, wide]) == pytest.approx(2 / 3)  # one per size is best


def test_an_answer_without_a_box_scores_zero_and_is_counted(items):
    r = score(items[:4], ["no box here"] * 4)
    assert r.unparsable == 4 and r.mean_iou == 0.0 and r.cell == 0.0


def test_the_table_has_one_row_per_model_and_item_set_with_every_column(items):
    r = score(items, [it["solution"] for it in items])
    table = results_table({"m": {"1": r, "1-4": r}}, items=60, seed=31)
    assert [row[:2] for row in table.rows] == [["m", "1"], ["m", "1-4"]]
    named = dict(zip(table.columns, table.rows[0], strict=True))
    assert (named["cell"], named["chance"]) == ("1.000", f"{r.chance:.3f}")
