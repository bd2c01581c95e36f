"""A tiny random Qwen2-VL model for tests and benchmarks of the engine (no weights needed).

The vocabulary is the offline BPE tokenizer of :mod:`vlrollout.tiny.tokenizer`, special tokens
included, and the placeholder ids in the config are the tokenizer's.
"""

from __future__ import annotations

from typing import Any

import torch


def tiny_qwen2vl_config(tokenizer: Any, **text_overrides: Any):
    """A ``Qwen2VLConfig``: text 64 wide × 2 layers, ViT depth 2 × 32, patch 14, merge 2."""
    from transformers import Qwen2VLConfig

    ids = tokenizer.convert_tokens_to_ids
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    text.update(text_overrides)
    return Qwen2VLConfig(
        text_config=text,
        vision_config=dict(
            depth=2,
            embed_dim=32,
            hidden_size=64,
            num_heads=2,
            mlp_ratio=2,
            patch_size=14,
            spatial_merge_size=2,
            in_channels=3,
            temporal_patch_size=2,
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )


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

    from vlrollout.tiny.tokenizer import build_bpe_tokenizer, build_qwen2vl_processor

    tokenizer = build_bpe_tokenizer()
    processor = build_qwen2vl_processor(tokenizer)
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(tiny_qwen2vl_config(tokenizer))
    torch.nn.init.normal_(model.lm_head.weight, std=lm_head_std)
    model = model.to(dtype).eval()
    return model, processor
