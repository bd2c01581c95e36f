"""Build real transformers processors for each supported family entirely in code (no hub).

Each builder trains the tiny byte-level BPE tokenizer from :mod:`vlrollout.tiny.tokenizer` with the
family's special tokens and wraps it, with a small image processor, in the family's *real*
``ProcessorMixin`` class. Sizes are tiny so tests run in milliseconds on a CPU; the processing code
paths (resize, placeholder expansion, ``mm_token_type_ids``) are the same as for the full models.

Chat templates are reduced versions of each model's hub template (cited per builder): same role
markers and image placeholder, no default system prompt.

>>> from vlrollout.testing.offline_processors import build_offline_processor
>>> proc = build_offline_processor("qwen2_vl")
>>> type(proc).__name__
'Qwen2VLProcessor'
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from vlrollout.tiny.tokenizer import (
    EOS_TOKEN,
    PAD_TOKEN,
    QWEN2VL_CHAT_TEMPLATE,
    QWEN2VL_SPECIAL_TOKENS,
    build_bpe_tokenizer,
    build_qwen2vl_processor,
)

# LLaVA-1.5 (llava-hf/llava-1.5-7b-hf chat_template.json): "USER: <image>\n... ASSISTANT:".
LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}USER: {% elif message['role'] == 'assistant' %}ASSISTANT: "
    "{% else %}{{ message['role'] | upper }}: {% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>\n{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %} "
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)

# LLaVA-OneVision (llava-hf/llava-onevision-qwen2-0.5b-ov-hf): Qwen2 chat markup, "<image>\n" and
# "<video>\n" parts.
LLAVA_OV_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>\n{% elif part['type'] == 'video' %}<video>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Gemma 3 (google/gemma-3-4b-it tokenizer_config.json): "<start_of_turn>user\n...<end_of_turn>\n",
# assistant role is "model", images are "<start_of_image>" (the processor expands it).
GEMMA3_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<start_of_image>{% elif part['type'] == 'text' %}"
    "{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

# Idefics3 (HuggingFaceM4/Idefics3-8B-Llama3 chat_template.json): "User:<image>...<end_of_utterance>\n".
IDEFICS3_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}:"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


# InternVL3 (OpenGVLab/InternVL3-1B-hf chat_template.json): Qwen2 chat markup; an image part is
# "<IMG_CONTEXT>\n", a video part "<video>\n" (the processor expands both).
INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<IMG_CONTEXT>\n{% elif part['type'] == 'video' %}<video>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# GLM-4.1V (zai-org/GLM-4.1V-9B-Thinking chat_template.jinja): "[gMASK]<sop>", then
# "<|role|>\n" before each turn; images "<|begin_of_image|><|image|><|end_of_image|>", videos
# "<|begin_of_video|><|video|><|end_of_video|>" (the processor expands <|image|>/<|video|>).
GLM4V_CHAT_TEMPLATE = (
    "[gMASK]<sop>{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif part['type'] == 'video' %}<|begin_of_video|><|video|><|end_of_video|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# Mistral Small 3.1 (mistralai/Mistral-Small-3.1-24B-Instruct-2503 chat_template.json):
# "[INST]...[/INST]" around user turns, images "[IMG]" (PixtralProcessor expands them into rows
# of [IMG] ended by [IMG_BREAK], the last by [IMG_END]), assistant turns end with "</s>".
MISTRAL3_CHAT_TEMPLATE = (
    "<s>{% for message in messages %}"
    "{% if message['role'] == 'system' %}[SYSTEM_PROMPT]{{ message['content'] }}[/SYSTEM_PROMPT]"
    "{% elif message['role'] == 'user' %}[INST]"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}[IMG]{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}[/INST]"
    "{% else %}{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}"
    "{{ part['text'] }}{% endif %}{% endfor %}{% endif %}</s>{% endif %}{% endfor %}"
)

# LFM2-VL (LiquidAI/LFM2-VL-450M chat_template.jinja): ChatML markup, images "<image>" (the
# processor expands each into <|image_start|>, tiles and thumbnail, <|image_end|>).
LFM2_VL_CHAT_TEMPLATE = LLAVA_OV_CHAT_TEMPLATE


def _tokenizer(extra_special: list[str], chat_template: str, **extra_attrs: str):
    """The tiny BPE tokenizer with ``extra_special`` tokens; ``extra_attrs`` become attributes.

    transformers 5 exposes ``extra_special_tokens={"image_token": "<x>"}`` as ``tok.image_token`` and
    ``tok.image_token_id``, which is what Gemma 3's processor reads.
    """
    from transformers import PreTrainedTokenizerFast

    specials = list(QWEN2VL_SPECIAL_TOKENS) + [
        t for t in extra_special if t not in QWEN2VL_SPECIAL_TOKENS
    ]
    tok = build_bpe_tokenizer(special_tokens=specials, chat_template=chat_template)
    if not extra_attrs:
        return tok
    return PreTrainedTokenizerFast(
        tokenizer_object=tok.backend_tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        extra_special_tokens=dict(extra_attrs),
        chat_template=chat_template,
        clean_up_tokenization_spaces=False,
    )


def build_qwen2_vl(min_pixels: int = 56 * 56, max_pixels: int = 112 * 112):
    """Qwen2-VL (patch 14, merge 2): the tiny model's processor from :mod:`vlrollout.tiny`."""
    return build_qwen2vl_processor(
        build_bpe_tokenizer(), min_pixels=min_pixels, max_pixels=max_pixels
    )


def build_qwen2_5_vl(min_pixels: int = 56 * 56, max_pixels: int = 112 * 112):
    """Qwen2.5-VL: same image processor as Qwen2-VL (patch 14), ``Qwen2_5_VLProcessor``."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    tok = _tokenizer([], QWEN2VL_CHAT_TEMPLATE)
    ip = Qwen2VLImageProcessor(min_pixels=min_pixels, max_pixels=max_pixels, patch_size=14)
    return Qwen2_5_VLProcessor(
        image_processor=ip,
        tokenizer=tok,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=QWEN2VL_CHAT_TEMPLATE,
    )


def build_qwen3_vl(min_pixels: int = 64 * 64, max_pixels: int = 128 * 128):
    """Qwen3-VL: patch 16, merge 2 (factor 32) per Qwen/Qwen3-VL-2B-Instruct preprocessor_config."""
    from transformers import Qwen2VLImageProcessorFast, Qwen3VLProcessor, Qwen3VLVideoProcessor

    tok = _tokenizer([], QWEN2VL_CHAT_TEMPLATE)
    ip = Qwen2VLImageProcessorFast(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        patch_size=16,
        merge_size=2,
        temporal_patch_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    vp = Qwen3VLVideoProcessor(patch_size=16)
    return Qwen3VLProcessor(
        image_processor=ip, tokenizer=tok, video_processor=vp, chat_template=QWEN2VL_CHAT_TEMPLATE
    )


def build_llava(image_size: int = 28, patch_size: int = 14):
    """LLaVA-1.5: CLIP resize + centre crop to ``image_size``; (size/patch)^2 tokens per image."""
    from transformers import CLIPImageProcessor, LlavaProcessor

    tok = _tokenizer(["<image>"], LLAVA_CHAT_TEMPLATE)
    ip = CLIPImageProcessor(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    return LlavaProcessor(
        image_processor=ip,
        tokenizer=tok,
        patch_size=patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's CLS token, dropped by the "default" strategy
        chat_template=LLAVA_CHAT_TEMPLATE,
    )


def build_llava_onevision(tile: int = 28, patch_size: int = 14):
    """LLaVA-OneVision: anyres tiling over a small grid of pinpoints (multiples of ``tile``)."""
    from transformers import (
        LlavaOnevisionImageProcessor,
        LlavaOnevisionProcessor,
        LlavaOnevisionVideoProcessor,
    )

    tok = _tokenizer(["<image>", "<video>"], LLAVA_OV_CHAT_TEMPLATE)
    pinpoints = [[tile * i, tile * j] for i in (1, 2) for j in (1, 2)]
    ip = LlavaOnevisionImageProcessor(
        size={"height": tile, "width": tile}, image_grid_pinpoints=pinpoints
    )
    return LlavaOnevisionProcessor(
        image_processor=ip,
        tokenizer=tok,
        video_processor=LlavaOnevisionVideoProcessor(size={"height": tile, "width": tile}),
        num_image_tokens=(tile // patch_size) ** 2,
        vision_feature_select_strategy="full",
        chat_template=LLAVA_OV_CHAT_TEMPLATE,
        vision_aspect_ratio="anyres_max_9",
    )


def build_gemma3(image_size: int = 56, image_seq_length: int = 4):
    """Gemma 3: fixed square resize; ``<start_of_image>`` expands to ``image_seq_length`` soft tokens.

    Gemma3Processor reads ``image_token``, ``image_token_id``, ``boi_token`` and ``eoi_token`` from
    the tokenizer, so they are set as ``extra_special_tokens``.
    """
    from transformers import Gemma3ImageProcessor, Gemma3Processor

    specials = [
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
        "<start_of_turn>",
        "<end_of_turn>",
    ]
    tok = _tokenizer(
        specials,
        GEMMA3_CHAT_TEMPLATE,
        image_token="<image_soft_token>",
        boi_token="<start_of_image>",
        eoi_token="<end_of_image>",
    )
    ip = Gemma3ImageProcessor(size={"height": image_size, "width": image_size})
    return Gemma3Processor(
        image_processor=ip,
        tokenizer=tok,
        image_seq_length=image_seq_length,
        chat_template=GEMMA3_CHAT_TEMPLATE,
    )


def build_idefics3(tile: int = 28, longest_edge: int = 56, image_seq_len: int = 4):
    """Idefics3: resize to ``longest_edge``, split into ``tile``² crops plus one global image."""
    from transformers import Idefics3ImageProcessor, Idefics3Processor

    specials = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
    specials += [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tok = _tokenizer(specials, IDEFICS3_CHAT_TEMPLATE)
    ip = Idefics3ImageProcessor(
        size={"longest_edge": longest_edge}, max_image_size={"longest_edge": tile}
    )
    return Idefics3Processor(
        image_processor=ip,
        tokenizer=tok,
        image_seq_len=image_seq_len,
        chat_template=IDEFICS3_CHAT_TEMPLATE,
    )


def build_smolvlm(tile: int = 28, longest_edge: int = 56, image_seq_len: int = 4):
    """SmolVLM: Idefics3-style tiling. Its processor imports ``num2words`` at construction."""
    from transformers import SmolVLMImageProcessor, SmolVLMProcessor, SmolVLMVideoProcessor

    specials = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
    specials += [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tok = _tokenizer(specials, IDEFICS3_CHAT_TEMPLATE)
    ip = SmolVLMImageProcessor(
        size={"longest_edge": longest_edge}, max_image_size={"longest_edge": tile}
    )
    return SmolVLMProcessor(
        image_processor=ip,
        tokenizer=tok,
        video_processor=SmolVLMVideoProcessor(),
        image_seq_len=image_seq_len,
        chat_template=IDEFICS3_CHAT_TEMPLATE,
    )


def build_internvl(tile: int = 56, max_patches: int = 4, image_seq_length: int = 4):
    """InternVL 3 / 3.5: ``GotOcr2ImageProcessor`` crops each image to up to ``max_patches``
    ``tile``² tiles (the grid whose aspect is nearest the image's) plus a thumbnail tile; every tile
    is ``image_seq_length`` ``<IMG_CONTEXT>`` tokens between ``<img>`` and ``</img>``. The video
    processor resizes frames to one tile. Tokens per tile = (tile/patch)² × scale_factor² of
    the model, so ``image_seq_length`` 4 is a 4×4-patch tile pixel-shuffled by 0.5."""
    from transformers import GotOcr2ImageProcessor, InternVLProcessor, InternVLVideoProcessor

    tok = _tokenizer(
        ["<img>", "</img>", "<IMG_CONTEXT>", "<video>"],
        INTERNVL_CHAT_TEMPLATE,
        start_image_token="<img>",
        end_image_token="</img>",
        context_image_token="<IMG_CONTEXT>",
        video_token="<video>",
    )
    ip = GotOcr2ImageProcessor(
        size={"height": tile, "width": tile},
        crop_to_patches=True,
        min_patches=1,
        max_patches=max_patches,
        image_mean=[0.485, 0.456, 0.406],
        image_std=[0.229, 0.224, 0.225],
    )
    vp = InternVLVideoProcessor(size={"height": tile, "width": tile})
    return InternVLProcessor(
        image_processor=ip,
        tokenizer=tok,
        video_processor=vp,
        image_seq_length=image_seq_length,
        chat_template=INTERNVL_CHAT_TEMPLATE,
    )


def build_glm4v(
    min_pixels: int = 56 * 56, max_pixels: int = 112 * 112, processor_class: str = "Glm4vProcessor"
):
    """GLM-4.1V: Qwen2-VL-style ``smart_resize`` (patch 14, merge 2, temporal patch 2) whose pixel
    bounds count both temporal copies of an image (``size`` = 2 × the image's pixel bounds).
    ``processor_class`` ``"Glm46VProcessor"`` gives GLM-4.6V's (the same image and video
    processors and template; zai-org/GLM-4.6V ships them)."""
    import transformers
    from transformers import Glm4vImageProcessor, Glm4vVideoProcessor

    specials = ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|image|>"]
    specials += ["<|video|>", "<|begin_of_image|>", "<|end_of_image|>"]
    specials += ["<|begin_of_video|>", "<|end_of_video|>"]
    tok = _tokenizer(specials, GLM4V_CHAT_TEMPLATE)
    size = {"shortest_edge": 2 * min_pixels, "longest_edge": 2 * max_pixels}
    ip = Glm4vImageProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2)
    vp = Glm4vVideoProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2)
    return getattr(transformers, processor_class)(
        image_processor=ip, tokenizer=tok, video_processor=vp, chat_template=GLM4V_CHAT_TEMPLATE
    )


def build_glm46v(min_pixels: int = 56 * 56, max_pixels: int = 112 * 112):
    """GLM-4.6V: :func:`build_glm4v` as ``Glm46VProcessor``."""
    return build_glm4v(min_pixels, max_pixels, processor_class="Glm46VProcessor")


def build_mistral3(longest_edge: int = 112, patch_size: int = 14, spatial_merge_size: int = 2):
    """Mistral 3 (Pixtral vision): resize so the longest edge fits ``longest_edge``, then round
    each side up to a multiple of patch × merge; one ``[IMG]`` per merged patch, a row break
    ``[IMG_BREAK]`` after each row, ``[IMG_END]`` in place of the last break."""
    from transformers import PixtralImageProcessor, PixtralProcessor

    specials = ["<s>", "</s>", "[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]
    specials += ["[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"]
    tok = _tokenizer(specials, MISTRAL3_CHAT_TEMPLATE)
    # The processor resizes with patch × merge (it passes that patch_size to the image processor);
    # the image processor is saved with the same value so that calling it alone (as the SGLang
    # /generate endpoint does) gives the same sizes. Mistral's checkpoints save the ViT patch (14).
    merged = patch_size * spatial_merge_size
    ip = PixtralImageProcessor(
        size={"longest_edge": longest_edge}, patch_size={"height": merged, "width": merged}
    )
    return PixtralProcessor(
        image_processor=ip,
        tokenizer=tok,
        patch_size=patch_size,
        spatial_merge_size=spatial_merge_size,
        chat_template=MISTRAL3_CHAT_TEMPLATE,
    )


def build_lfm2_vl(tile: int = 64, min_image_tokens: int = 4, max_image_tokens: int = 16):
    """LFM2-VL: ``smart_resize`` to multiples of 32 (SigLIP2 patch 16, pixel unshuffle 2) within
    ``min/max_image_tokens``; an image over twice the token budget is split into ``tile``² tiles
    (2 to 4) plus a thumbnail at the smart-resized size."""
    from transformers import Lfm2VlImageProcessorFast, Lfm2VlProcessor

    specials = ["<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"]
    specials += [f"<|img_row_{r}_col_{c}|>" for r in range(1, 5) for c in range(1, 5)]
    tok = _tokenizer(specials, LFM2_VL_CHAT_TEMPLATE)
    ip = Lfm2VlImageProcessorFast(
        tile_size=tile,
        encoder_patch_size=16,
        downsample_factor=2,
        min_image_tokens=min_image_tokens,
        max_image_tokens=max_image_tokens,
        min_tiles=2,
        max_tiles=4,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    return Lfm2VlProcessor(image_processor=ip, tokenizer=tok, chat_template=LFM2_VL_CHAT_TEMPLATE)


OFFLINE_BUILDERS: dict[str, Callable[..., Any]] = {
    "qwen2_vl": build_qwen2_vl,
    "qwen2_5_vl": build_qwen2_5_vl,
    "qwen3_vl": build_qwen3_vl,
    "llava": build_llava,
    "llava_onevision": build_llava_onevision,
    "gemma3": build_gemma3,
    "idefics3": build_idefics3,
    "smolvlm": build_smolvlm,
    "internvl": build_internvl,
    "glm4v": build_glm4v,
    "glm46v": build_glm46v,
    "mistral3": build_mistral3,
    "lfm2_vl": build_lfm2_vl,
}


SHARED_PROCESSORS: dict[str, str] = {"qwen3_5": "qwen3_vl", "qwen3_vl_moe": "qwen3_vl"}
"""Families without a processor of their own, and the ``OFFLINE_BUILDERS`` entry whose processor
their checkpoints ship (transformers' ``AutoProcessor`` maps Qwen3.5 and Qwen3-VL-MoE to
``Qwen3VLProcessor``)."""


def build_offline_processor(family: str):
    """A cached default-sized offline processor for ``family`` (a key of ``OFFLINE_BUILDERS`` or
    of :data:`SHARED_PROCESSORS`, which shares that family's instance).

    The result is shared between callers: do not mutate it. Call the ``build_*`` function directly
    for a private instance or other sizes.
    """
    return _build_cached(SHARED_PROCESSORS.get(family, family))


@cache
def _build_cached(family: str):
    try:
        builder = OFFLINE_BUILDERS[family]
    except KeyError:
        known = sorted({*OFFLINE_BUILDERS, *SHARED_PROCESSORS})
        raise ValueError(f"no offline builder for family {family!r}; known: {known}") from None
    return builder()
