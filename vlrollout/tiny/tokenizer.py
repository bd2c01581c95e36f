"""Build a small byte-level BPE tokenizer and a real Qwen2-VL or Qwen3-VL processor in code.

No hub access is possible (or wanted) at run time, so the tiny model's tokenizer and processor are
built from a corpus and the Qwen2-VL special tokens, then saved next to the weights in ``assets/``.
Tests use the same builders for an offline processor.

Qwen2-VL's special tokens and chat format follow the model's ``tokenizer_config.json`` and chat
template on the hub (Qwen/Qwen2-VL-2B-Instruct): ``<|im_start|>role\\n...<|im_end|>\\n`` and
``<|vision_start|><|image_pad|><|vision_end|>`` for each image (``<|video_pad|>`` for each video).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from vlrollout.tiny.synthetic import task_corpus

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
QWEN2VL_SPECIAL_TOKENS = [
    PAD_TOKEN,
    "<|im_start|>",
    EOS_TOKEN,
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Qwen2-VL's template, reduced to what vlrollout uses: string or list-of-parts content, images as
# <|vision_start|><|image_pad|><|vision_end|>, videos as <|vision_start|><|video_pad|><|vision_end|>
# (the hub template's video branch), a generation prompt. The system prompt is omitted
# unless given, which keeps tiny-model sequences short.
QWEN2VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' or 'image' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or part['type'] == 'video_url' or 'video' in part %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

DEFAULT_CORPUS = [
    "The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 10",
    "What is in the image? How many shapes are there? Where is the red circle?",
    "Answer with a number. Answer with a box. Describe the image in one sentence.",
    "Your answer is either wrong or not parsable to the reward function. Please try again.",
    '{"bbox_2d": [12, 34, 56, 78], "label": "square"} (1,2),(3,4) [x1, y1, x2, y2]',
    # The synthetic tasks' prompts, colours, shapes and caption phrases (vlrollout.tiny.synthetic),
    # so the tiny model's sequences are a few tokens per word.
    *task_corpus(),
]


def build_bpe_tokenizer(
    corpus: Iterable[str] = DEFAULT_CORPUS,
    vocab_size: int = 600,
    special_tokens: list[str] = QWEN2VL_SPECIAL_TOKENS,
    chat_template: str = QWEN2VL_CHAT_TEMPLATE,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``corpus`` with Qwen2-VL's special tokens.

    Byte-level BPE round-trips any text exactly (decode(encode(s)) == s), which multi-turn
    packing relies on. Training is deterministic for a fixed corpus. Digits are split into single
    tokens before BPE, as Qwen2's tokenizer does (its pre-tokenizer regex matches ``\\p{N}`` one digit
    at a time; Qwen/Qwen2-VL-2B-Instruct ``tokenizer.json``), so every 0–1000 box coordinate is
    spelled the same way.

    >>> tok = build_bpe_tokenizer()
    >>> tok.decode(tok.encode("How many shapes?"))
    'How many shapes?'
    """
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(corpus), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[t for t in special_tokens if t not in (EOS_TOKEN, PAD_TOKEN)],
        chat_template=chat_template,
        clean_up_tokenization_spaces=False,
    )
    return tokenizer


def build_qwen2vl_processor(
    tokenizer: PreTrainedTokenizerFast,
    min_pixels: int = 56 * 56,
    max_pixels: int = 112 * 112,
    patch_size: int = 14,
    merge_size: int = 2,
) -> Qwen2VLProcessor:
    """A real ``Qwen2VLProcessor`` around ``tokenizer``, with the slow image processor class.

    A saved processor loads as the fast class (transformers' default), so the shipped assets
    name that type, and loading them raises no warning.

    Defaults are the tiny model's: at most 112×112 pixels, i.e. at most 16 merged image tokens.
    """
    image_processor = Qwen2VLImageProcessor(
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch_size=2,
    )
    return Qwen2VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=tokenizer.chat_template,
    )


def build_qwen3vl_processor(
    tokenizer: PreTrainedTokenizerFast, min_pixels: int = 56 * 56, max_pixels: int = 112 * 112
) -> Qwen3VLProcessor:
    """A real ``Qwen3VLProcessor`` around ``tokenizer``, with the tiny Qwen2-VL model's image grid.

    Qwen3-VL checkpoints use patch 16; the tiny one keeps patch 14 and merge 2 (28-pixel merged
    tokens) so each synthetic image still gets one merged token per grid cell
    (``vlrollout.tiny.synthetic.IMAGE_GRIDS``).
    """
    image_processor = Qwen2VLImageProcessor(
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(patch_size=14),
        chat_template=tokenizer.chat_template,
    )
