"""Turning the trainer's image tensors back into pictures, so the report shows what the model saw.

Only Qwen-VL-style ``pixel_values`` (``[patches, C * T * P * P]`` with ``image_grid_thw``) and
``pixel_values_videos`` (the same layout, with ``video_grid_thw``) are inverted; other families
fall back to the item's own images in the report and show no frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from PIL import Image


def unpatchify_qwen(
    pixel_values: torch.Tensor,
    grid_thw: torch.Tensor,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
    image_mean: list[float],
    image_std: list[float],
    all_frames: bool = False,
) -> list[Image.Image] | list[list[Image.Image]]:
    """Invert ``Qwen2VLImageProcessor``'s flattening and normalisation, one image per grid row
    (with ``all_frames``: every frame of each row, the ``t * T`` frames of a video).

    The processor views each image as ``(t, T, C, h/m, m, P, w/m, m, P)`` and permutes it to
    ``(t, h/m, w/m, m, m, C, T, P, P)`` before flattening (transformers'
    ``image_processing_qwen2_vl_fast.py``; ``video_processing_qwen2_vl.py`` flattens videos the
    same way); this applies the inverse permutation and takes the first temporal frame.
    """
    images: list = []
    offset = 0
    mean = torch.tensor(image_mean).view(3, 1, 1)
    std = torch.tensor(image_std).view(3, 1, 1)
    for t, h, w in grid_thw.tolist():
        n = t * h * w
        flat = pixel_values[offset : offset + n].float()
        offset += n
        m, p = merge_size, patch_size
        v = flat.view(t, h // m, w // m, m, m, 3, temporal_patch_size, p, p)
        v = v.permute(0, 6, 5, 1, 3, 7, 2, 4, 8).reshape(t * temporal_patch_size, 3, h * p, w * p)
        frames = [_picture(f, mean, std) for f in (v if all_frames else v[:1])]
        images.append(frames if all_frames else frames[0])
    return images


def _picture(frame: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> Image.Image:
    """One ``[3, H, W]`` normalised frame as an RGB picture."""
    pixels = (frame * std + mean).clamp(0, 1)
    return Image.fromarray((pixels * 255).round().to(torch.uint8).permute(1, 2, 0).numpy())


def images_seen_by_model(
    multi_modal_input: Mapping[str, torch.Tensor], processor: Any
) -> list[Image.Image]:
    """Every image of one trajectory row as the model saw it, or ``[]`` if the family is not known."""
    ip = getattr(processor, "image_processor", None)
    if (
        ip is None
        or "image_grid_thw" not in multi_modal_input
        or "pixel_values" not in multi_modal_input
    ):
        return []
    return unpatchify_qwen(
        multi_modal_input["pixel_values"],
        multi_modal_input["image_grid_thw"],
        ip.patch_size,
        ip.merge_size,
        ip.temporal_patch_size,
        list(ip.image_mean),
        list(ip.image_std),
    )


def videos_seen_by_model(
    multi_modal_input: Mapping[str, torch.Tensor], processor: Any
) -> list[list[Image.Image]]:
    """Every video of one trajectory row as the frames the model saw (Qwen-VL layout), or ``[]``
    if the row has none or the family is not known."""
    vp = getattr(processor, "video_processor", None)
    if (
        vp is None
        or "video_grid_thw" not in multi_modal_input
        or "pixel_values_videos" not in multi_modal_input
    ):
        return []
    return unpatchify_qwen(  # type: ignore[return-value]
        multi_modal_input["pixel_values_videos"],
        multi_modal_input["video_grid_thw"],
        vp.patch_size,
        vp.merge_size,
        vp.temporal_patch_size,
        list(vp.image_mean),
        list(vp.image_std),
        all_frames=True,
    )
