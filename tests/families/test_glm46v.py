"""GLM-4.6V through the engine: its transformers classes are GLM-4.1V's code under new names
(``modular_glm46v.py``), so one check per path stands in for the full family matrix that
GLM-4.1V runs (``tests/families/test_family_rollouts.py``): episodes accepted, rollout
logprobs within 1e-4 of the model's own forward (3-D rope from its ``get_rope_index``), greedy
tokens equal to ``generate``."""

from __future__ import annotations

import asyncio

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters

from tests.families.test_family_rollouts import NEW_TOKENS, REWARD, _assert_consistent, _gconfig
from tests.families.test_family_rollouts import _item as probe
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.families import family_of
from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.testing.family_items import generate_greedy
from vlrollout.testing.tiny_families import tiny_vlm
from vlrollout.workflows import VisionMultiAttemptWorkflow, VisionRLVRWorkflow
from vlrollout.workflows.steps import build_request


@pytest.fixture(scope="module")
def glm46v():
    torch.set_num_threads(1)
    model, processor = tiny_vlm("glm46v", seed=0)
    engine = LocalInferenceEngine(model, processor, seed=0).initialize()
    yield model, processor, engine
    engine.destroy()


def test_glm46v_is_glm4v_code(glm46v):
    model, processor, _ = glm46v
    assert family_of(model.config).positions == "mrope"
    assert AutoProcessorPreprocessor(processor).family == "glm46v"


def test_glm46v_rollouts_match_the_model(glm46v):
    model, processor, engine = glm46v
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    _assert_consistent(model, asyncio.run(wf.arun_episode(engine, probe("image_in_later_turn"))))
    multi = VisionMultiAttemptWorkflow(
        REWARD, _gconfig(), processor.tokenizer, processor, max_turns=3, turn_discount=0.9
    )
    _assert_consistent(model, asyncio.run(multi.arun_episode(engine, probe("two_images"))), 3)


def test_glm46v_greedy_equals_generate(glm46v):
    model, processor, engine = glm46v
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    prepared = asyncio.run(wf.ctx.prepare(probe("text_before_image")))
    greedy = GenerationHyperparameters(max_new_tokens=NEW_TOKENS, greedy=True)
    resp = asyncio.run(
        engine.agenerate(build_request(prepared, greedy, processor.tokenizer, processor))
    )
    expected = generate_greedy(model, engine, prepared, NEW_TOKENS)
    assert resp.output_tokens == expected[: len(resp.output_tokens)]
