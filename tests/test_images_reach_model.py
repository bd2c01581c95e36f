"""End to end with the shipped tiny model: the answer depends on the image.

Same prompt, different images → the workflow's greedy completions differ, and each names its own
image's shape count. If images stopped reaching the model (dropped tensors, a text-only fallback),
the model would give the same answer to the same prompt.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.tiny.synthetic import generate_items
from vlrollout.workflows import VisionRLVRWorkflow

ASSET = Path(__file__).resolve().parents[1] / "assets" / "tiny-qwen2vl"


@pytest.fixture(scope="module")
def engine():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    eng = LocalInferenceEngine.from_pretrained(str(ASSET), seed=0)
    eng.initialize()
    yield eng
    eng.destroy()
    torch.set_num_threads(threads)


def test_same_prompt_different_images_different_answers(engine):
    items = generate_items("count", 24, seed=777)
    by_count = {}
    for item in items:
        by_count.setdefault(item["answer"], item)
    picked = [by_count[n] for n in sorted(by_count)]
    assert len(picked) == 4  # counts 1..4, same prompt text
    assert len({str(i["messages"]) for i in picked}) == 1
    wf = VisionRLVRWorkflow(
        "vlrollout.rewards.answer.CountReward",
        GenerationHyperparameters(max_new_tokens=4, greedy=True),
        engine.tokenizer,
        engine.processor,
    )

    async def run():
        return await asyncio.gather(*(wf.arun_episode(engine, item) for item in picked))

    trajs = asyncio.run(run())
    answers = [
        wf.ctx.decode_completion(t["input_ids"][0][t["loss_mask"][0].bool()].tolist())
        for t in trajs
    ]
    assert len(set(answers)) >= 3, answers  # the answer follows the image
    correct = sum(t["rewards"].item() == 1.0 for t in trajs)
    assert correct >= 3, (answers, [i["answer"] for i in picked])
