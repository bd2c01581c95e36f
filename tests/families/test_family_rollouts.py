"""Every model family through the local engine and the workflows, against the model's own forward.

Per family (a tiny random model of the real transformers class, :mod:`vlrollout.testing.
tiny_families`): every episode is accepted; the rollout's logprobs equal a teacher-forced forward
with every input the family takes (:func:`vlrollout.checks.logprob_consistency`) within 1e-4 in
float32; greedy tokens equal ``model.generate``'s on the same prepared inputs. Prompts: one image,
two images of different sizes, long text before the image, and an image in a later user turn.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.workflow_executor import check_trajectory_format

from vlrollout.checks import logprob_consistency
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.testing.family_items import ITEMS, generate_greedy
from vlrollout.testing.tiny_families import TINY_FAMILIES, tiny_vlm
from vlrollout.workflows import VisionMultiAttemptWorkflow, VisionRLVRWorkflow
from vlrollout.workflows.steps import build_request

ATOL = 1e-4
TEMPERATURE = 0.7
NEW_TOKENS = 8
REWARD = "tests.workflows.reward_fns.contains_answer"


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def family(request):
    """``(name, model, processor, engine)`` for one family, the engine running."""
    torch.set_num_threads(1)
    model, processor = tiny_vlm(request.param, seed=0)
    engine = LocalInferenceEngine(model, processor, seed=0).initialize()
    yield request.param, model, processor, engine
    engine.destroy()


def _item(name: str) -> dict:
    return {"id": name, "answer": "never-matches", **ITEMS[name]}


def _gconfig(**kwargs) -> GenerationHyperparameters:
    return GenerationHyperparameters(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, temperature=TEMPERATURE, **kwargs
    )


def _assert_consistent(model, traj, turns: int = 1) -> None:
    assert traj is not None, "the episode was rejected"
    check_trajectory_format(traj)
    report = logprob_consistency(model, traj, temperature=TEMPERATURE)
    assert report.n_tokens == NEW_TOKENS * turns and report.ok(ATOL), report


@pytest.mark.parametrize("item", list(ITEMS))
def test_single_turn_logprobs_match_the_model(family, item):
    name, model, processor, engine = family
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    traj = asyncio.run(wf.arun_episode(engine, _item(item)))
    _assert_consistent(model, traj)
    assert wf.ctx.ledger.rejected == 0, list(wf.ctx.ledger.records)


def test_multi_attempt_logprobs_match_the_model(family):
    """Later turns re-prefill prompt + earlier completions + feedback: positions continue the
    model's own rule across turns."""
    name, model, processor, engine = family
    wf = VisionMultiAttemptWorkflow(
        REWARD, _gconfig(), processor.tokenizer, processor, max_turns=3, turn_discount=0.9
    )
    traj = asyncio.run(wf.arun_episode(engine, _item("two_images")))
    _assert_consistent(model, traj, turns=3)


@pytest.mark.parametrize("item", ["one_image", "text_before_image", "image_in_later_turn"])
def test_greedy_tokens_equal_generate(family, item):
    name, model, processor, engine = family
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    prepared = asyncio.run(wf.ctx.prepare(_item(item)))
    greedy = GenerationHyperparameters(max_new_tokens=NEW_TOKENS, greedy=True)
    req = build_request(prepared, greedy, processor.tokenizer, processor)
    resp = asyncio.run(engine.agenerate(req))

    expected = generate_greedy(model, engine, prepared, NEW_TOKENS)
    assert resp.output_tokens == expected[: len(resp.output_tokens)]
    assert (
        len(resp.output_tokens) == len(expected) or resp.output_tokens[-1] in engine.eos_token_ids
    )
