"""Probe items for checking a model family end to end: one image, two images of different sizes,
long text before the image, and an image in a later user turn (positions after a whole earlier
turn). Images are noisy gradients, so every patch differs.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

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
