"""A group of episodes on one PIL image encodes the engine's lossless image once, and every request
carries the trainer's pixels."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import threading

import numpy as np
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.remote_inf_engine import GroupedRolloutWorkflow
from PIL import Image

from vlrollout.processors import image_loading
from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import VisionRLVRWorkflow

GROUP = 8


class Reading(ScriptedEngine):
    """Reads ``image_data`` and serialises it per request, as AReaL's remote clients do."""

    reads_multi_modal_input = False

    def __init__(self, script):
        super().__init__(script)
        self.bodies: list[dict] = []

    async def agenerate(self, req):
        self.bodies.append(json.loads(json.dumps({"image_data": req.image_data})))
        return await super().agenerate(req)

    def the_image_sent(self) -> Image.Image:
        """The one image every request carried (one encoding of it)."""
        (b64,) = {b64 for body in self.bodies for b64 in body["image_data"]}
        return Image.open(io.BytesIO(base64.b64decode(b64)))


def test_a_group_on_a_pil_image_encodes_it_once(tokenizer, qwen2vl_processor, monkeypatch):
    calls = []
    encode = image_loading.LoadedImage.engine_bytes
    monkeypatch.setattr(
        image_loading.LoadedImage, "engine_bytes", lambda self: calls.append(1) or encode(self)
    )
    engine = Reading([[tokenizer.eos_token_id]])
    image = _group_on_a_pil_image(engine, tokenizer, qwen2vl_processor, GROUP, seed=0)
    assert len(calls) == 1
    assert len(engine.bodies) == GROUP
    sent = engine.the_image_sent()
    assert sent.format == "WEBP" and sent.convert("RGB").tobytes() == image.tobytes()


def _watch_encode_and_processor(monkeypatch, wait_s: float):
    """Record the thread of each engine-image encode, and whether one had started when the
    processor call began (the call waits a little for it)."""
    started, seen = threading.Event(), {"threads": [], "during_processor_call": []}
    encode = image_loading.LoadedImage.engine_bytes

    def recording_encode(self):
        seen["threads"].append(threading.current_thread().name)
        started.set()
        return encode(self)

    call = AutoProcessorPreprocessor.call_processor

    def waiting_call(self, *args, **kwargs):
        seen["during_processor_call"].append(started.wait(timeout=wait_s))
        return call(self, *args, **kwargs)

    monkeypatch.setattr(image_loading.LoadedImage, "engine_bytes", recording_encode)
    monkeypatch.setattr(AutoProcessorPreprocessor, "call_processor", waiting_call)
    return seen


def _group_on_a_pil_image(engine, tokenizer, processor, group_size: int = 2, seed: int = 1):
    """Run one group on a decoded image (as ``datasets`` gives them); the image."""
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (28, 42, 3), np.uint8))
    wf = VisionRLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer",
        GenerationHyperparameters(max_new_tokens=4),
        tokenizer,
        processor,
    )
    group = GroupedRolloutWorkflow(wf, group_size, logging.getLogger("test"))
    item = {"messages": [{"role": "user", "content": "<image>Q"}], "images": [image], "answer": "x"}
    assert asyncio.run(group.arun_episode(engine, item)) is not None
    return image


def test_an_engine_that_sends_images_gets_them_encoded_beside_the_processor_call(
    tokenizer, qwen2vl_processor, monkeypatch
):
    seen = _watch_encode_and_processor(monkeypatch, wait_s=5)
    engine = Reading([[tokenizer.eos_token_id]])
    image = _group_on_a_pil_image(engine, tokenizer, qwen2vl_processor)
    assert seen["during_processor_call"] == [True]
    assert len(seen["threads"]) == 1 and seen["threads"][0].startswith("vlrollout-engine-images")
    sent = engine.the_image_sent()
    assert sent.convert("RGB").tobytes() == image.tobytes()


def test_an_engine_that_reads_the_tensors_gets_no_encode(tokenizer, qwen2vl_processor, monkeypatch):
    seen = _watch_encode_and_processor(monkeypatch, wait_s=0.2)
    _group_on_a_pil_image(ScriptedEngine([[tokenizer.eos_token_id]]), tokenizer, qwen2vl_processor)
    assert seen["during_processor_call"] == [False] and seen["threads"] == []


def test_the_local_engine_gets_no_encode(monkeypatch):
    """vlrollout's own engine reads the tensors (``reads_multi_modal_input``): a PIL image of its
    episode is never re-encoded for it, ahead or lazily."""
    from vlrollout.engine.local import LocalInferenceEngine
    from vlrollout.testing.tiny_families import tiny_vlm

    seen = _watch_encode_and_processor(monkeypatch, wait_s=0.2)
    model, processor = tiny_vlm("qwen2_vl")
    with LocalInferenceEngine(model, processor) as engine:
        _group_on_a_pil_image(engine, processor.tokenizer, processor)
    # (the first episode also checks the engine processor against ours: more processor calls)
    assert not any(seen["during_processor_call"]) and seen["threads"] == []
