"""A tiny random Qwen2-VL model for tests and benchmarks of the engine (no weights needed).

The vocabulary is the offline BPE tokenizer of :mod:`vlrollout.tiny.tokenizer`, special tokens
included, and the placeholder ids in the config are the tokenizer's.
"""

from __future__ import annotations

from typing import Any

import torch

SMALL_TEXT: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 1000000.0,
        "mrope_section": [2, 3, 3],
    },
}
"""Smaller than the shipped model (text 64 wide × 2 layers): engine tests need speed, not skill."""
SMALL_VISION: dict[str, Any] = {"depth": 2, "embed_dim": 32, "num_heads": 2, "mlp_ratio": 2}


def tiny_qwen2vl(seed: int = 0, dtype: torch.dtype = torch.float32, lm_head_std: float = 0.3):
    """``(model, processor)``: a randomly initialised tiny Qwen2-VL and a real processor.

    ``lm_head_std`` re-initialises the output layer so the next-token distribution is far from
    uniform (logit std ≈ ``lm_head_std * 8``); the default init (0.02) gives nearly uniform
    logits, under which sampling bugs hide.

    >>> model, processor = tiny_qwen2vl()
    >>> model.config.image_token_id == processor.image_token_id
    True
    """
    from transformers import Qwen2VLForConditionalGeneration

    from vlrollout.tiny.model import tiny_qwen2vl_config
    from vlrollout.tiny.tokenizer import build_bpe_tokenizer, build_qwen2vl_processor

    tokenizer = build_bpe_tokenizer()
    processor = build_qwen2vl_processor(tokenizer)
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(
        tiny_qwen2vl_config(tokenizer, text=SMALL_TEXT, vision=SMALL_VISION)
    )
    torch.nn.init.normal_(model.lm_head.weight, std=lm_head_std)
    model = model.to(dtype).eval()
    return model, processor


def tiny_qwen2_text(seed: int = 0, **config: Any):
    """A tiny random text-only ``Qwen2ForCausalLM`` (vocabulary 64, 2 layers 32 wide) in eval
    mode; ``config`` overrides ``Qwen2Config`` fields (a sliding window, the attention
    implementation)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    fields = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
    }
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(**{**fields, **config})).eval()
