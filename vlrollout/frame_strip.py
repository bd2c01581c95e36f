"""One picture of a video for the reports: sampled frames side by side."""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image

GAP = 2
"""White pixels between two frames."""


def strip_image(frames: Sequence[Image.Image], height: int, most: int) -> Image.Image:
    """Up to ``most`` of ``frames`` (evenly spaced, first and last kept) side by side, each
    resized to ``height`` pixels high with its aspect ratio, :data:`GAP` pixels apart.

    >>> red, blue = Image.new("RGB", (4, 2), "red"), Image.new("RGB", (4, 2), "blue")
    >>> strip_image([red, blue, red], height=2, most=8).size
    (16, 2)
    """
    if not frames:
        raise ValueError("a frame strip needs at least one frame")
    step = max(1, -(-len(frames) // most))
    shown = list(frames[::step])
    if shown[-1] is not frames[-1] and len(shown) < most:
        shown.append(frames[-1])
    thumbs = [
        f.convert("RGB").resize((max(1, round(f.width * height / f.height)), height)) for f in shown
    ]
    strip = Image.new(
        "RGB", (sum(t.width for t in thumbs) + GAP * (len(thumbs) - 1), height), "white"
    )
    x = 0
    for t in thumbs:
        strip.paste(t, (x, 0))
        x += t.width + GAP
    return strip
