"""The model shapes of the scaling benchmark: random weights in real transformers configurations.

Five shapes, small to large, each saved once (model + processor) to a folder that ``vlrollout
run/train/serve --model`` and ``LocalInferenceEngine.from_pretrained`` take:

- ``tiny``: the shipped model (``assets/tiny-qwen2vl``, 2.45 M parameters);
- ``20m`` and ``100m``: ``Qwen2VLForConditionalGeneration`` with wider and deeper decoders and
  vision towers (head dim 64, M-RoPE sections [8, 12, 12]);
- ``smolvlm-256m``: ``Idefics3ForConditionalGeneration`` with HuggingFaceTB/SmolVLM-256M-Instruct's
  ``config.json`` values (Llama decoder 576 wide, 30 layers, 9 heads, 3 KV heads, vocabulary
  49,280; SigLIP tower 768 wide, 12 layers, patch 16 on 512-pixel tiles; pixel shuffle 4, so 64
  tokens a tile);
- ``qwen2vl-2b``: Qwen/Qwen2-VL-2B-Instruct's ``config.json`` values (decoder 1536 wide, 28 layers,
  12 heads, 2 KV heads, vocabulary 151,936, tied embeddings; ViT depth 32, 1280 wide, 16 heads),
  in bfloat16.

The tokenizers are the tiny offline BPE ones (:mod:`vlrollout.testing.offline_processors`), so
token ids are small but every placeholder, chat template and image processor is the family's
real class. A folder is keyed by a digest of its config and processor settings, so a changed
shape builds a new folder and an unchanged one is reused (building the 2B shape takes minutes).

    >>> SHAPES[0].name, [s.name for s in SHAPES][-1]
    ('tiny', 'qwen2vl-2b')
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from images import SUBJECTS, subject_photo
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "assets" / "tiny-qwen2vl"
DEFAULT_CACHE = Path("/tmp/vlrollout-scaling-models")
QWEN_FACTOR = 28
"""Pixels per merged Qwen2-VL image token along one side (patch 14 × merge 2)."""
QWEN_MAX_TOKENS = 4096
IDEFICS3_TILE, IDEFICS3_TOKENS_PER_TILE = 512, 64
TINY_CONTEXT = 8192
"""Positions the tiny shape's config holds: its longest prompt (4,096 image tokens) and more."""


@dataclass(frozen=True)
class Shape:
    """One model shape.

    Attributes:
        name: ``"tiny"``, ``"20m"``, ``"100m"``, ``"smolvlm-256m"``, ``"qwen2vl-2b"``.
        family: The vlrollout family name (``"qwen2_vl"``, ``"idefics3"``).
        dtype: ``"float32"`` or ``"bfloat16"``.
        trainable: Whether the trainer points run it on this CPU.
        lora: Train it with LoRA (full training does not fit in 24 GiB).
        text: Text sub-config overrides (Qwen2-VL shapes) or the whole text config (Idefics3).
        vision: Vision sub-config likewise.
        extra: Top-level config fields.
    """

    name: str
    family: str
    dtype: str
    trainable: bool
    lora: bool
    text: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    vision: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


_ROPE64 = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [8, 12, 12]}

SHAPES: tuple[Shape, ...] = (
    Shape("tiny", "qwen2_vl", "float32", trainable=True, lora=False),
    Shape(
        "20m",
        "qwen2_vl",
        "float32",
        trainable=True,
        lora=False,
        text={
            "hidden_size": 384,
            "intermediate_size": 1536,
            "num_hidden_layers": 6,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rope_parameters": _ROPE64,
        },
        vision={"depth": 4, "embed_dim": 384, "num_heads": 6, "mlp_ratio": 4},
    ),
    Shape(
        "100m",
        "qwen2_vl",
        "float32",
        trainable=True,
        lora=False,
        text={
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 8,
            "num_attention_heads": 12,
            "num_key_value_heads": 4,
            "max_position_embeddings": 32768,
            "rope_parameters": _ROPE64,
        },
        vision={"depth": 8, "embed_dim": 512, "num_heads": 8, "mlp_ratio": 4},
    ),
    Shape(
        "smolvlm-256m",
        "idefics3",
        "float32",
        trainable=True,
        lora=True,
        text={
            "model_type": "llama",
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "head_dim": 64,
            "max_position_embeddings": 8192,
            "rope_theta": 100_000.0,
            "rms_norm_eps": 1e-5,
            "vocab_size": 49280,
        },
        vision={
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "image_size": IDEFICS3_TILE,
            "patch_size": 16,
        },
        extra={"scale_factor": 4},
    ),
    Shape(
        "qwen2vl-2b",
        "qwen2_vl",
        "bfloat16",
        trainable=False,
        lora=True,
        text={
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "vocab_size": 151936,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1_000_000.0,
                "mrope_section": [16, 24, 24],
            },
        },
        vision={"depth": 32, "embed_dim": 1280, "num_heads": 16, "mlp_ratio": 4},
        extra={"tie_word_embeddings": True},
    ),
)
BY_NAME = {s.name: s for s in SHAPES}


def shape(name: str) -> Shape:
    """The shape called ``name``; the error lists the known ones."""
    if name not in BY_NAME:
        raise ValueError(f"unknown shape {name!r}; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]


# -- processors and configs ---------------------------------------------------------------------


def idefics3_longest_edge(tokens: int) -> int:
    """The resize edge giving about ``tokens`` image tokens: an n×n grid of 512-pixel tiles
    plus the global image is 64·(n² + 1) tokens (one tile, no split: 64)."""
    n = max(1, round(math.sqrt(max(tokens / IDEFICS3_TOKENS_PER_TILE - 1, 1))))
    return IDEFICS3_TILE * n


def build_processor(s: Shape):
    """The shape's processor: Qwen2-VL with pixel budgets from 64 to 4,096 image tokens, or
    Idefics3 on 512-pixel tiles resized to a 1,024-pixel edge (320 tokens a square image)."""
    from vlrollout.testing.offline_processors import build_idefics3, build_qwen2_vl

    if s.family == "qwen2_vl":
        return build_qwen2_vl(
            min_pixels=16 * QWEN_FACTOR**2, max_pixels=QWEN_MAX_TOKENS * QWEN_FACTOR**2
        )
    return build_idefics3(
        tile=IDEFICS3_TILE,
        longest_edge=idefics3_longest_edge(320),
        image_seq_len=IDEFICS3_TOKENS_PER_TILE,
    )


def build_config(s: Shape, processor: Any):
    """The transformers config of ``s`` (its token ids read from ``processor``'s tokenizer)."""
    if s.family == "qwen2_vl":
        from vlrollout.tiny.model import tiny_qwen2vl_config

        text = {k: v for k, v in s.text.items() if k != "vocab_size"}
        config = tiny_qwen2vl_config(processor.tokenizer, text=text, vision=s.vision)
        if "vocab_size" in s.text:
            config.text_config.vocab_size = s.text["vocab_size"]
        for key, value in s.extra.items():
            setattr(config, key, value)
            setattr(config.text_config, key, value)
        return config
    from transformers import Idefics3Config

    tok = processor.tokenizer
    pad = tok.convert_tokens_to_ids(tok.pad_token)
    eos = tok.convert_tokens_to_ids(tok.eos_token)
    text = {**s.text, "pad_token_id": pad, "bos_token_id": pad, "eos_token_id": eos}
    return Idefics3Config(
        text_config=text,
        vision_config=s.vision,
        image_token_id=tok.convert_tokens_to_ids(processor.image_token),
        pad_token_id=pad,
        tie_word_embeddings=False,
        **s.extra,
    )


def cache_key(s: Shape) -> str:
    """A digest of everything that decides the saved folder's contents."""
    spec = {"shape": [s.name, s.family, s.dtype], "text": s.text, "vision": s.vision}
    spec["extra"] = s.extra
    if s.name == "tiny":
        spec["weights"] = (TINY / "model.safetensors").stat().st_size
        spec["context"] = TINY_CONTEXT
    raw = json.dumps(spec, sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:12]


def build_model(s: Shape, root: Path = DEFAULT_CACHE) -> Path:
    """Save ``s`` (model + processor) under ``root`` once and return its folder.

    ``tiny`` is the shipped model's weights with a processor whose pixel budget reaches 4,096
    image tokens and a context of ``TINY_CONTEXT`` positions (the shipped 512 would stop the
    engine and the server before its longer prompts; M-RoPE has no learned positions, so the
    weights are unchanged); the others are random initialisations (seed 0) in their dtype.
    """
    import torch

    folder = root / f"{s.name}-{cache_key(s)}"
    if (folder / "done").is_file():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    processor = build_processor(s)
    if s.name == "tiny":
        for name in ("generation_config.json", "model.safetensors"):
            shutil.copy2(TINY / name, tmp / name)
        config = json.loads((TINY / "config.json").read_text())
        config["text_config"]["max_position_embeddings"] = TINY_CONTEXT
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    else:
        from transformers import AutoModelForImageTextToText

        torch.manual_seed(0)
        config = build_config(s, processor)
        model = AutoModelForImageTextToText.from_config(config, dtype=getattr(torch, s.dtype))
        model.save_pretrained(tmp)
        del model
    processor.save_pretrained(tmp)
    (tmp / "done").write_text(cache_key(s) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def parameter_count(folder: Path) -> int:
    """Parameters stored in ``folder``'s safetensors files (read from their headers)."""
    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        for name, info in header.items():
            if name != "__metadata__":
                total += math.prod(info["shape"])
    return total


# -- images ---------------------------------------------------------------------------------------


def image_size_for_tokens(s: Shape, tokens: int) -> tuple[int, int]:
    """Width and height of an image whose prompt holds ``tokens`` image tokens (Qwen2-VL: a
    grid of a×b merged tokens with a·b = ``tokens``, 28 pixels each; Idefics3: a square the
    processor resizes to its edge, the token count then set by :func:`idefics3_longest_edge`)."""
    if s.family == "qwen2_vl":
        a = max(d for d in range(1, math.isqrt(tokens) + 1) if tokens % d == 0)
        return QWEN_FACTOR * (tokens // a), QWEN_FACTOR * a
    edge = idefics3_longest_edge(tokens)
    return edge, edge


def image_for_tokens(s: Shape, tokens: int, seed: int) -> Image.Image:
    """An RGB picture (a subject drawn in code, varied by ``seed``) whose prompt holds about
    ``tokens`` image tokens for ``s``'s processor."""
    width, height = image_size_for_tokens(s, tokens)
    return subject_photo(SUBJECTS[seed % len(SUBJECTS)], width, height, seed=seed)


def processor_kwargs(s: Shape, tokens: int) -> dict[str, Any]:
    """Keyword arguments for the processor call that give ``tokens`` image tokens: none for
    Qwen2-VL (the image size decides), the resize edge for Idefics3."""
    if s.family == "qwen2_vl":
        return {}
    return {"images_kwargs": {"size": {"longest_edge": idefics3_longest_edge(tokens)}}}
