"""A prompt whose images alone pass the token limit is refused before its pixels are built.

Pixel-budget families (Qwen-VL, GLM-4V) grow an image's tokens with its size; the processor call
that builds a large image's pixels is the costly part of preparing it, so the count comes first,
from the image sizes alone.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from areal.api.cli_args import GenerationHyperparameters
from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor, PreprocessError
from vlrollout.processors.base import PROMPT_TOKEN_LIMIT
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import VisionRLVRWorkflow

BUDGET_FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "glm46v"]
FIXED_FAMILIES = ["llava", "gemma3", "idefics3", "internvl", "mistral3"]
SIZES = [(1000, 37), (800, 600), (333, 1200), (4000, 3000), (9, 9), (7000, 500)]
BUDGETS = [None, (28 * 28 * 4, 1280 * 28 * 28), (56 * 56, 200 * 200)]


def _image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))


def _item(*images: Image.Image) -> dict:
    text = "".join("<image>" for _ in images) + "Describe."
    return {"id": "big", "messages": [{"role": "user", "content": text}], "images": list(images)}


def _counting_calls(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = AutoProcessorPreprocessor.call_processor

    def counted(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(AutoProcessorPreprocessor, "call_processor", counted)
    return calls


@pytest.mark.parametrize("family", BUDGET_FAMILIES)
@pytest.mark.parametrize("budget", BUDGETS, ids=["default", "wide", "narrow"])
def test_the_count_from_sizes_equals_the_processors_expansion(family, budget, offline):
    pre = AutoProcessorPreprocessor(offline(family), *(budget or (None, None)))
    for width, height in SIZES:
        image = _image(width, height)
        prepared = pre.prepare(_item(image))
        expected = prepared.input_ids.count(pre.image_token_id)
        loaded = pre.load_images([image], "item")
        assert pre.image_tokens([im.image.size for im in loaded]) == expected, (width, height)


@pytest.mark.parametrize("family", FIXED_FAMILIES)
def test_fixed_size_families_give_no_count(family, offline):
    pre = AutoProcessorPreprocessor(offline(family))
    assert pre.image_tokens([(800, 600)]) is None


def test_processor_kwargs_the_count_does_not_model_give_no_count(offline):
    pre = AutoProcessorPreprocessor(
        offline("qwen2_vl"), processor_kwargs={"images_kwargs": {"do_resize": False}}
    )
    assert pre.image_tokens([(800, 600)]) is None


def test_images_over_the_limit_are_refused_without_the_processor_call(offline, monkeypatch):
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"), max_pixels=1280 * 28 * 28)
    calls = _counting_calls(monkeypatch)
    item = _item(_image(4000, 3000), _image(3000, 4000, seed=1))
    images = pre.load_images(item["images"], "item")
    tokens = pre.image_tokens([im.image.size for im in images])
    token = PROMPT_TOKEN_LIMIT.set(tokens - 1)
    try:
        with pytest.raises(PreprocessError) as refused:
            pre.prepare(item)
    finally:
        PROMPT_TOKEN_LIMIT.reset(token)
    assert refused.value.reason == "prompt_too_long"
    assert (
        f"{tokens} tokens" in refused.value.detail
        and f"more than the {tokens - 1} a prompt" in refused.value.detail
    )
    assert "4000x3000" in refused.value.detail
    assert calls == []
    token = PROMPT_TOKEN_LIMIT.set(tokens + 100)  # room for the images: prepared in full
    try:
        assert pre.prepare(item).input_ids.count(pre.image_token_id) == tokens
    finally:
        PROMPT_TOKEN_LIMIT.reset(token)
    assert calls == [1]


def test_a_workflow_refuses_large_images_before_building_their_pixels(
    tokenizer, qwen2vl_processor, monkeypatch
):
    calls = _counting_calls(monkeypatch)
    gconfig = GenerationHyperparameters(max_new_tokens=4)
    wf = VisionRLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer",
        gconfig,
        tokenizer,
        qwen2vl_processor,
        max_pixels=1280 * 28 * 28,
        max_prompt_tokens=64,
    )
    engine = ScriptedEngine([[tokenizer.eos_token_id]])
    big = {**_item(_image(4000, 3000)), "answer": "x"}
    assert asyncio.run(wf.arun_episode(engine, big)) is None
    assert wf.ledger.by_reason == {"prompt_too_long": 1}
    assert calls == [] and engine.requests == []


def test_a_size_the_resize_refuses_keeps_the_processors_error(offline):
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"))
    token = PROMPT_TOKEN_LIMIT.set(1000)
    try:
        with pytest.raises(PreprocessError) as refused:
            pre.prepare(_item(_image(3000, 1)))
    finally:
        PROMPT_TOKEN_LIMIT.reset(token)
    assert refused.value.reason == "processor_error"
    assert "aspect ratio" in refused.value.detail
