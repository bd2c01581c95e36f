"""The tiny models' configs, built from the tiny tokenizer's ids: the shipped Qwen2-VL model and
the Qwen3-VL model the grounding recipe starts from (:func:`tiny_qwen3vl_config`).

The shipped model is a real ``transformers.Qwen2VLForConditionalGeneration`` (the architecture
SGLang and vLLM serve as ``Qwen2VLForConditionalGeneration``), only small: a 4-layer, 128-wide text
decoder and a depth-4, 128-wide ViT with patch 14 and a 2×2 merger. Field names follow
transformers 5.3's ``Qwen2VLConfig`` (``text_config`` / ``vision_config`` sub-configs;
``vision_config.hidden_size`` is the merger's output width and must equal the text width).

M-RoPE: ``rope_parameters["mrope_section"]`` splits the head's 16 rotary frequencies (32-dim heads)
into contiguous temporal/height/width groups, highest frequencies first
(``apply_multimodal_rotary_pos_emb`` in transformers). Qwen/Qwen2-VL-2B-Instruct uses [16, 24, 24]
of 64 with base 1e6; here [4, 6, 6] with base 1e4. The width group's frequencies are then below
0.004 rad per position, so the decoder barely sees which column an image token is in, and
Qwen2-VL's ViT has no absolute position embedding (2D RoPE only, relative) to make up for it: that
is a likely reason grounding is its weakest task. Measured alternatives (``--rope-theta``,
``--mrope-section`` of ``vlrollout.tiny.train``): base 2 with [2, 7, 7] lowers the grounding loss
(0.77 vs 0.85 after 350 grounding-only steps) but in the full mix counting and captioning stayed at
chance for 2,700 steps (no low-frequency channel left for position-independent attention), so the
default stays conventional.

>>> from vlrollout.tiny.tokenizer import build_bpe_tokenizer
>>> cfg = tiny_qwen2vl_config(build_bpe_tokenizer())
>>> cfg.text_config.hidden_size, cfg.vision_config.patch_size
(128, 14)
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase, Qwen2VLConfig, Qwen3VLConfig

TEXT_DEFAULTS: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]},
}
VISION_DEFAULTS: dict[str, Any] = {
    "depth": 4,
    "embed_dim": 128,
    "num_heads": 4,
    "mlp_ratio": 4,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}


def _token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    tid = tokenizer.convert_tokens_to_ids(token)
    if tid is None or tid == tokenizer.unk_token_id:
        raise ValueError(f"tokenizer has no {token!r} token; build it with QWEN2VL_SPECIAL_TOKENS")
    return int(tid)


def _text_token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    eos = _token_id(tokenizer, tokenizer.eos_token)
    pad = _token_id(tokenizer, tokenizer.pad_token)
    return {
        "vocab_size": len(tokenizer),
        "bos_token_id": pad,
        "eos_token_id": eos,
        "pad_token_id": pad,
    }


def _vision_token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    return {
        "image_token_id": _token_id(tokenizer, "<|image_pad|>"),
        "video_token_id": _token_id(tokenizer, "<|video_pad|>"),
        "vision_start_token_id": _token_id(tokenizer, "<|vision_start|>"),
        "vision_end_token_id": _token_id(tokenizer, "<|vision_end|>"),
    }


def tiny_qwen2vl_config(
    tokenizer: PreTrainedTokenizerBase,
    text: dict[str, Any] | None = None,
    vision: dict[str, Any] | None = None,
) -> Qwen2VLConfig:
    """A small ``Qwen2VLConfig`` whose vocabulary and special-token ids match ``tokenizer``.

    Args:
        tokenizer: The tiny BPE tokenizer (``vlrollout.tiny.tokenizer.build_bpe_tokenizer``).
        text: Overrides for the text sub-config (defaults ``TEXT_DEFAULTS``).
        vision: Overrides for the vision sub-config (defaults ``VISION_DEFAULTS``).
    """
    text_cfg = {**TEXT_DEFAULTS, **(text or {})}
    vision_cfg = {**VISION_DEFAULTS, **(vision or {})}
    head_dim = text_cfg["hidden_size"] // text_cfg["num_attention_heads"]
    section = text_cfg["rope_parameters"]["mrope_section"]
    if sum(section) * 2 != head_dim:
        raise ValueError(
            f"mrope_section {section} sums to {sum(section)} but must be head_dim/2 = {head_dim // 2}"
        )
    vision_cfg["hidden_size"] = text_cfg["hidden_size"]  # merger output feeds the decoder
    text_cfg.update(_text_token_ids(tokenizer))
    return Qwen2VLConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        tie_word_embeddings=False,
        **_vision_token_ids(tokenizer),
    )


def tiny_qwen3vl_config(tokenizer: PreTrainedTokenizerBase) -> Qwen3VLConfig:
    """A small ``Qwen3VLConfig`` of the Qwen2-VL model's sizes, for the grounding recipe.

    Qwen3-VL gives an image token's absolute position to the decoder twice over: learned position
    embeddings in the vision tower (``num_position_embeddings``, bilinearly interpolated to each
    image's patch grid) and interleaved M-RoPE (every axis gets high and low frequencies). A tiny
    Qwen2-VL (relative 2D RoPE in the ViT, low-frequency width group) learns to name the target's
    cell much more slowly (``vlrollout.tiny.synthetic.answer_with_cell``). Patch 14 matches
    ``build_qwen3vl_processor``; DeepStack feeds vision block 1's features to the decoder too.
    """
    text = {
        **{k: v for k, v in TEXT_DEFAULTS.items() if k != "rope_parameters"},
        "head_dim": 32,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [4, 6, 6],
            "mrope_interleaved": True,
        },
    }
    text.update(_text_token_ids(tokenizer))
    vision = {
        "depth": 4,
        "hidden_size": 128,
        "intermediate_size": 512,
        "num_heads": 4,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": text["hidden_size"],
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [1],
    }
    return Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        tie_word_embeddings=False,
        **_vision_token_ids(tokenizer),
    )
