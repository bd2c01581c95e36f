"""AReaL's own VLM dataset items (clevr_count_70k, geometry3k) through our vision workflow.

The items are built by AReaL's dataset functions from a local parquet file (a chat-templated string
with ``<|vision_start|><|image_pad|><|vision_end|>`` plus decoded PIL images); AReaL's
``VisionRLVRWorkflow`` and ours run each one against the same scripted engine.
"""

from __future__ import annotations

import asyncio
import copy

import datasets
import numpy as np
import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.workflow.vision_rlvr import VisionRLVRWorkflow as ArealVisionRLVR
from PIL import Image

from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import VisionRLVRWorkflow

GCONFIG = GenerationHyperparameters(max_new_tokens=8)
BUILDERS = {
    "clevr_count_70k": (
        "areal.dataset.clevr_count_70k.get_clevr_count_70k_rl_dataset",
        "areal.reward.clevr_count_70k.clevr_count_70k_reward_fn",
    ),
    "geometry3k": (
        "areal.dataset.geometry3k.get_geometry3k_rl_dataset",
        "areal.reward.clevr_count_70k.clevr_count_70k_reward_fn",
    ),
}


def _scene(seed: int, size) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))


@pytest.fixture
def areal_processor(qwen2vl_processor):
    proc = copy.deepcopy(qwen2vl_processor)
    # AReaL's dataset code reads this attribute (set by from_pretrained, absent when built in code)
    proc.image_processor.image_processor_type = type(proc.image_processor).__name__
    return proc


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_areal_items_give_the_input_ids_pixels_and_reward_of_areals_workflow(
    name, tmp_path, tokenizer, areal_processor
):
    from areal.utils.dynamic_import import import_from_string

    builder, reward = (import_from_string(BUILDERS[name][0]), BUILDERS[name][1])
    features = datasets.Features(
        {
            "images": datasets.Sequence(datasets.Image()),
            "problem": datasets.Value("string"),
            "answer": datasets.Value("string"),
        }
    )
    raw = datasets.Dataset.from_dict(
        {
            "images": [[_scene(0, (120, 90))], [_scene(1, (64, 100))]],
            "problem": ["<image>How many different objects?", "<image>Find x."],
            "answer": ["3", "4"],
        },
        features=features,
    )
    raw.to_parquet(str(tmp_path / "train.parquet"))
    items = list(builder(str(tmp_path), "train", areal_processor))
    assert isinstance(items[0]["messages"], str) and "<|image_pad|>" in items[0]["messages"]

    ours = VisionRLVRWorkflow(reward, GCONFIG, tokenizer, areal_processor)
    theirs = ArealVisionRLVR(reward, GCONFIG, tokenizer, areal_processor, enable_thinking=False)
    for item in items:
        completion = tokenizer.encode("[3]", add_special_tokens=False) + [tokenizer.eos_token_id]
        a = asyncio.run(theirs.arun_episode(ScriptedEngine([completion]), dict(item)))
        b = asyncio.run(ours.arun_episode(ScriptedEngine([completion]), dict(item)))
        assert b is not None, ours.ledger.records
        assert b["input_ids"].tolist() == a["input_ids"].tolist()
        assert torch.equal(
            b["multi_modal_input"][0]["pixel_values"], a["multi_modal_input"][0]["pixel_values"]
        )
        assert torch.equal(
            b["multi_modal_input"][0]["image_grid_thw"], a["multi_modal_input"][0]["image_grid_thw"]
        )
        assert b["mm_token_type_ids"].tolist() == a["mm_token_type_ids"].tolist()
        assert b["rewards"].item() == a["rewards"].item() == float(item["answer"] == "3")


@pytest.mark.parametrize("workflow", ["single_turn", "multi_attempt"])
def test_reward_prompt_holds_one_placeholder_per_image_in_every_workflow(
    workflow, tokenizer, qwen2vl_processor
):
    from vlrollout.workflows import VisionMultiAttemptWorkflow

    reward = "tests.workflows.reward_fns.image_pads_in_prompt"
    if workflow == "single_turn":
        wf = VisionRLVRWorkflow(reward, GCONFIG, tokenizer, qwen2vl_processor)
    else:
        wf = VisionMultiAttemptWorkflow(
            reward, GCONFIG, tokenizer, qwen2vl_processor, max_turns=1, turn_discount=1.0
        )
    item = {
        "messages": [{"role": "user", "content": "<image><image>Same?"}],
        "images": [_scene(2, (80, 60)), _scene(3, (60, 80))],
    }
    out = [tokenizer.eos_token_id]
    traj = asyncio.run(wf.arun_episode(ScriptedEngine([out, out]), item))
    assert traj is not None and traj["rewards"].item() == 2.0
