"""Greedy tokens of the engine equal ``model.generate``'s on one batch of vision requests of
mixed prompt and completion lengths (rows leave the decode batch at different steps), as a user
would call ``generate``: the same left-padded processor batch, run to its longest request.

In float32 with small images, and in bfloat16 with one long image prompt (256 image tokens);
on the CPU and, where one is present, on CUDA (``-m gpu``). ``bench/bench_engine.py`` measures
the same comparison's speed.
"""

from __future__ import annotations

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from tests.engine.batches import generate_together
from tests.engine.conftest import make_image
from vlrollout.engine import LocalInferenceEngine
from vlrollout.testing.tiny_model import tiny_qwen2vl

CUDA = pytest.param(
    "cuda",
    marks=[
        pytest.mark.gpu,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    ],
)
# (dtype, image sizes (width, height) of the rows): small images in float32; in bfloat16 one
# 448 x 448 image (256 image tokens after the 2 x 2 merge) among small ones.
SETTINGS = {
    "float32": (torch.float32, [(56, 56), (84, 56), (112, 84), (56, 112), (84, 84)]),
    "bfloat16-long": (torch.bfloat16, [(448, 448), (56, 84), (112, 56)]),
}


def prompt_text(processor, question: str) -> str:
    content = [{"type": "image"}, {"type": "text", "text": question}]
    return processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_greedy_tokens_equal_generate(device, setting):
    dtype, sizes = SETTINGS[setting]
    # A wide LM head spreads the logits: no near-tie for kernel rounding to flip.
    model, processor = tiny_qwen2vl(seed=0, dtype=dtype, lm_head_std=2.0)
    images = [make_image(i, width=w, height=h) for i, (w, h) in enumerate(sizes)]
    texts = [prompt_text(processor, "Where?" + " And why?" * (i % 3)) for i in range(len(sizes))]
    lengths = [3 + 5 * i for i in range(len(sizes))]
    processor.tokenizer.padding_side = "left"
    batch = processor(text=texts, images=images, padding=True, return_tensors="pt")
    reqs = []
    for text, image, new in zip(texts, images, lengths, strict=True):
        out = processor(text=[text], images=[image], return_tensors="pt")
        mm = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
        gconfig = GenerationHyperparameters(max_new_tokens=new, min_new_tokens=new, greedy=True)
        reqs.append(
            ModelRequest(
                input_ids=out["input_ids"][0].tolist(),
                metadata={"multi_modal_input": mm},
                gconfig=gconfig,
            )
        )
    with LocalInferenceEngine(model, processor, device=device, max_batch_size=8) as engine:
        results = generate_together(engine, reqs)
        banned = sorted(engine.banned_token_ids)
        assert engine.stats()["prefill_batches"] == 1
    with torch.no_grad():
        out = model.generate(
            **batch.to(device),
            max_new_tokens=max(lengths),
            min_new_tokens=max(lengths),
            do_sample=False,
            suppress_tokens=banned,
            pad_token_id=processor.tokenizer.pad_token_id,
        )
    prompt = batch["input_ids"].shape[1]
    expected = [out[i, prompt : prompt + n].tolist() for i, n in enumerate(lengths)]
    assert [r.output_tokens for r in results] == expected
