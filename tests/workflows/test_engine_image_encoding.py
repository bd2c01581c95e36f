"""A group of episodes on one PIL image encodes the engine's lossless image once, and every request
carries the trainer's pixels."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging

import numpy as np
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.remote_inf_engine import GroupedRolloutWorkflow
from PIL import Image

from vlrollout.processors import image_loading
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import VisionRLVRWorkflow

GROUP = 8


class Reading(ScriptedEngine):
    """Reads ``image_data`` and serialises it per request, as AReaL's remote clients do."""

    def __init__(self, script):
        super().__init__(script)
        self.bodies: list[dict] = []

    async def agenerate(self, req):
        self.bodies.append(json.loads(json.dumps({"image_data": req.image_data})))
        return await super().agenerate(req)


def test_a_group_on_a_pil_image_encodes_it_once(tokenizer, qwen2vl_processor, monkeypatch):
    rng = np.random.default_rng(0)
    image = Image.fromarray(
        rng.integers(0, 256, (28, 42, 3), np.uint8)
    )  # decoded, as datasets give
    calls = []
    encode = image_loading.LoadedImage.engine_bytes
    monkeypatch.setattr(
        image_loading.LoadedImage, "engine_bytes", lambda self: calls.append(1) or encode(self)
    )
    wf = VisionRLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer",
        GenerationHyperparameters(max_new_tokens=4),
        tokenizer,
        qwen2vl_processor,
    )
    group = GroupedRolloutWorkflow(wf, GROUP, logging.getLogger("test"))
    engine = Reading([[tokenizer.eos_token_id]])
    item = {"messages": [{"role": "user", "content": "<image>Q"}], "images": [image], "answer": "x"}
    assert asyncio.run(group.arun_episode(engine, item)) is not None
    assert len(calls) == 1
    assert len(engine.bodies) == GROUP
    (b64,) = {b64 for body in engine.bodies for b64 in body["image_data"]}
    sent = Image.open(io.BytesIO(base64.b64decode(b64)))
    assert sent.format == "WEBP" and sent.convert("RGB").tobytes() == image.tobytes()
