"""Probe items for checking a model family end to end: one image, two images of different sizes,
long text before the image, and an image in a later user turn (positions after a whole earlier
turn). Images are noisy gradients, so every patch differs. Video probes (:data:`VIDEO_ITEMS`) for
families that take video: a clip given as a list of frames (a noisy gradient with a square moving
across it), alone and after an image.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

from vlrollout.families import family_of, rope_grids

LONG_TEXT = " ".join(f"word{i % 17} is number {i}." for i in range(60))


def _photo(seed: int, size: tuple[int, int]) -> Image.Image:
    """A noisy gradient (not a flat colour: every patch differs)."""
    rng = np.random.default_rng(seed)
    w, h = size
    x = np.linspace(0, 255, w)[None, :, None]
    y = np.linspace(0, 255, h)[:, None, None]
    base = (x * rng.uniform(0.2, 1, 3) + y * rng.uniform(0.2, 1, 3)) / 2
    noise = rng.normal(0, 30, (h, w, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def _user(*parts) -> dict:
    return {"role": "user", "content": list(parts)}


IMAGE, TEXT = {"type": "image"}, (lambda t: {"type": "text", "text": t})
ITEMS = {
    "one_image": {
        "messages": [_user(IMAGE, TEXT("What is in the picture?"))],
        "images": [_photo(1, (90, 60))],
    },
    "two_images": {
        "messages": [_user(IMAGE, TEXT("and"), IMAGE, TEXT("Which is brighter?"))],
        "images": [_photo(2, (64, 64)), _photo(3, (120, 50))],
    },
    "text_before_image": {
        "messages": [
            {"role": "system", "content": "You are a careful assistant."},
            _user(TEXT(LONG_TEXT), IMAGE, TEXT("Describe it.")),
        ],
        "images": [_photo(4, (70, 100))],
    },
    "image_in_later_turn": {
        "messages": [
            _user(IMAGE, TEXT("Look at this.")),
            {"role": "assistant", "content": "I see a gradient."},
            _user(TEXT("Now this one:"), IMAGE, TEXT("What changed?")),
        ],
        "images": [_photo(5, (80, 80)), _photo(6, (50, 110))],
    },
}


def _clip(seed: int, n: int = 4, size: tuple[int, int] = (64, 48)) -> list[Image.Image]:
    """``n`` frames: a noisy gradient with a bright square moving from left to right."""
    w, h = size
    out = []
    for i in range(n):
        frame = np.asarray(_photo(seed * 100 + i, size)).copy()
        x = i * (w - w // 4) // max(n - 1, 1)
        frame[h // 3 : h // 3 + h // 4, x : x + w // 4] = (250, 30, 30)
        out.append(Image.fromarray(frame))
    return out


VIDEO = {"type": "video"}
VIDEO_ITEMS = {
    "one_video": {
        "messages": [_user(VIDEO, TEXT("Where does the red square go?"))],
        "videos": [_clip(7)],
    },
    "image_and_video": {
        "messages": [_user(IMAGE, TEXT("and"), VIDEO, TEXT("Same colours?"))],
        "images": [_photo(8, (72, 56))],
        "videos": [_clip(9)],
    },
}


def generate_greedy(model: Any, engine: Any, prepared: Any, max_new_tokens: int) -> list[int]:
    """``model.generate``'s greedy completion of a prepared prompt, fed as the family's own
    forward takes it (images, modality ids), with the engine's banned and stop tokens."""
    inputs = {
        "input_ids": torch.tensor([prepared.input_ids]),
        "attention_mask": torch.ones(1, prepared.prompt_len, dtype=torch.long),
        **prepared.multi_modal_input,
    }
    family = family_of(model.config)
    types_input = family.token_types_input
    if types_input is not None:
        inputs[types_input] = torch.tensor([prepared.mm_token_type_ids])
    if family.positions == "mrope" and prepared.mm_token_type_ids is not None:
        # video grids in the form get_rope_index reads (one row per placeholder run)
        inputs.update(rope_grids(prepared.multi_modal_input, inputs[types_input]))
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            suppress_tokens=sorted(engine.banned_token_ids),
            eos_token_id=sorted(engine.eos_token_ids),
            pad_token_id=engine.tokenizer.pad_token_id,
        )
    return out[0, prepared.prompt_len :].tolist()
