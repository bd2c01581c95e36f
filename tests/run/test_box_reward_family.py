"""A box reward named on the command line (``--reward iou``, ``vlrollout.reward=giou``) reads
boxes as the model's family writes them, not as Qwen2.5-VL does."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.run.main import load_reward
from vlrollout.testing.offline_processors import build_qwen3_vl
from vlrollout.train.rewards import build_rewards

REPO = Path(__file__).resolve().parents[2]
QWEN3 = str(REPO / "assets" / "tiny-qwen3vl-ground")  # a Qwen3-VL checkpoint
QWEN2 = str(REPO / "assets" / "tiny-qwen2vl")


def _qwen3_geometry() -> list[dict]:
    pre = AutoProcessorPreprocessor(build_qwen3_vl(max_pixels=1024 * 1024))
    item = {"messages": "<image>x", "images": [Image.new("RGB", (640, 480))]}
    return [g.to_dict() for g in pre.prepare(item).geometry]


@pytest.mark.parametrize("name", ["iou", "giou", "box_f1"])
def test_run_and_train_score_a_qwen3_vl_box_as_qwen3_vl_writes_it(name):
    # Qwen3-VL writes JSON bbox_2d in 0-1000 of the image: this one is the label exactly.
    completion = '{"bbox_2d": [100, 200, 400, 800]}'
    labels = {"boxes": [64, 96, 256, 384], "geometry": _qwen3_geometry()}
    run_reward = load_reward(name, [], model=QWEN3)
    train_reward, eval_reward = build_rewards(name, "iou", [], [], model=QWEN3)
    for reward in (run_reward, train_reward, eval_reward):
        assert reward.compute("p", completion, [], [], **labels).value == pytest.approx(1.0)


def test_a_qwen2_vl_model_keeps_its_own_boxes():
    assert load_reward("iou", [], model=QWEN2).family == "qwen2_vl"


def test_a_family_without_a_box_convention_is_refused_naming_it(tmp_path):
    """Gemma 3 writes no box convention of its own: a box reward by name would guess one, so the
    run stops before loading, naming the family and what to pass instead."""
    from vlrollout.errors import ConfigError
    from vlrollout.testing.tiny_families import save_tiny_vlm

    model = str(save_tiny_vlm("gemma3", tmp_path / "gemma3"))
    with pytest.raises(ConfigError, match="family gemma3 writes no box convention of its own"):
        load_reward("iou", [], model=model)


def test_point_in_box_reads_points_as_the_models_family_writes_them():
    """Qwen3-VL writes {"point_2d": [x, y]} in 0-1000 of the image; point_in_box by name read
    Molmo's points whatever the model, so every Qwen3-VL point was no_point."""
    labels = {"boxes": [64, 96, 256, 384], "geometry": _qwen3_geometry()}
    run_reward = load_reward("point_in_box", [], model=QWEN3)
    train_reward, _ = build_rewards("point_in_box", "iou", [], [], model=QWEN3)
    for reward in (run_reward, train_reward):
        inside = reward.compute("p", '{"point_2d": [250, 500]}', [], [], **labels)
        outside = reward.compute("p", '{"point_2d": [900, 900]}', [], [], **labels)
        assert (inside.value, outside.value) == (1.0, 0.0), (inside, outside)


def test_point_in_box_on_a_family_that_writes_no_points_is_refused():
    from vlrollout.errors import ConfigError

    with pytest.raises(ConfigError, match="qwen2_vl writes no point"):
        load_reward("point_in_box", [], model=QWEN2)


def test_a_box_format_names_how_a_fine_tuned_model_writes_boxes():
    """The shipped grounding model is a Qwen3-VL that writes Qwen2-VL's boxes: read as its
    family's JSON every completion was no_box. --box-format qwen2_vl reads them as written."""
    labels = {"boxes": [64, 96, 256, 384], "geometry": _qwen3_geometry()}
    completion = "<|box_start|>(100,200),(400,800)<|box_end|>"
    as_family = load_reward("iou", [], model=QWEN3).compute("p", completion, [], [], **labels)
    assert (as_family.value, as_family.reason) == (0.0, "no_box")
    reward = load_reward("iou", [], model=QWEN3, box_format="qwen2_vl")
    assert reward.compute("p", completion, [], [], **labels).value == pytest.approx(1.0)
