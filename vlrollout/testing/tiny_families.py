"""Tiny random models of every supported VLM family, each paired with its offline processor.

Each model is the family's real transformers ``...ForConditionalGeneration`` class with a 2-layer,
64-wide text decoder and a 2-layer, 32-wide vision tower, randomly initialised (no hub, no
weights), so tests can run a family's real forward pass (placeholder expansion, vision tower,
projector, M-RoPE or bidirectional image attention) in tens of milliseconds on a CPU. TRL tests
its VLM trainers on such random tiny models for the same reason.

Every config (:mod:`vlrollout.testing.tiny_configs`) reads its numbers from the processor of
:mod:`vlrollout.testing.offline_processors` instead of restating them: vocabulary size, pad/eos ids and the image placeholder ids come from the
tokenizer; patch, image, merge and tile sizes from the image processor; the soft tokens per image
from the processor. A config and a processor therefore cannot drift apart, and
``model(**processor(text=..., images=..., return_tensors="pt"))`` works for every family.

All models use ``attn_implementation="sdpa"`` (every family here supports it, vision towers
included). Qwen3.5's linear-attention (Gated DeltaNet) layers have no attention implementation
to choose: without the optional ``fla`` and ``causal-conv1d`` kernels they run transformers' torch
fallback.

>>> from vlrollout.testing.tiny_families import tiny_vlm
>>> model, processor = tiny_vlm("gemma3")
>>> type(model).__name__, model.config.image_token_id == processor.image_token_id
('Gemma3ForConditionalGeneration', True)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from vlrollout.testing.offline_processors import OFFLINE_BUILDERS, SHARED_PROCESSORS
from vlrollout.testing.tiny_configs import CONFIG_BUILDERS

if TYPE_CHECKING:
    from transformers import PreTrainedModel, ProcessorMixin

TINY_FAMILIES: tuple[str, ...] = (
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_5",
    "gemma3",
    "llava",
    "llava_onevision",
    "idefics3",
    "smolvlm",
    "internvl",
    "glm4v",
    "mistral3",
    "lfm2_vl",
    "qwen3_vl_moe",
)
"""Families :func:`tiny_vlm` builds (``model_type`` spelling)."""

MODEL_CLASSES: dict[str, str] = {
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "gemma3": "Gemma3ForConditionalGeneration",
    "llava": "LlavaForConditionalGeneration",
    "llava_onevision": "LlavaOnevisionForConditionalGeneration",
    "idefics3": "Idefics3ForConditionalGeneration",
    "smolvlm": "SmolVLMForConditionalGeneration",
    "internvl": "InternVLForConditionalGeneration",
    "glm4v": "Glm4vForConditionalGeneration",
    "mistral3": "Mistral3ForConditionalGeneration",
    "lfm2_vl": "Lfm2VlForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
    "glm46v": "Glm46VForConditionalGeneration",
}
"""The transformers class of each family's model (what ``AutoModelForImageTextToText`` picks).
GLM-4.6V is built too but is not in :data:`TINY_FAMILIES`: its classes are GLM-4.1V's code
(``modular_glm46v.py`` copies them), checked once in ``tests/families/test_glm46v.py``."""

PROCESSOR_FAMILY: dict[str, str] = (
    {family: family for family in TINY_FAMILIES} | {"glm46v": "glm46v"} | SHARED_PROCESSORS
)
"""The ``OFFLINE_BUILDERS`` entry each family uses. Qwen3.5 has no processor of its own:
transformers' ``AutoProcessor`` and ``AutoImageProcessor`` map ``qwen3_5`` to ``Qwen3VLProcessor``
and the Qwen2-VL image processor, with patch 16 and merge 2 as for Qwen3-VL and the same
``<|vision_start|><|image_pad|><|vision_end|>`` placeholders. Qwen3-VL-MoE checkpoints
(Qwen/Qwen3-VL-30B-A3B-Instruct) ship ``Qwen3VLProcessor`` too."""


def _randomize_zero_matrices(model: torch.nn.Module, std: float) -> None:
    """Re-initialise every all-zero weight matrix with normal(0, ``std``).

    Some families initialise a projection to zeros because a checkpoint always overwrites it:
    Gemma 3's ``mm_input_projection_weight`` (``Gemma3PreTrainedModel._init_weights``). In a random
    model that projection would map every image to zero features, so the image would never reach
    the logits.
    """
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2 and not param.any():
                torch.nn.init.normal_(param, std=std)


def tiny_vlm(
    family: str, seed: int = 0, dtype: torch.dtype = torch.float32, lm_head_std: float = 0.3
) -> tuple[PreTrainedModel, ProcessorMixin]:
    """``(model, processor)``: a random tiny model of ``family`` in eval mode and its processor.

    The processor is a fresh instance from :data:`OFFLINE_BUILDERS` (callers may mutate it).
    ``lm_head_std`` re-initialises the untied output layer so the next-token distribution is far
    from uniform; the default init (std 0.02) gives nearly uniform logits, under which sampling
    bugs hide. The same ``seed`` gives the same weights.

    Args:
        family: One of :data:`TINY_FAMILIES`.
        seed: Seed of the random initialisation.
        dtype: Parameter dtype of the returned model.
        lm_head_std: Standard deviation of the output layer's normal initialisation.

    Raises:
        ValueError: ``family`` is not in :data:`TINY_FAMILIES`.

    >>> model, processor = tiny_vlm("qwen2_5_vl")
    >>> model.config.vision_config.tokens_per_second, model.training
    (2, False)
    """
    import transformers

    if family not in CONFIG_BUILDERS:
        raise ValueError(f"no tiny model for family {family!r}; known: {list(TINY_FAMILIES)}")
    processor = OFFLINE_BUILDERS[PROCESSOR_FAMILY[family]]()
    config = CONFIG_BUILDERS[family](processor)
    torch.manual_seed(seed)
    model = getattr(transformers, MODEL_CLASSES[family])(config)
    model.set_attn_implementation("sdpa")
    _randomize_zero_matrices(model, std=config.get_text_config().initializer_range)
    if model.lm_head.weight is model.get_input_embeddings().weight:
        raise RuntimeError(f"{family}: lm_head is tied to the input embeddings")
    torch.nn.init.normal_(model.lm_head.weight, std=lm_head_std)
    model.generation_config = transformers.GenerationConfig(
        eos_token_id=config.get_text_config().eos_token_id,
        pad_token_id=config.get_text_config().pad_token_id,
    )
    return model.to(dtype).eval(), processor


def save_tiny_vlm(family: str, path: str | Path, seed: int = 0) -> Path:
    """Write the float32 :func:`tiny_vlm` model and its processor to ``path``; return ``path``.

    For code that takes a model directory. ``AutoModelForImageTextToText.from_pretrained(path)``
    loads the model offline with bit-identical logits, its generation config carrying the eos
    and pad ids. ``AutoProcessor.from_pretrained(path)`` loads the processor offline, but
    transformers 5 upgrades a saved slow image processor (Qwen2-VL, Qwen2.5-VL, Gemma 3, LLaVA,
    LLaVA-OneVision) to its fast variant: the same tokens and grids, pixels that differ by float
    rounding, or for LLaVA's CLIP resize by up to about 0.015 after normalisation. Pass
    ``use_fast=False`` for those families to reload exactly the saved processor.

    >>> import tempfile
    >>> from transformers import AutoModelForImageTextToText
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = save_tiny_vlm("llava", tmp)
    ...     type(AutoModelForImageTextToText.from_pretrained(path)).__name__
    'LlavaForConditionalGeneration'
    """
    path = Path(path)
    model, processor = tiny_vlm(family, seed=seed, dtype=torch.float32)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def count_image_encodings(model: torch.nn.Module) -> list[int]:
    """A list that gets, for every call of ``model``'s Qwen-VL vision tower, the number of images
    it encodes (a forward hook that stays on the model)."""
    encoded: list[int] = []
    model.model.visual.register_forward_pre_hook(
        lambda _m, args, kwargs: encoded.append(int(kwargs["grid_thw"].shape[0])),
        with_kwargs=True,
    )
    return encoded
