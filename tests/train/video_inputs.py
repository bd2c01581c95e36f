"""Video prompts for the model-side video tests (engine, logprob check, packed trainer forward).

Prompts are built by the family's own transformers processor (``processor(text=...,
videos=...)``) on a few small synthetic frames: a noisy gradient with a bright square moving
across it, so every frame and patch differs. Frames are already sampled
(``do_sample_frames=False``) at :data:`FPS` frames per second, given as ``video_metadata``, so
Qwen2.5-VL's ``second_per_grid_ts`` is ``temporal_patch_size / FPS`` = 2.0 (not the 1.0 a
missing value defaults to) and Qwen3-VL's timestamps are written into the text.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

from vlrollout.testing.offline_processors import OFFLINE_BUILDERS
from vlrollout.testing.tiny_families import PROCESSOR_FAMILY, TINY_FAMILIES

FPS = 1.0
FRAME_PX = 64
NOT_VISION = ("input_ids", "attention_mask", "mm_token_type_ids")


NOT_CHECKED = {
    "smolvlm": "its transformers 5.3 processor counts this call's frames as four videos",
}
"""Families with a video processor left out here, and why."""


def _takes_video(family: str) -> bool:
    processor = OFFLINE_BUILDERS[PROCESSOR_FAMILY[family]]()
    return getattr(processor, "video_processor", None) is not None and family not in NOT_CHECKED


VIDEO_FAMILIES = tuple(f for f in TINY_FAMILIES if _takes_video(f))
"""Tiny families whose processor takes videos: as video tensors (Qwen-VL, GLM-4.1V,
LLaVA-OneVision) or as frames written like images (InternVL)."""


IMAGE_BEFORE_VIDEO_MISBUILT = frozenset({"glm4v"})
"""Families whose transformers 5.3 processor builds an image followed by a video wrong:
``Glm4vProcessor`` expands the image with the video's frame tokens (10 image tokens for a 4-token
image, 1 per 4-token frame); the engine refuses such a prompt."""


def frames(seed: int, n: int = 4, px: int = FRAME_PX) -> list[np.ndarray]:
    """``n`` RGB frames (``px`` square, uint8): noise over a gradient, a square moving right."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 200, px)
    out = []
    for i in range(n):
        frame = ramp[None, :, None] * rng.uniform(0.3, 1, 3) + rng.normal(0, 25, (px, px, 3))
        x = i * (px - px // 4) // max(n - 1, 1)
        frame[px // 3 : px // 3 + px // 4, x : x + px // 4] = (250, 30, 30)
        out.append(np.clip(frame, 0, 255).astype(np.uint8))
    return out


def _placeholder(processor: Any, token: str) -> str:
    """``token`` wrapped in the family's vision start/end markers where it has them."""
    vocab = processor.tokenizer.get_vocab()
    if "<|vision_start|>" in vocab:
        return f"<|vision_start|>{token}<|vision_end|>"
    return token


def video_prompt(
    processor: Any, question: str, seed: int = 0, n_frames: int = 4, image: bool = False
) -> dict[str, torch.Tensor]:
    """The processor's output for one user turn: an image (when ``image``), a video of
    ``n_frames`` frames, then ``question``, chat-templated with a generation prompt (the
    placeholders written in the text where the template renders no video part)."""
    parts = [{"type": "image"}] if image else []
    parts += [{"type": "video"}, {"type": "text", "text": question}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": parts}], add_generation_prompt=True, tokenize=False
    )
    if processor.video_token not in text:  # a template without video parts: written here
        marks = _placeholder(processor, processor.video_token)
        if image:
            marks = _placeholder(processor, processor.image_token) + "and" + marks
        messages = [{"role": "user", "content": [{"type": "text", "text": marks + question}]}]
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    kwargs: dict[str, Any] = {
        "do_sample_frames": False,
        "video_metadata": [
            {"fps": FPS, "total_num_frames": n_frames, "frames_indices": list(range(n_frames))}
        ],
    }
    if "shortest_edge" in (processor.video_processor.size or {}):  # Qwen: pixel budgets
        kwargs["size"] = {"shortest_edge": 56 * 56, "longest_edge": FRAME_PX**2 * n_frames}
    pictures = None
    if image:
        rgb = np.random.default_rng(seed + 100).integers(0, 255, (50, 70, 3), dtype=np.uint8)
        pictures = [Image.fromarray(rgb)]
    return processor(
        text=[text],
        images=pictures,
        videos=[frames(seed, n_frames)],
        videos_kwargs=kwargs,
        return_tensors="pt",
    )


def vision_of(prompt: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The image and video tensors of a processor output (what ``multi_modal_input`` holds)."""
    return {k: v for k, v in prompt.items() if k not in NOT_VISION}
