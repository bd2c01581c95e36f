"""Images in later turns, per family: a tool episode whose first turn calls ``zoom_in`` and whose
second turn the real engine generates after the tool's image.

A random model never writes a well-formed tool call, so the first turn is forced: its tokens
are the call, its logprobs the model's own teacher-forced ones (so the whole trajectory still
checks against the model). The second turn is the engine's, prefilled with the prompt image, the
forced call and the cropped image; its logprobs must equal a teacher-forced forward over the
packed trajectory within 1e-4.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelResponse
from areal.infra.workflow_executor import check_trajectory_format

from vlrollout.checks import logprob_consistency, recompute_logprobs
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.testing.family_items import ITEMS
from vlrollout.testing.tiny_families import TINY_FAMILIES, tiny_vlm
from vlrollout.workflows import VisionToolWorkflow

TEMPERATURE = 0.7
NEW_TOKENS = 6
CALL = (
    "<tool_call>\n"
    + json.dumps({"name": "zoom_in", "arguments": {"bbox_2d": [0, 0, 300, 1000]}})
    + "\n</tool_call>"
)


class ForcedFirstTurn:
    """The engine's ``agenerate``, except that the first request of an episode answers
    ``forced`` with the model's own logprobs for it."""

    def __init__(self, engine: LocalInferenceEngine, forced: list[int]):
        self.engine, self.forced, self.calls = engine, forced, 0

    def get_version(self) -> int:
        return self.engine.get_version()

    async def agenerate(self, req):
        self.calls += 1
        if self.calls > 1:
            return await self.engine.agenerate(req)
        ids = torch.tensor([list(req.input_ids) + self.forced])
        mm = req.metadata.get("multi_modal_input")
        traj = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if mm:
            traj["multi_modal_input"] = [mm]
        logp = recompute_logprobs(self.engine.model, traj, temperature=TEMPERATURE)
        return ModelResponse(
            input_tokens=list(req.input_ids),
            output_tokens=list(self.forced),
            output_logprobs=logp[-len(self.forced) :].tolist(),
            output_versions=[0] * len(self.forced),
            stop_reason="stop",
        )


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def family(request):
    torch.set_num_threads(1)
    model, processor = tiny_vlm(request.param, seed=0)
    engine = LocalInferenceEngine(model, processor, seed=0).initialize()
    yield model, processor, engine
    engine.destroy()


def test_an_image_from_a_tool_turn_matches_the_model(family):
    model, processor, engine = family
    tok = processor.tokenizer
    gconfig = GenerationHyperparameters(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, temperature=TEMPERATURE
    )
    wf = VisionToolWorkflow(
        "format_think_answer", gconfig, tok, processor, tools=["zoom_in"], max_turns=2
    )
    forced = tok.encode(CALL, add_special_tokens=False) + [wf.encoder.eos_token_id]
    driver = ForcedFirstTurn(engine, forced)
    item = {"id": "tool", **ITEMS["one_image"]}
    traj = asyncio.run(wf.arun_episode(driver, item))
    assert traj is not None, list(wf.ctx.ledger.records)
    check_trajectory_format(traj)
    assert driver.calls == 2
    report = logprob_consistency(model, traj, temperature=TEMPERATURE)
    assert report.n_tokens == len(forced) + NEW_TOKENS and report.ok(1e-4), report
