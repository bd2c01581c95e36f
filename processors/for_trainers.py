"""Our image handling for other trainers' data pipelines (TRL, verl, EasyR1).

A data item in our format (``docs/item_format.md``) goes through the same preparation as in
vlrollout's workflows (:meth:`AutoProcessorPreprocessor.prepare`: every image source form, EXIF
orientation, mode conversion, decompression-bomb and size limits, min/max pixels), and comes out
as what a trainer's forward takes, with a batch dimension of 1, plus each image's geometry
(original size -> the frame the model saw), which the grounding rewards need to read boxes in the
right frame.

>>> from PIL import Image
>>> from vlrollout.testing.offline_processors import build_qwen2_vl
>>> pre = AutoProcessorPreprocessor(build_qwen2_vl())
>>> inputs = model_inputs({"messages": "<image>Colour?", "images": [Image.new("RGB", (64, 32))]}, pre)
>>> inputs["input_ids"].shape == inputs["attention_mask"].shape, inputs["image_grid_thw"].tolist()
(True, [[1, 4, 6]])
>>> inputs["geometry"][0]["original_width"], inputs["geometry"][0]["model_width"]
(64, 84)
>>> image_geometry([Image.new("RGB", (64, 32))], pre)[0]["model_height"]
56
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .auto import AutoProcessorPreprocessor
from .base import Preprocessor, item_copy
from .contract import check_prepared, merge_sizes, plugin_name


def as_preprocessor(processor: Any) -> Preprocessor:
    """A preprocessor from a transformers processor, a local model path, or a preprocessor itself
    (anything with ``prepare(item)``, such as a custom plug-in)."""
    if hasattr(processor, "prepare"):
        return processor
    return AutoProcessorPreprocessor(processor)


def model_inputs(item: dict[str, Any], processor: Any) -> dict[str, Any]:
    """One data item as a trainer's model inputs plus each image's geometry.

    Args:
        item: A data item in our format (``messages``, ``images``, ``videos``, task fields).
        processor: A transformers processor, a local model path or a preprocessor
            (:func:`as_preprocessor`).

    Returns:
        ``input_ids`` and ``attention_mask`` (int64 ``[1, L]``, placeholders expanded by the
        processor), the prepared ``multi_modal_input`` tensors as the processor returns them
        (Qwen2-VL: ``pixel_values`` float32 ``[num_patches, patch_dim]``, ``image_grid_thw`` int64
        ``[num_images, 3]``), ``mm_token_type_ids`` (int64 ``[1, L]``) where the family has them,
        and ``geometry``: one :meth:`~vlrollout.geometry.ImageGeometry.to_dict` per image, which
        the rewards take as ``geometry=``.

    Raises:
        vlrollout.processors.errors.PreprocessError: the item cannot be prepared (the reason and
            the item are named), e.g. an unreadable image or placeholders that do not pair up.
    """
    pre = as_preprocessor(processor)
    prepared = check_prepared(
        pre.prepare(item_copy(item)),
        plugin_name(pre),
        merge_sizes(getattr(pre, "processor", None)),
        item,
    )
    ids = torch.tensor([prepared.input_ids], dtype=torch.long)
    inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    inputs.update(prepared.multi_modal_input)
    if prepared.mm_token_type_ids is not None:
        inputs["mm_token_type_ids"] = torch.tensor([prepared.mm_token_type_ids], dtype=torch.long)
    inputs["geometry"] = [g.to_dict() for g in prepared.geometry]
    return inputs


def image_geometry(images: Sequence[Any], processor: Any) -> list[dict[str, float]]:
    """The geometry of images as the processor prepares them (one dict per image, in order).

    For trainers that keep images in a dataset column (TRL's ``images``): the images are prepared
    as one prompt holding them, by the same path as :func:`model_inputs`, so the geometry is the
    one the model's inputs were built with when the trainer calls the same processor.
    """
    if not images:
        return []
    parts: list[dict[str, Any]] = [{"type": "image"} for _ in images]
    item = {"messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "."}]}]}
    return model_inputs({**item, "images": list(images)}, processor)["geometry"]
