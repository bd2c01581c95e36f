"""Models bigger than the memory budget: accelerate places layers on CPU and disk (``device_map``),
and the engine generates the same tokens and logprobs as from the unsplit model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from vlrollout.engine import LocalInferenceEngine

ASSET = Path(__file__).resolve().parents[2] / "assets" / "tiny-qwen2vl"


def _requests(processor, vision_prompt_images):
    reqs = []
    for k, image in enumerate(vision_prompt_images):
        content = [{"type": "image"}, {"type": "text", "text": "How many shapes are there?"}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
        out = processor(text=[text], images=[image], return_tensors="pt")
        mm = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
        g = GenerationHyperparameters(max_new_tokens=8, min_new_tokens=8, temperature=1.0)
        reqs.append(
            ModelRequest(
                input_ids=out["input_ids"][0].tolist(),
                metadata={"multi_modal_input": mm, "seed": k},
                gconfig=g,
            )
        )
    return reqs


def _generate(engine, reqs):
    async def go():
        return await asyncio.gather(*(engine.agenerate(r.copy()) for r in reqs))

    with engine:
        return asyncio.run(go())


def test_disk_offloaded_model_generates_like_the_unsplit_one(tmp_path):
    from tests.engine.conftest import make_image

    whole = LocalInferenceEngine.from_pretrained(str(ASSET), dtype=torch.float32)
    weight_bytes = sum(p.numel() * p.element_size() for p in whole.model.parameters())
    budget = weight_bytes // 3  # far less than the weights: most layers go to disk
    split = LocalInferenceEngine.from_pretrained(
        str(ASSET),
        dtype=torch.float32,
        device_map="auto",
        max_memory={"cpu": budget},
        offload_folder=str(tmp_path / "offload"),
    )
    placement = set(split.model.hf_device_map.values())
    assert "disk" in placement, split.model.hf_device_map
    assert split.device == torch.device("cpu")

    reqs = _requests(whole.processor, [make_image(1)])
    expected = _generate(whole, reqs)
    got = _generate(split, reqs)
    for a, b in zip(expected, got, strict=True):
        assert a.output_tokens == b.output_tokens
        torch.testing.assert_close(
            torch.tensor(b.output_logprobs), torch.tensor(a.output_logprobs), atol=1e-6, rtol=0
        )
