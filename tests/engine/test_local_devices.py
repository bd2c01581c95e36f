"""Text-only causal LMs (1-D positions) and, on a GPU, the same logprob checks on CUDA."""

from __future__ import annotations

import asyncio

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from vlrollout.engine import LocalInferenceEngine
from vlrollout.testing.tiny_model import tiny_qwen2vl

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]


def tiny_causal_lm(tokenizer):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = Qwen2ForCausalLM(config)
    torch.nn.init.normal_(model.lm_head.weight, std=0.3)
    return model.eval()


def run(engine, reqs):
    async def go():
        return await asyncio.gather(*(engine.agenerate(r) for r in reqs))

    return asyncio.run(go())


@pytest.mark.parametrize("device", DEVICES)
def test_causal_lm_batched_logprobs_equal_teacher_forcing(tiny, text_prompt, device):
    _, processor = tiny
    tokenizer = processor.tokenizer
    model = tiny_causal_lm(tokenizer)
    prompts = [text_prompt("What is in the image? " * k) for k in (1, 3, 6)]
    reqs = [
        ModelRequest(
            input_ids=p,
            metadata={"seed": i},
            gconfig=GenerationHyperparameters(
                temperature=0.7, max_new_tokens=5 + 4 * i, min_new_tokens=5 + 4 * i
            ),
        )
        for i, p in enumerate(prompts)
    ]
    with LocalInferenceEngine(model, tokenizer, device=device) as eng:
        assert eng.processor is None and eng.tokenizer is tokenizer
        resps = run(eng, reqs)
        assert eng.stats()["decode_rows"] > eng.stats()["decode_steps"]
    model = model.to("cpu")
    for prompt, resp in zip(prompts, resps, strict=True):
        ids = torch.tensor([prompt + resp.output_tokens])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        ref = torch.log_softmax(logits / 0.7, -1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
        torch.testing.assert_close(torch.tensor(resp.output_logprobs), ref, atol=1e-4, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_vision_on_cuda_matches_cpu_teacher_forcing(vision_prompt, teacher_forced):
    model, processor = tiny_qwen2vl(seed=0)
    p = vision_prompt(seed=1)
    req = ModelRequest(
        input_ids=p["input_ids"],
        metadata={"multi_modal_input": p["mm"], "seed": 0},
        gconfig=GenerationHyperparameters(max_new_tokens=16, min_new_tokens=16),
    )
    with LocalInferenceEngine(model, processor, device="cuda") as eng:
        (resp,) = run(eng, [req])
    ref = teacher_forced(
        model.to("cpu"), p["input_ids"], resp.output_tokens, 1.0, p["mm"], p["mm_token_type_ids"]
    )
    # TF32/cuDNN kernels differ from CPU ones: a looser tolerance than on CPU.
    torch.testing.assert_close(torch.tensor(resp.output_logprobs), ref, atol=2e-3, rtol=0)
