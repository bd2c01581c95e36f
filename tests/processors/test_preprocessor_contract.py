"""The plug-in contract: checked at load time, errors name the plug-in and the broken promise."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml
from areal.api.cli_args import GenerationHyperparameters
from PIL import Image, ImageDraw

from vlrollout.geometry import convert_boxes
from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.processors.contract import PreprocessorContractError, load_preprocessor
from vlrollout.rewards.box_scores import iou
from vlrollout.rewards.grounding import GroundingReward
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import VisionRLVRWorkflow

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
GCONFIG = GenerationHyperparameters(max_new_tokens=8)
REWARD = "tests.workflows.reward_fns.contains_answer"


@pytest.fixture
def examples_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    yield
    sys.modules.pop("custom_preprocessor", None)


# -- plug-ins that break one promise each (module-level: resolvable by import path) -----------


def old_style_factory(processor, crop=0.5):  # does not accept the contract's keywords
    return AutoProcessorPreprocessor(processor)


class NoProcessor:
    def __init__(self, processor, **kwargs):
        self._inner = AutoProcessorPreprocessor(processor)
        self.tokenizer = self._inner.tokenizer

    def prepare(self, data):
        return self._inner.prepare(data)


class Wrapped:
    def __init__(self, processor, **kwargs):
        self._inner = AutoProcessorPreprocessor(processor)
        self.processor, self.tokenizer = self._inner.processor, self._inner.tokenizer

    def prepare(self, data):
        return {"prepared": self._inner.prepare(data)}


class _Returns:
    """A plug-in whose prepared prompt is changed by ``change`` before it is returned."""

    change = staticmethod(lambda prepared: prepared)

    def __init__(self, processor, **kwargs):
        self._inner = AutoProcessorPreprocessor(processor)
        self.processor, self.tokenizer = self._inner.processor, self._inner.tokenizer

    def prepare(self, data):
        return self.change(self._inner.prepare(data))


class TensorIds(_Returns):
    change = staticmethod(lambda p: dataclasses.replace(p, input_ids=torch.tensor(p.input_ids)))


class LateFloatId(_Returns):
    change = staticmethod(lambda p: dataclasses.replace(p, input_ids=[*p.input_ids, 3.5]))


def _tensors(p, **changed):
    return dataclasses.replace(p, multi_modal_input={**p.multi_modal_input, **changed})


class DropPixels(_Returns):
    change = staticmethod(
        lambda p: _tensors(p, pixel_values=p.multi_modal_input["pixel_values"][:-4])
    )


class WrongGrid(_Returns):
    change = staticmethod(
        lambda p: _tensors(p, image_grid_thw=p.multi_modal_input["image_grid_thw"] * 2)
    )


class DoublePixels(_Returns):
    change = staticmethod(
        lambda p: _tensors(p, pixel_values=p.multi_modal_input["pixel_values"].double())
    )


class FloatGrid(_Returns):
    change = staticmethod(
        lambda p: _tensors(p, image_grid_thw=p.multi_modal_input["image_grid_thw"].float())
    )


class DropPad(_Returns):
    @staticmethod
    def change(p):
        pad = p.image_token_id
        at = p.input_ids.index(pad)
        types = p.mm_token_type_ids
        return dataclasses.replace(
            p,
            input_ids=p.input_ids[:at] + p.input_ids[at + 1 :],
            mm_token_type_ids=None if types is None else types[:at] + types[at + 1 :],
        )


class GeometryDicts(_Returns):
    change = staticmethod(
        lambda p: dataclasses.replace(p, geometry=[g.to_dict() for g in p.geometry])
    )


class UnevenTypes(_Returns):
    change = staticmethod(lambda p: dataclasses.replace(p, mm_token_type_ids=[0]))


class NoGeometry(_Returns):
    change = staticmethod(lambda p: dataclasses.replace(p, geometry=[]))


class Mutates(_Returns):
    """Rewrites the item it is given: pops the label, edits the message in place."""

    def prepare(self, data):
        data.pop("answer", None)
        data["messages"][0]["content"] = data["messages"][0]["content"] + " Count carefully."
        if "boxes" in data:  # the load-time probe has no labels
            data["boxes"][0][0] = 999.0
            data["meta"]["seen"] = True
        return super().prepare(data)


class DropsImages(_Returns):
    """Prepares the item's text without its images: the prompt would run as text."""

    def prepare(self, data):
        return self._inner.prepare({"messages": [{"role": "user", "content": "Describe."}]})


class IntPixels(_Returns):
    change = staticmethod(
        lambda p: _tensors(p, pixel_values=p.multi_modal_input["pixel_values"].to(torch.int64))
    )


class SwapsGrids(_Returns):
    """Gives each image of a two-image item the other's grid (the totals still agree)."""

    change = staticmethod(
        lambda p: _tensors(p, image_grid_thw=p.multi_modal_input["image_grid_thw"].flip(0))
    )


def returns_none(processor, **kwargs):
    return None


HERE = "tests.processors.test_preprocessor_contract"


@pytest.mark.parametrize(
    ("plugin", "promise"),
    [
        (f"{HERE}.old_style_factory", "does not accept ['chat_template_kwargs', 'min_pixels'"),
        (f"{HERE}.NoProcessor", "has no .processor"),
        (f"{HERE}.Wrapped", "returned a dict, not a PreparedPrompt"),
        (f"{HERE}.TensorIds", "input_ids must be a list of ints, got a Tensor"),
        (f"{HERE}.LateFloatId", "input_ids must be a list of ints, got a float at position"),
        (f"{HERE}.DropPixels", "pixel_values has"),
        (f"{HERE}.WrongGrid", "pixel_values has"),
        (f"{HERE}.DoublePixels", "pixel_values is torch.float64"),
        (f"{HERE}.FloatGrid", "image_grid_thw is torch.float32"),
        (f"{HERE}.DropPad", "image placeholder tokens"),
        (f"{HERE}.NoGeometry", "0 geometries for 1 images"),
        (f"{HERE}.GeometryDicts", "geometry 1 is a dict, not an ImageGeometry"),
        (f"{HERE}.UnevenTypes", "returned 1 mm_token_type_ids for"),
        (f"{HERE}.DropsImages", "0 images for an item of 1"),
        (f"{HERE}.IntPixels", "pixel_values is torch.int64"),
    ],
    ids=[
        "factory-signature",
        "no-processor",
        "wrong-return-type",
        "tensor-ids",
        "float-id",
        "pixel-rows",
        "grid",
        "float64-pixels",
        "float-grid",
        "placeholders",
        "no-geometry",
        "geometry-dicts",
        "type-ids",
        "drops-images",
        "int-pixels",
    ],
)
def test_broken_promises_fail_at_load_naming_the_plugin(
    plugin, promise, tokenizer, qwen2vl_processor
):
    with pytest.raises(PreprocessorContractError) as info:
        VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor, preprocessor=plugin)
    assert plugin in str(info.value) and promise in str(info.value)


def test_mapping_without_name_is_explained(qwen2vl_processor):
    with pytest.raises(ValueError, match="needs a 'name'"):
        load_preprocessor({"side": 3}, processor=qwen2vl_processor)


def _item(image):
    return {
        "messages": [{"role": "user", "content": "<image>Colour?"}],
        "images": [image],
        "answer": "x",
    }


def test_example_runs_from_a_workflow_with_options(examples_path, tokenizer, qwen2vl_processor):
    wf = VisionRLVRWorkflow(
        REWARD,
        GCONFIG,
        tokenizer,
        qwen2vl_processor,
        preprocessor={
            "name": "custom_preprocessor.build_center_crop_preprocessor",
            "crop_fraction": 0.5,
        },
    )
    assert wf.ctx.preprocessor.crop_fraction == 0.5
    traj = asyncio.run(
        wf.arun_episode(
            ScriptedEngine([[tokenizer.eos_token_id]]), _item(Image.new("RGB", (200, 100)))
        )
    )
    assert traj is not None and wf.ledger.accepted == 1


# -- geometry composed by custom preprocessors: IoU 1.0 --------------------------------------

GREEN = (0, 255, 0)


def _scene(size, box):
    image = Image.new("RGB", size, (40, 40, 200))
    ImageDraw.Draw(image).rectangle([box[0], box[1], box[2] - 1, box[3] - 1], fill=GREEN)
    return image


def _seen_box(prepared, processor):
    """Where the green box is in the model frame, read back from pixel_values (Qwen2-VL layout)."""
    import torch

    ip = processor.image_processor
    (_t, gh, gw), patch, merge = (
        prepared.multi_modal_input["image_grid_thw"][0].tolist(),
        ip.patch_size,
        ip.merge_size,
    )
    pv = prepared.multi_modal_input["pixel_values"].view(
        gh // merge, gw // merge, merge, merge, 3, ip.temporal_patch_size, patch, patch
    )[..., 0, :, :]
    frame = pv.permute(4, 0, 2, 5, 1, 3, 6).reshape(3, gh * patch, gw * patch)
    mean = torch.tensor(ip.image_mean).view(3, 1, 1)
    std = torch.tensor(ip.image_std).view(3, 1, 1)
    rgb = ((frame * std + mean) * 255).round()
    mask = (rgb[1] > 200) & (rgb[0] < 60) & (rgb[2] < 60)
    ys, xs = mask.nonzero(as_tuple=True)
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)


@pytest.mark.parametrize(
    ("factory", "options", "size", "box"),
    [
        ("build_letterbox_preprocessor", {"side": 112}, (112, 56), (28, 14, 84, 42)),
        (
            "build_center_crop_preprocessor",
            {"crop_fraction": 0.5, "schedule": [(0, 112 * 112)]},
            (224, 112),
            (70, 35, 140, 70),
        ),
    ],
    ids=["letterbox", "crop"],
)
def test_letterbox_and_crop_score_iou_one(
    examples_path, factory, options, size, box, qwen2vl_processor
):
    pre = load_preprocessor(
        {"name": f"custom_preprocessor.{factory}", **options}, processor=qwen2vl_processor
    )
    prepared = pre.prepare(_item(_scene(size, box)))
    geo = prepared.geometry[0]
    assert (geo.original_width, geo.original_height) == size and not geo.is_plain_resize
    seen = _seen_box(prepared, qwen2vl_processor)  # what the model saw, in its frame
    (back,) = convert_boxes([seen], "model", "original", geo)
    assert iou(back, box) == pytest.approx(1.0)
    # The model answers in its own frame (Qwen2.5-VL: pixels of the model frame); the reward,
    # given the recorded geometry, scores it against the label in original pixels.
    reward = GroundingReward(metric="iou", family="qwen2_5_vl")
    answer = json.dumps([{"bbox_2d": [round(v) for v in seen], "label": "box"}])
    score = reward("p", answer, [], [], boxes=list(box), geometry=[geo.to_dict()])
    assert score == pytest.approx(1.0)


def test_example_runs_from_vlrollout_run(examples_path, tmp_path, monkeypatch):
    from vlrollout.cli import main

    monkeypatch.setenv("PYTHONPATH", str(EXAMPLES))
    cfg = {
        "data": str(REPO / "assets" / "samples" / "data.jsonl"),
        "output": str(tmp_path / "run"),
        "workflow": "vision",
        "preprocessor": {"name": "custom_preprocessor.build_letterbox_preprocessor", "side": 112},
        "group_size": 1,
        "limit": 2,
        "gconfig": {"max_new_tokens": 4},
        "engine": {"model": str(REPO / "assets" / "tiny-qwen2vl")},
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", "--config", str(path)]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["items"]["accepted"] == 2
    assert summary["config"]["preprocessor"]["side"] == 112


def test_the_python_entry_points_check_the_contract_too(qwen2vl_processor):
    from vlrollout.processors import model_inputs
    from vlrollout.processors.registry import get_preprocessor

    with pytest.raises(PreprocessorContractError, match="without a prepare"):
        get_preprocessor(f"{HERE}.returns_none", processor=qwen2vl_processor)
    broken = get_preprocessor(f"{HERE}.LateFloatId", processor=qwen2vl_processor)
    with pytest.raises(PreprocessorContractError, match="LateFloatId.*got a float"):
        model_inputs(_item(Image.new("RGB", (64, 48), "red")), broken)


def test_a_plugin_that_changes_its_item_changes_neither_the_item_nor_the_reward(
    tokenizer, qwen2vl_processor
):
    """The item is also the reward's task data and the other episodes' of its group: prepare()
    gets a copy to change as it likes."""
    wf = VisionRLVRWorkflow(
        REWARD, GCONFIG, tokenizer, qwen2vl_processor, preprocessor=f"{HERE}.Mutates"
    )
    item = {**_item(Image.new("RGB", (40, 30))), "boxes": [[1.0, 2.0, 3.0, 4.0]], "meta": {}}
    before = json.dumps(item["messages"])
    out = tokenizer.encode("x", add_special_tokens=False) + [tokenizer.eos_token_id]
    for _ in range(2):
        traj = asyncio.run(wf.arun_episode(ScriptedEngine([out]), item))
        assert traj is not None and traj["rewards"].item() == 1.0, wf.ledger.summary()
    assert item["answer"] == "x" and json.dumps(item["messages"]) == before
    assert item["boxes"] == [[1.0, 2.0, 3.0, 4.0]] and item["meta"] == {}


def test_each_images_placeholders_match_its_own_grid(qwen2vl_processor):
    """Totals that agree are not enough: image k's run of placeholders is image k's grid."""
    from vlrollout.processors import model_inputs
    from vlrollout.processors.registry import get_preprocessor

    swapped = get_preprocessor(f"{HERE}.SwapsGrids", processor=qwen2vl_processor)
    item = {
        "messages": [{"role": "user", "content": "<image><image>Which is larger?"}],
        "images": [Image.new("RGB", (58, 84), "red"), Image.new("RGB", (46, 46), "blue")],
    }
    with pytest.raises(PreprocessorContractError, match="image 1"):
        model_inputs(item, swapped)
