"""A box reward named in a workflow (``reward_fn="iou"``, as an AReaL config's
``workflow_kwargs`` names it) reads boxes as the processor's model family writes them."""

from __future__ import annotations

import pytest
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.workflows import VisionRLVRWorkflow

GEOMETRY = [
    {"original_width": 1000, "original_height": 667, "model_width": 1008, "model_height": 672}
]


def _reward(workflow):
    return workflow.ctx.reward.reward_fn


def test_a_named_box_reward_takes_the_processors_family(tokenizer, qwen2vl_processor):
    workflow = VisionRLVRWorkflow("iou", GenerationHyperparameters(), tokenizer, qwen2vl_processor)
    reward = _reward(workflow)
    assert reward.family == "qwen2_vl"
    got = reward("p", "<|box_start|>(100,300),(500,900)<|box_end|>", [], [],
                 boxes=[[100, 200, 500, 600]], geometry=GEOMETRY)  # fmt: skip
    assert got == pytest.approx(159960 / 160120)


def test_a_named_box_reward_for_a_family_without_a_convention_is_refused(tokenizer):
    from vlrollout.testing.offline_processors import build_offline_processor

    with pytest.raises(ValueError, match="no box convention of its own"):
        VisionRLVRWorkflow(
            "giou", GenerationHyperparameters(), tokenizer, build_offline_processor("llava")
        )


def test_a_processor_given_as_a_model_folder_gives_its_family(tokenizer):
    """AReaL configs may name the processor by its model folder."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "assets" / "tiny-qwen2vl"
    workflow = VisionRLVRWorkflow("giou", GenerationHyperparameters(), tokenizer, str(folder))
    assert _reward(workflow).family == "qwen2_vl"
