"""Check the processor's placeholder expansion against its own grids.

A processor expands each image and video placeholder into ``prod(grid) // merge_size**2``
tokens. Where it also returns per-token modality ids (0 text, 1 image, 2 video) and grids
(Qwen-VL, GLM-4.1V), the two must agree per modality; transformers 5.3's ``Glm4vProcessor`` does
not when an image comes before a video (the video's per-frame image tokens land in the image's
place), and a model fed such a prompt reads the wrong pixels at the wrong positions.
"""

from __future__ import annotations

from typing import Any

from .errors import PreprocessError

MODALITIES = (("image", 1, "image_grid_thw"), ("video", 2, "video_grid_thw"))
"""``(name, modality id, grid key)`` of each placeholder kind."""


def check_expansion(outputs: dict[str, Any], mm_type_key: str, merge_size: int, item: str) -> None:
    """Raise ``PreprocessError(item, "placeholder_mismatch")`` unless each modality's tokens
    (by ``outputs[mm_type_key]``) number what its grid implies; nothing to check without
    modality ids or grids.

    >>> import torch
    >>> out = {"image_grid_thw": torch.tensor([[1, 2, 2]]), "mm": torch.tensor([[0, 1, 0]])}
    >>> check_expansion(out, "mm", 2, "item 0")
    """
    types = outputs.get(mm_type_key)
    if types is None:
        return
    for name, value, grid_key in MODALITIES:
        grid = outputs.get(grid_key)
        if grid is None:
            continue
        expected = int(grid.prod(-1).sum()) // merge_size**2
        found = int((types == value).sum())
        if found != expected:
            raise PreprocessError(
                item,
                "placeholder_mismatch",
                f"the processor expanded {found} {name} "
                f"placeholder tokens where {grid_key} implies {expected}: it builds this order "
                "of images and videos wrong",
            )
