"""Configs of the tiny random models of :mod:`vlrollout.testing.tiny_families`, one builder per family.

Each builder takes the family's offline processor (:mod:`vlrollout.testing.offline_processors`) and
reads its numbers from it instead of restating them: vocabulary size, pad/eos ids and the image
placeholder ids from the tokenizer; patch, image, merge and tile sizes from the image processor;
the soft tokens per image from the processor. Text decoders are 2 layers, 64 wide; vision towers
2 layers, 32 wide.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from vlrollout.testing.tiny_model import SMALL_TEXT, SMALL_VISION

TEXT: dict[str, Any] = {k: v for k, v in SMALL_TEXT.items() if k != "rope_parameters"}
"""Text decoder size shared by every family (head dim 16): the engine tests' Qwen2-VL size,
with each family's own rope settings."""

VISION: dict[str, Any] = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
"""CLIP/SigLIP/Idefics3 vision tower size (``num_attention_heads`` 2 is added per family)."""


def _token_id(tokenizer: Any, token: str) -> int:
    """The id of ``token``, which must be a single known token of ``tokenizer``."""
    tid = tokenizer.convert_tokens_to_ids(token)
    if tid is None or tid == tokenizer.unk_token_id:
        raise ValueError(f"tokenizer has no {token!r} token")
    return int(tid)


def _text(processor: Any, **extra: Any) -> dict[str, Any]:
    """The text sub-config: :data:`TEXT`, the tokenizer's vocabulary and pad/bos/eos ids."""
    tok = processor.tokenizer
    pad, eos = _token_id(tok, tok.pad_token), _token_id(tok, tok.eos_token)
    ids = {"vocab_size": len(tok), "pad_token_id": pad, "bos_token_id": pad, "eos_token_id": eos}
    return {**TEXT, **ids, "tie_word_embeddings": False, **extra}


def _siglip(image_size: int, patch_size: int, model_type: str | None = "siglip_vision_model"):
    """A CLIP-style vision tower config of :data:`VISION` size; ``model_type`` None for configs
    whose vision class is fixed (Idefics3, SmolVLM)."""
    vision = {
        **VISION,
        "num_attention_heads": 2,
        "image_size": image_size,
        "patch_size": patch_size,
    }
    return vision if model_type is None else {"model_type": model_type, **vision}


def _qwen_ids(processor: Any) -> dict[str, int]:
    tok = processor.tokenizer
    return {
        "image_token_id": _token_id(tok, "<|image_pad|>"),
        "video_token_id": _token_id(tok, "<|video_pad|>"),
        "vision_start_token_id": _token_id(tok, "<|vision_start|>"),
        "vision_end_token_id": _token_id(tok, "<|vision_end|>"),
    }


def _qwen_vision(processor: Any, **extra: Any) -> dict[str, Any]:
    """A Qwen ViT of 2 blocks, 32 wide; patch/merge/temporal sizes from the image processor."""
    ip = processor.image_processor
    return {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "patch_size": ip.patch_size,
        "spatial_merge_size": ip.merge_size,
        "temporal_patch_size": ip.temporal_patch_size,
        "out_hidden_size": TEXT["hidden_size"],  # the merger's output feeds the decoder
        **extra,
    }


def _qwen2_vl(processor: Any):
    """Qwen2-VL: the config of :func:`vlrollout.testing.tiny_model.tiny_qwen2vl`."""
    from vlrollout.tiny.model import tiny_qwen2vl_config

    return tiny_qwen2vl_config(processor.tokenizer, text=SMALL_TEXT, vision=SMALL_VISION)


def _qwen2_5_vl(processor: Any):
    """Qwen2.5-VL: window attention in block 0, full attention in block 1.

    ``vision_config.tokens_per_second`` is 2, as in Qwen/Qwen2.5-VL-3B-Instruct and -7B-Instruct
    ``config.json`` (the class default is 4); ``Qwen2_5_VLModel.get_rope_index`` reads it to space
    video frames in M-RoPE time.
    """
    from transformers import Qwen2_5_VLConfig

    vision = _qwen_vision(processor, tokens_per_second=2, fullatt_block_indexes=[1])
    vision["window_size"] = vision["patch_size"] * vision["spatial_merge_size"] * 2
    return Qwen2_5_VLConfig(
        text_config=_text(processor, rope_parameters=SMALL_TEXT["rope_parameters"]),
        vision_config=vision,
        tie_word_embeddings=False,
        **_qwen_ids(processor),
    )


def _qwen3_vl(processor: Any):
    """Qwen3-VL: interleaved M-RoPE, DeepStack features from vision block 0 into decoder layer 0.

    ``mrope_section`` [4, 2, 2] splits the 8 rotary frequencies of a 16-dim head roughly as
    Qwen/Qwen3-VL-2B-Instruct's [24, 20, 20] splits 64.
    """
    from transformers import Qwen3VLConfig

    rope = {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [4, 2, 2],
        "mrope_interleaved": True,
    }
    return Qwen3VLConfig(
        text_config=_text(processor, head_dim=16, rope_parameters=rope),
        vision_config=_qwen_vision(
            processor, num_position_embeddings=64, deepstack_visual_indexes=[0]
        ),
        tie_word_embeddings=False,
        **_qwen_ids(processor),
    )


def _qwen3_5(processor: Any):
    """Qwen3.5: one Gated DeltaNet (linear attention) layer, then one gated full-attention layer.

    Qwen/Qwen3.5 configs alternate three linear-attention layers with one full-attention layer and
    rotate a quarter of each head (``partial_rotary_factor`` 0.25, interleaved M-RoPE). Here heads
    are 32 wide, so 8 dims rotate: 4 frequencies split [2, 1, 1] over time, height and width.
    """
    from transformers import Qwen3_5Config

    rope = {
        "rope_type": "default",
        "rope_theta": 10_000_000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [2, 1, 1],
        "mrope_interleaved": True,
    }
    text = _text(
        processor,
        head_dim=32,
        rope_parameters=rope,
        layer_types=["linear_attention", "full_attention"],
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
    )
    return Qwen3_5Config(
        text_config=text,
        vision_config=_qwen_vision(processor, num_position_embeddings=64),
        tie_word_embeddings=False,
        **_qwen_ids(processor),
    )


def _gemma3(processor: Any):
    """Gemma 3: SigLIP tower at the processor's square size; soft tokens pooled to its count.

    The projector average-pools the (image/patch)² patch grid to ``mm_tokens_per_image`` tokens,
    so that must equal the processor's ``image_seq_length`` (and be a square). Embeddings are
    untied (the real model ties them) so that re-initialising the output layer leaves the input
    embeddings alone.
    """
    from transformers import Gemma3Config

    tok, size = processor.tokenizer, processor.image_processor.size["height"]
    patch = 14  # SigLIP's
    per_side = math.isqrt(processor.image_seq_length)
    if per_side**2 != processor.image_seq_length or (size // patch) % per_side:
        raise ValueError(
            f"{processor.image_seq_length} soft tokens cannot pool a {size // patch}² patch grid"
        )
    text = _text(
        processor,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=64,
        layer_types=["sliding_attention", "full_attention"],
    )
    return Gemma3Config(
        text_config=text,
        vision_config=_siglip(size, patch),
        mm_tokens_per_image=processor.image_seq_length,
        boi_token_index=_token_id(tok, processor.boi_token),
        eoi_token_index=_token_id(tok, tok.eoi_token),
        image_token_index=_token_id(tok, processor.image_token),
        tie_word_embeddings=False,
    )


def _llava(processor: Any):
    """LLaVA-1.5: CLIP tower (CLS dropped by the "default" strategy), Llama decoder."""
    from transformers import LlavaConfig

    size = processor.image_processor.crop_size["height"]
    patch = processor.patch_size
    return LlavaConfig(
        vision_config=_siglip(size, patch, model_type="clip_vision_model"),
        text_config=_text(processor, model_type="llama"),
        image_token_index=_token_id(processor.tokenizer, processor.image_token),
        image_seq_length=(size // patch) ** 2,
        vision_feature_select_strategy=processor.vision_feature_select_strategy,
        vision_feature_layer=-2,
        tie_word_embeddings=False,
    )


def _llava_onevision(processor: Any):
    """LLaVA-OneVision: SigLIP tower over anyres tiles, Qwen2 decoder; same pinpoints as the
    processor, which counts the same unpadded features plus row newlines."""
    from transformers import LlavaOnevisionConfig

    tok, ip = processor.tokenizer, processor.image_processor
    patch = ip.size["height"] // math.isqrt(processor.num_image_tokens)
    return LlavaOnevisionConfig(
        vision_config=_siglip(ip.size["height"], patch),
        text_config=_text(processor, model_type="qwen2"),
        image_token_index=_token_id(tok, processor.image_token),
        video_token_index=_token_id(tok, processor.video_token),
        vision_feature_select_strategy=processor.vision_feature_select_strategy,
        vision_feature_layer=-1,
        vision_aspect_ratio=processor.vision_aspect_ratio,
        image_grid_pinpoints=[list(p) for p in ip.image_grid_pinpoints],
        tie_word_embeddings=False,
    )


def _idefics3_like(processor: Any, config_class: Callable[..., Any]):
    """Idefics3 and SmolVLM: a tile of T pixels gives (T/patch)² patches, which pixel shuffle by
    ``scale_factor`` 2 reduces by 4 to the processor's ``image_seq_len``; patch size follows."""
    tile = processor.image_processor.max_image_size["longest_edge"]
    scale = 2
    side = math.isqrt(processor.image_seq_len) * scale
    if tile % side:
        raise ValueError(f"tile {tile} px is not divisible into {side}x{side} patches")
    return config_class(
        vision_config=_siglip(tile, tile // side, model_type=None),
        text_config=_text(processor, model_type="llama"),
        image_token_id=_token_id(processor.tokenizer, processor.image_token),
        scale_factor=scale,
        pad_token_id=_token_id(processor.tokenizer, processor.tokenizer.pad_token),
        tie_word_embeddings=False,
    )


def _idefics3(processor: Any):
    from transformers import Idefics3Config

    return _idefics3_like(processor, Idefics3Config)


def _smolvlm(processor: Any):
    from transformers import SmolVLMConfig

    return _idefics3_like(processor, SmolVLMConfig)


def _qwen3_vl_moe(processor: Any):
    """Qwen3-VL-MoE: Qwen3-VL's vision and M-RoPE, a decoder whose every layer routes each token
    to 2 of 4 experts (Qwen/Qwen3-VL-30B-A3B-Instruct routes to 8 of 128)."""
    from transformers import Qwen3VLMoeConfig

    rope = {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [4, 2, 2],
        "mrope_interleaved": True,
    }
    text = _text(
        processor,
        head_dim=16,
        rope_parameters=rope,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        decoder_sparse_step=1,
    )
    return Qwen3VLMoeConfig(
        text_config=text,
        vision_config=_qwen_vision(
            processor, num_position_embeddings=64, deepstack_visual_indexes=[0]
        ),
        tie_word_embeddings=False,
        **_qwen_ids(processor),
    )


def _internvl(processor: Any):
    """InternVL: an InternViT tower over one tile, pixel-shuffled by ``downsample_ratio`` 0.5 to the
    processor's ``image_seq_length`` tokens per tile, a Qwen2 decoder (InternVL3-1B's)."""
    from transformers import InternVLConfig

    tile = processor.image_processor.size["height"]
    side = math.isqrt(processor.image_seq_length) * 2  # patches per tile side before the shuffle
    if side**2 != 4 * processor.image_seq_length or tile % side:
        raise ValueError(f"{processor.image_seq_length} tokens cannot pool a {tile}-pixel tile")
    vision = {**VISION, "num_attention_heads": 2, "image_size": tile, "patch_size": tile // side}
    return InternVLConfig(
        vision_config=vision,
        text_config=_text(processor, model_type="qwen2"),
        image_token_id=processor.image_token_id,
        image_seq_length=processor.image_seq_length,
        downsample_ratio=0.5,
        vision_feature_layer=-1,
        tie_word_embeddings=False,
    )


def _glm4v(processor: Any):
    """GLM-4.1V: a Qwen-style ViT (patch/merge/temporal sizes from the image processor) and a
    decoder with 3-D rope on half of each head (``partial_rotary_factor`` 0.5); zai-org/
    GLM-4.1V-9B-Thinking splits 32 rotary frequencies [8, 12, 12], here 4 split [2, 1, 1]."""
    from transformers import Glm4vConfig

    ip, tok = processor.image_processor, processor.tokenizer
    rope = {
        "rope_type": "default",
        "rope_theta": 10_000.0,
        "partial_rotary_factor": 0.5,
        "mrope_section": [2, 1, 1],
    }
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "image_size": 4 * ip.patch_size,
        "patch_size": ip.patch_size,
        "spatial_merge_size": ip.merge_size,
        "temporal_patch_size": ip.temporal_patch_size,
        "out_hidden_size": TEXT["hidden_size"],
    }
    return Glm4vConfig(
        text_config=_text(processor, rope_parameters=rope),
        vision_config=vision,
        image_token_id=processor.image_token_id,
        video_token_id=processor.video_token_id,
        image_start_token_id=_token_id(tok, "<|begin_of_image|>"),
        image_end_token_id=_token_id(tok, "<|end_of_image|>"),
        video_start_token_id=_token_id(tok, "<|begin_of_video|>"),
        video_end_token_id=_token_id(tok, "<|end_of_video|>"),
        tie_word_embeddings=False,
    )


def _glm46v(processor: Any):
    """GLM-4.6V: GLM-4.1V's vision (``glm4v_vision``) and text (``glm4v_text``) configs."""
    from transformers import Glm46VConfig

    glm4v = _glm4v(processor).to_dict()
    for key in ("model_type", "architectures", "transformers_version"):
        glm4v.pop(key, None)
    return Glm46VConfig(**glm4v)


def _mistral3(processor: Any):
    """Mistral 3: a Pixtral tower (2-D rope over the patch grid) at the processor's patch size and
    longest edge, a patch merger of ``spatial_merge_size``², a Mistral decoder."""
    from transformers import Mistral3Config

    edge = processor.image_processor.size["longest_edge"]
    vision = {
        **VISION,
        "model_type": "pixtral",
        "num_attention_heads": 2,
        "head_dim": 16,
        "image_size": edge,
        "patch_size": processor.patch_size,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10_000.0},
    }
    return Mistral3Config(
        vision_config=vision,
        text_config=_text(processor, model_type="mistral", head_dim=16, sliding_window=None),
        image_token_index=processor.image_token_id,
        spatial_merge_size=processor.spatial_merge_size,
        vision_feature_layer=-1,
        tie_word_embeddings=False,
    )


def _lfm2_vl(processor: Any):
    """LFM2-VL: a SigLIP2 (NaFlex) tower with position embeddings for the largest patch grid the
    processor emits, pixel unshuffle by ``downsample_factor``, an LFM2 decoder of one
    short-convolution layer and one attention layer (LiquidAI/LFM2-VL-450M interleaves them)."""
    from transformers import Lfm2VlConfig

    ip = processor.image_processor
    vision = {
        **VISION,
        "model_type": "siglip2_vision_model",
        "num_attention_heads": 2,
        "patch_size": ip.encoder_patch_size,
        "num_patches": ip.max_num_patches,
    }
    text = _text(
        processor,
        model_type="lfm2",
        layer_types=["conv", "full_attention"],
        norm_eps=1e-5,
        block_auto_adjust_ff_dim=False,
    )
    return Lfm2VlConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=processor.image_token_id,
        downsample_factor=ip.downsample_factor,
        projector_hidden_size=64,
        tie_word_embeddings=False,
    )


CONFIG_BUILDERS: dict[str, Callable[[Any], Any]] = {
    "qwen2_vl": _qwen2_vl,
    "qwen2_5_vl": _qwen2_5_vl,
    "qwen3_vl": _qwen3_vl,
    "qwen3_5": _qwen3_5,
    "gemma3": _gemma3,
    "llava": _llava,
    "llava_onevision": _llava_onevision,
    "idefics3": _idefics3,
    "smolvlm": _smolvlm,
    "internvl": _internvl,
    "glm4v": _glm4v,
    "mistral3": _mistral3,
    "lfm2_vl": _lfm2_vl,
    "qwen3_vl_moe": _qwen3_vl_moe,
    "glm46v": _glm46v,
}
"""Per family: ``processor -> config`` of the tiny model that matches it."""
