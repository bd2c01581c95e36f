"""RefCOCO scoring against lmms-eval's ``refcoco_bbox_rec`` on the same predictions.

Each case is one prediction written in a model family's convention (pixels of the original image,
pixels of the resized or letterboxed image, 0-1000, 0-1) next to the same box written as lmms-eval's
prompt asks (0-1 corners of the original image in ``[x1, y1, x2, y2]``): where the conventions
coincide, our values must be lmms-eval's.

Two references: lmms-eval's own ``lmms_eval/tasks/refcoco/utils_rec.py`` (preprocess, parse,
per-row result and aggregation functions), loaded from the installed package by file (the package's
``__init__`` imports its whole task registry); skipped when lmms-eval is not installed
(``pip install --no-deps lmms-eval==0.7.3``); and, always, ``_transcribed_*`` below: a
transcription of that file's formulas (first ``[a, b, c, d]`` or ``[0, 0, 0, 0]``, IoU without
clipping, ``IoU >= t``, the predicted centre inside the true box with its edges).
"""

from __future__ import annotations

import importlib.util
import re
import statistics
from pathlib import Path

import pytest

from vlrollout.eval.metrics.boxes import (
    BOX_FORMATS,
    REC_METRICS,
    box_format,
    check_box_format,
    read_box,
    rec_values,
)
from vlrollout.eval.tasks import RefcocoTask
from vlrollout.geometry import Frame, ImageGeometry

WIDTH, HEIGHT = 640, 480
TRUE_XYWH = [64, 48, 256, 192]  # 0-1 corners: [0.1, 0.1, 0.5, 0.5]
RESIZED = ImageGeometry.resized(WIDTH, HEIGHT, 644, 476).to_dict()  # Qwen-style smart_resize
LETTERBOX = ImageGeometry.letterboxed(WIDTH, HEIGHT, 320).to_dict()  # 320x240 at y = 40 on 320x320

# (family, completion in its convention, the same box as lmms-eval's 0-1 text, geometry)
CASES = [
    ("qwen2_5_vl", '{"bbox_2d": [64.4, 47.6, 322, 238]}', "[0.1, 0.1, 0.5, 0.5]", RESIZED),
    ("qwen2_5_vl", '```json\n[{"bbox_2d": [128.8, 95.2, 386.4, 285.6], "label": "dog"}]\n```',
     "[0.2, 0.2, 0.6, 0.6]", RESIZED),
    ("qwen2_vl", "<|object_ref_start|>the dog<|object_ref_end|><|box_start|>(300,300),(900,900)"
     "<|box_end|>", "[0.3, 0.3, 0.9, 0.9]", RESIZED),
    ("qwen2_vl", "<|box_start|>(350,100),(750,500)<|box_end|>", "[0.35, 0.1, 0.75, 0.5]", RESIZED),
    ("qwen3_vl", '{"bbox_2d": [50, 50, 450, 550]}', "[0.05, 0.05, 0.45, 0.55]", RESIZED),
    ("qwen3_vl_moe", "I cannot find it.", "I cannot find it.", RESIZED),
    ("internvl", "<ref>dog</ref><box>[[120, 100, 520, 500]]</box>", "[0.12, 0.1, 0.52, 0.5]",
     RESIZED),
    ("internvl", "<ref>dog</ref><box>[[100, 100, 500, 500], [0, 0, 50, 50]]</box>",
     "[0.1, 0.1, 0.5, 0.5], [0, 0, 0.05, 0.05]", RESIZED),
    ("plain:original", "[-64, 48, 320, 240]", "[-0.1, 0.1, 0.5, 0.5]", RESIZED),
    ("llava", "The box is [0.4, 0.3, 0.6, 0.7].", "The box is [0.4, 0.3, 0.6, 0.7].", RESIZED),
    ("glm4v", "<|begin_of_box|>[150, 150, 550, 550]<|end_of_box|>", "[0.15, 0.15, 0.55, 0.55]",
     RESIZED),
    ("plain:model", "[64, 88, 192, 184]", "[0.2, 0.2, 0.6, 0.6]", LETTERBOX),
]  # fmt: skip
SPLITS = ("val", "testA", "testB")


def _items() -> list[dict]:
    x, y, w, h = TRUE_XYWH
    return [
        {"id": f"r{i}", "boxes": [[x, y, x + w, y + h]], "expression": "the dog",
         "images": ["img.png"], "split": SPLITS[i % 3]}
        for i in range(len(CASES))
    ]  # fmt: skip


def _ours() -> list:
    task = RefcocoTask()
    return [
        task.score(item, text, [geo], family)
        for item, (family, text, _, geo) in zip(_items(), CASES, strict=True)
    ]


def _transcribed_parse(text: str) -> list[float]:
    number = r"(-?\d+(?:\.\d+)?)"
    m = re.search(rf"\[\s*{number},\s*{number},\s*{number},\s*{number}\s*\]", text)
    return [float(m.group(i)) for i in range(1, 5)] if m else [0, 0, 0, 0]


def _transcribed_iou(b1: list[float], b2: list[float]) -> float:
    inter = max(0, min(b1[2], b2[2]) - max(b1[0], b2[0])) * max(
        0, min(b1[3], b2[3]) - max(b1[1], b2[1])
    )
    union = (b1[2] - b1[0]) * (b1[3] - b1[1]) + (b2[2] - b2[0]) * (b2[3] - b2[1]) - inter
    return inter / union


def _transcribed_row(true: list[float], text: str) -> dict[str, float]:
    pred = _transcribed_parse(text)
    iou = _transcribed_iou(true, pred)
    cx, cy = (pred[0] + pred[2]) / 2, (pred[1] + pred[3]) / 2
    row = {"IoU": iou, **{f"ACC@{t}": float(iou >= t) for t in (0.1, 0.3, 0.5, 0.7, 0.9)}}
    row["Center_ACC"] = float(true[0] <= cx <= true[2] and true[1] <= cy <= true[3])
    return row


def _assert_rows_equal(ours: dict[str, float], ref: dict[str, float], where: str) -> None:
    assert ours["IoU"] == pytest.approx(ref["IoU"], abs=1e-9), where
    for name in REC_METRICS[1:]:
        assert ours[name] == ref[name], f"{where}: {name}"


def test_every_convention_scores_as_the_transcribed_lmms_eval_formulas():
    x, y, w, h = TRUE_XYWH
    true = [x / WIDTH, y / HEIGHT, (x + w) / WIDTH, (y + h) / HEIGHT]
    scores = _ours()
    for score, (family, _, lmms_text, _) in zip(scores, CASES, strict=True):
        _assert_rows_equal(score.values, _transcribed_row(true, lmms_text), family)
    # The fixture is not vacuous: every threshold separates some rows, Center_ACC too.
    for name in REC_METRICS[1:]:
        assert 0 < statistics.fmean(s.values[name] for s in scores) < 1, name


def _lmms_utils_rec():
    spec = importlib.util.find_spec("lmms_eval")  # finds the package without running __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("lmms-eval is not installed (pip install --no-deps lmms-eval==0.7.3)")
    path = Path(next(iter(spec.submodule_search_locations))) / "tasks/refcoco/utils_rec.py"
    module_spec = importlib.util.spec_from_file_location("lmms_refcoco_utils_rec", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_every_convention_equals_lmms_eval_refcoco_bbox_rec_per_row_and_per_split():
    utils = _lmms_utils_rec()
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    docs = datasets.Dataset.from_list(
        [
            {
                "image": Image.new("RGB", (WIDTH, HEIGHT)),
                "bbox": TRUE_XYWH,
                "answer": ["the dog"],
                "question_id": f"r{i}",
            }
            for i in range(len(CASES))
        ]  # fmt: skip
    )
    docs = utils.refcoco_bbox_rec_preprocess_dataset(docs)
    results = [
        utils.refcoco_bbox_rec_process_result(doc, [lmms_text])["refcoco_IoU"]
        for doc, (_, _, lmms_text, _) in zip(docs, CASES, strict=True)
    ]
    scores = _ours()
    for score, result, case in zip(scores, results, CASES, strict=True):
        ref = {
            m: float(utils.refcoco_bbox_rec_aggregation_result([result], m)) for m in REC_METRICS
        }
        _assert_rows_equal(score.values, ref, case[0])
    task, items = RefcocoTask(), {i["id"]: i for i in _items()}
    for split in SPLITS:
        ours = task.aggregate([s for s in scores if s.split == split], items)
        rows = [r for r, s in zip(results, scores, strict=True) if s.split == split]
        for name in REC_METRICS:
            ref = utils.refcoco_bbox_rec_aggregation_result(rows, name)
            assert ours[name] == pytest.approx(ref, abs=1e-12), (split, name)


def test_thresholds_and_centre_include_their_bounds():
    # Hand-derived on exact binary fractions: IoU 1/2 is ACC@0.5, not ACC@0.7; a centre on the
    # true box's edge is inside.
    values = rec_values([0, 0, 1, 1], [0, 0, 0.5, 1])
    assert values["IoU"] == 0.5 and values["ACC@0.5"] == 1.0 and values["ACC@0.7"] == 0.0
    assert rec_values([0, 0, 0.5, 0.5], [0.25, 0.25, 0.75, 0.75])["Center_ACC"] == 1.0
    assert rec_values([0, 0, 0.5, 0.5], [0.25, 0.25, 0.875, 0.75])["Center_ACC"] == 0.0


def test_no_box_counts_in_the_denominator_with_a_reason():
    item = _items()[0]
    task = RefcocoTask()
    missed = task.score(item, "no idea", [RESIZED], "qwen2_vl")
    hit = task.score(item, "<|box_start|>(100,100),(500,500)<|box_end|>", [RESIZED], "qwen2_vl")
    assert missed.details["reason"] == "no_box" and hit.details["reason"] is None
    assert set(missed.values.values()) == {0.0}
    assert task.aggregate([missed, hit], {})["ACC@0.5"] == 0.5


def test_reversed_or_nan_boxes_are_refused_with_their_reason():
    # lmms-eval would score the centre of a reversed box (here inside the true box).
    item, task = _items()[0], RefcocoTask()
    rev = task.score(item, "[0.5, 0.5, 0.1, 0.1]", [RESIZED], "llava")
    nan = task.score(item, '{"bbox_2d": [NaN, 1, 2, 3]}', [RESIZED], "qwen2_5_vl")
    assert (rev.details["reason"], nan.details["reason"]) == ("inverted_box", "non_finite_box")
    assert set(rev.values.values()) == set(nan.values.values()) == {0.0}


def test_box_details_are_in_original_pixels():
    score = RefcocoTask().score(_items()[0], CASES[-1][1], [LETTERBOX], "plain:model")
    assert score.details["pred_boxes"] == [pytest.approx([128, 96, 384, 288])]
    assert score.details["true_boxes"] == [[64, 48, 320, 240]]
    assert (score.details["frame"], score.details["prediction"]) == ("model", "[64, 88, 192, 184]")


def test_family_box_formats():
    assert box_format("qwen3_vl_moe").parser == "qwen3_vl"
    assert box_format("glm4v") == BOX_FORMATS["glm46v"]
    assert box_format("glm4v").parser == "glm4v"
    assert box_format("gemma3").plain_frame is Frame.NORM1  # no format of its own: lmms-eval's
    assert box_format("plain:original").plain_frame is Frame.ORIGINAL
    with pytest.raises(ValueError, match="after 'plain:'"):
        box_format("plain:pixels")
    reading = read_box("<answer>[1, 2, 3, 4]</answer> [5, 6, 7, 8]", "plain:original", RESIZED)
    assert reading.box == (1, 2, 3, 4) and reading.num_boxes == 1


def test_glm_is_read_between_its_box_tokens_not_from_the_prose_before_them():
    text = "The cat is at about [0, 0, 500, 500]. <|begin_of_box|>[100,300,500,900]<|end_of_box|>"
    reading = read_box(text, "glm4v", RESIZED)
    assert reading.written == (100, 300, 500, 900) and reading.num_boxes == 1


def test_bare_plain_names_no_frame_and_is_refused():
    """``plain`` lists carry no frame: eval would read them one way and the ``plain`` reward
    (original pixels) another, so a user must name it."""
    with pytest.raises(ValueError, match="plain:original"):
        check_box_format("plain")
    assert check_box_format("plain:norm1").plain_frame is Frame.NORM1


def test_a_family_without_a_box_format_is_read_as_lmms_eval_reads_it_over_the_original():
    """lmms-eval's refcoco_bbox_rec compares 0-1 corners with the label divided by the original
    image's size, whatever crop or padding the model's processor applied (LLaVA-1.5 crops the
    centre, LLaVA-OneVision pads)."""
    from vlrollout.geometry import ImageGeometry

    cropped = ImageGeometry.resized(640, 480, 448, 336).then(
        ImageGeometry.cropped(448, 336, (56, 0, 392, 336))
    )
    for family in ("llava", "llava_onevision", "gemma3"):
        reading = read_box("[0.0, 0.0, 0.5, 1.0]", family, cropped.to_dict())
        assert reading.box == pytest.approx((0.0, 0.0, 320.0, 480.0)), family
