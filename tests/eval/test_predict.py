"""EnginePredictor on the embedded engine: greedy completions equal ``model.generate``'s on the
same prompt, geometry is each image's original and model-frame size, ``k`` samples are sampled,
and a bad item is rejected with the reason and detail ``vlrollout run``'s workflow records."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from PIL import Image

from tests.serve.conftest import ASSET, SAMPLES, load_engine
from vlrollout.datasets import LOAD_ERROR, load_items
from vlrollout.eval.predict import EnginePredictor
from vlrollout.eval.prediction import Predictor
from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.testing.family_items import generate_greedy
from vlrollout.workflows import VisionRLVRWorkflow

NEW_TOKENS = 24


@pytest.fixture(scope="module")
def engine():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine's cores are shared
    engine = load_engine(deterministic=True)
    yield engine
    engine.destroy()
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def items():
    return {item["id"]: item for item in load_items(SAMPLES)}


def predictor(engine, **kwargs) -> EnginePredictor:
    gconfig = GenerationHyperparameters(max_new_tokens=NEW_TOKENS, temperature=kwargs.pop("t", 1.0))
    return EnginePredictor(engine, engine.tokenizer, str(ASSET), gconfig=gconfig, **kwargs)


def reference_text(engine, tokens: list[int]) -> str:
    """The text rewards see, by hand: a trailing stop token dropped, special tokens kept."""
    tok = engine.tokenizer
    if tokens and tokens[-1] in {*engine.eos_token_ids, tok.eos_token_id, tok.pad_token_id}:
        tokens = tokens[:-1]
    return tok.decode(tokens, skip_special_tokens=False)


@pytest.mark.parametrize("item_id", ["count-2-0", "ground-2-1", "caption-2-2"])
def test_greedy_completion_equals_generate_and_geometry_the_images(engine, items, item_id):
    item = items[item_id]
    prediction = asyncio.run(predictor(engine).predict(item, 1))
    assert prediction.rejection is None
    prepared = AutoProcessorPreprocessor(engine.processor).prepare(item)
    tokens = generate_greedy(engine.model, engine, prepared, NEW_TOKENS)
    assert prediction.completions == [reference_text(engine, tokens)]
    assert prediction.prompt_tokens == len(prepared.input_ids)
    assert prediction.generated_tokens == len(tokens)
    # Geometry: the decoded image's size, and the frame the model saw (grid x patch size).
    patch = engine.processor.image_processor.patch_size
    (_, grid_h, grid_w), path = (
        prepared.multi_modal_input["image_grid_thw"][0].tolist(),
        item["images"][0],
    )
    with Image.open(path) as image:
        width, height = image.size
    assert prediction.geometry == [
        {
            "original_width": width,
            "original_height": height,
            "model_width": grid_w * patch,
            "model_height": grid_h * patch,
        }
    ]


def test_ground_item_keeps_box_tokens(engine, items):
    """Special tokens stay in the text (Qwen2-VL writes boxes with them)."""
    prediction = asyncio.run(predictor(engine).predict(items["ground-2-1"], 1))
    assert prediction.completions[0].startswith("<|box_start|>")


def test_k_samples_are_sampled(engine, items):
    p = predictor(engine, t=5.0)
    assert isinstance(p, Predictor)
    prediction = asyncio.run(p.predict(items["caption-2-2"], 4))
    assert len(prediction.completions) == 4
    assert len(set(prediction.completions)) > 1, prediction.completions  # greedy would repeat
    assert prediction.generated_tokens >= 4
    with pytest.raises(ValueError, match="whole number >= 1"):
        asyncio.run(p.predict(items["caption-2-2"], 0))
    with pytest.raises(ValueError, match="temperature > 0"):
        asyncio.run(predictor(engine, t=0.0).predict(items["caption-2-2"], 2))


def bad_items(items, tmp_path: Path) -> list[dict]:
    item = items["count-2-0"]
    return [
        {**item, "id": "missing", "images": [str(tmp_path / "gone.png")]},
        {**item, "id": "two-placeholders", "messages": "<image><image>How many?"},
        {**item, "id": "not-an-image", "images": [str(SAMPLES)]},
        {**item, "id": "long", "messages": "<image>" + "How many? " * 20},
    ]


def test_bad_items_rejected_as_the_workflow_rejects_them(engine, items, tmp_path):
    p = predictor(engine, max_prompt_tokens=64)
    workflow = VisionRLVRWorkflow(
        "iou", p.greedy, engine.tokenizer, str(ASSET), max_prompt_tokens=64
    )

    async def both(item):
        prediction = await p.predict(item, 1)
        assert await workflow.arun_episode(engine, item) is None
        return prediction, workflow.ledger.records[-1]

    reasons = set()
    for item in bad_items(items, tmp_path):
        prediction, record = asyncio.run(both(item))
        assert prediction.rejection == {"reason": record.reason, "detail": record.detail}
        assert prediction.id == item["id"] and prediction.completions == []
        reasons.add(record.reason)
    assert "prompt_too_long" in reasons and len(reasons) == 4, reasons


def test_load_error_and_engine_error_rejected(engine, items):
    placeholder = {"id": "line-3", LOAD_ERROR: {"reason": "bad_json", "detail": "line 3: x"}}
    prediction = asyncio.run(predictor(engine).predict(placeholder, 1))
    assert prediction.rejection == {"reason": "bad_json", "detail": "line 3: x"}

    class Failing:
        async def agenerate(self, req):
            raise RuntimeError("device lost")

    p = EnginePredictor(
        Failing(), engine.tokenizer, str(ASSET), gconfig=GenerationHyperparameters()
    )
    prediction = asyncio.run(p.predict(items["count-2-0"], 1))
    assert prediction.rejection == {"reason": "engine_error", "detail": "RuntimeError: device lost"}
    assert prediction.geometry[0]["original_width"] == items["count-2-0"]["image_size"][0]
