"""Engine images are encoded only when an engine reads them, and then give the trainer's pixels."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import numpy as np
from areal.api.cli_args import GenerationHyperparameters
from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import VisionRLVRWorkflow

GCONFIG = GenerationHyperparameters(max_new_tokens=4)
REWARD = "tests.workflows.reward_fns.contains_answer"


def _item():
    rng = np.random.default_rng(0)
    rgba = Image.fromarray(rng.integers(0, 255, (30, 40, 4), dtype=np.uint8), "RGBA")
    return {"messages": [{"role": "user", "content": "<image>Q"}], "images": [rgba], "answer": "x"}


class Reading(ScriptedEngine):
    """An engine that reads image_data and the vLLM messages, as AReaL's remote clients do."""

    reads_multi_modal_input = False

    async def agenerate(self, req):
        self.payload = json.dumps({"image_data": req.image_data, "msgs": req.vision_msg_vllm})
        return await super().agenerate(req)


def test_an_engine_that_uses_the_tensors_never_triggers_encoding(tokenizer, qwen2vl_processor):
    wf = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor)
    engine = ScriptedEngine([[tokenizer.eos_token_id]])
    assert asyncio.run(wf.arun_episode(engine, _item())) is not None
    req = engine.requests[0]
    assert req.images_unread and req.image_count == 1  # checked without encoding


def test_an_engine_that_reads_image_data_gets_the_trainer_pixels(tokenizer, qwen2vl_processor):
    wf = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor)
    engine = Reading([[tokenizer.eos_token_id]])
    traj = asyncio.run(wf.arun_episode(engine, _item()))
    sent = json.loads(engine.payload)
    (b64,) = sent["image_data"]
    assert f"base64,{b64}" in json.dumps(sent["msgs"])
    decoded = Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")
    pre = AutoProcessorPreprocessor(qwen2vl_processor)
    expected = pre.load_images(_item()["images"], "item")[0].image  # alpha on white
    assert decoded.tobytes() == expected.tobytes()
    direct = qwen2vl_processor(
        images=[decoded], text=[pre.prepare(_item()).prompt_text], return_tensors="pt"
    )
    assert (traj["multi_modal_input"][0]["pixel_values"] == direct["pixel_values"]).all()


def test_multi_attempt_turns_leave_images_unencoded_until_an_engine_reads_them(
    tokenizer, qwen2vl_processor
):
    """Later turns only append messages: a tensor-reading engine never triggers encoding, and
    an engine that reads the vLLM messages gets the prompt's plus each earlier turn."""
    from vlrollout.workflows import VisionMultiAttemptWorkflow

    wrong = tokenizer.encode("no", add_special_tokens=False) + [tokenizer.eos_token_id]
    wf = VisionMultiAttemptWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor, 2, 0.9)
    engine = ScriptedEngine([wrong, wrong])
    assert asyncio.run(wf.arun_episode(engine, _item())) is not None
    assert len(engine.requests) == 2
    assert all(req.images_unread for req in engine.requests)
    reading = Reading([wrong, wrong])
    asyncio.run(wf.arun_episode(reading, _item()))
    (msgs,) = json.loads(reading.payload)["msgs"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
