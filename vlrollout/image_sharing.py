"""Encode each distinct image once per forward.

The n samples of a GRPO group share their prompt's image. A packed training micro-batch that
holds a whole group, and the engine's prefill of a group, pass that image's pixels n times, and
the model's vision tower encodes them n times. :func:`install` wraps the model's
``get_image_features`` so that images with the same grid and the same pixels are encoded once
and their features repeated for every copy.

The result is the same forward: each image is encoded on its own either way (the vision towers
of the families below attend within an image only). In training, autograd sums the gradients of
the repeated features into the one encoding, which is the sum the n encodings' gradients would
have made, so the update is the same up to the order of float additions. Videos are not
touched (``get_video_features``).

Only the families whose feature outputs this module knows how to repeat are wrapped
(:data:`SHARING_FAMILIES`, each checked on a tiny random model against the unwrapped forward and
its gradients); any other model is left as it is.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import Any

import torch

from vlrollout.logs import get_logger

logger = get_logger(__name__)

SHARING_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"})
"""``model_type`` values whose ``get_image_features(pixel_values, image_grid_thw)`` returns per
image features (``pooler_output``, one tensor per image) plus tensors with one row per patch or
per merged token (``last_hidden_state``, Qwen3-VL's ``deepstack_features``)."""


@dataclass(frozen=True)
class DistinctImages:
    """Which images of a batch are copies of which.

    Attributes:
        kept: Index of each distinct image's first occurrence, in order.
        source: For every image, the position in ``kept`` of the image it equals.
    """

    kept: list[int]
    source: list[int]

    @property
    def has_copies(self) -> bool:
        return len(self.kept) < len(self.source)


def distinct_images(pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> DistinctImages:
    """Group the images of a Qwen-VL style batch by equal grid and equal pixels.

    Args:
        pixel_values: ``[patches, features]``, the images' patches one image after another.
        grid_thw: ``[images, 3]``; image ``i`` has ``prod(grid_thw[i])`` patch rows.

    >>> px = torch.tensor([[1.0], [2.0], [1.0], [2.0], [3.0], [4.0]])
    >>> distinct_images(px, torch.tensor([[1, 1, 2]] * 3))
    DistinctImages(kept=[0, 2], source=[0, 0, 1])
    """
    sizes = grid_thw.prod(-1).tolist()
    blocks = torch.split(pixel_values, sizes)
    sums = torch.stack([b.sum() for b in blocks]).tolist()  # one device sync for all images
    kept: list[int] = []
    source: list[int] = []
    candidates: dict[tuple[Any, ...], list[int]] = {}
    for i, block in enumerate(blocks):
        key = (*grid_thw[i].tolist(), sums[i])
        same = candidates.setdefault(key, [])
        for k in same:
            if torch.equal(block, blocks[kept[k]]):
                source.append(k)
                break
        else:
            same.append(len(kept))
            source.append(len(kept))
            kept.append(i)
    return DistinctImages(kept, source)


def _row_ranges(sizes: list[int], picks: list[int]) -> torch.Tensor:
    """Row indices of the blocks ``picks`` of a tensor made of blocks of ``sizes`` rows."""
    starts = [0]
    for n in sizes[:-1]:
        starts.append(starts[-1] + n)
    return torch.cat([torch.arange(starts[p], starts[p] + sizes[p]) for p in picks])


class _CannotRepeat(Exception):
    """A feature output this module does not know how to repeat per image."""


def _repeat(value: Any, rows: dict[int, torch.Tensor]) -> Any:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        index = rows.get(value.shape[0]) if value.ndim else None
        if index is None:
            raise _CannotRepeat(f"a tensor of shape {tuple(value.shape)}")
        return value.index_select(0, index.to(value.device))
    if isinstance(value, (list, tuple)):
        return type(value)(_repeat(v, rows) for v in value)
    raise _CannotRepeat(f"a {type(value).__name__}")


def _encode_each_distinct_image_once(
    self: torch.nn.Module,
    pixel_values: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
    **kw: Any,
) -> Any:
    """The class's ``get_image_features``, encoding each distinct image once (module docstring).

    Bound to the instance as a method, so a ``copy.deepcopy`` of the model rebinds it to the
    copy (a closure over the original's bound method would keep encoding with the original's
    weights)."""
    get_image_features = functools.partial(type(self).get_image_features, self)
    if image_grid_thw is None or image_grid_thw.shape[0] < 2:
        return get_image_features(pixel_values, image_grid_thw, **kw)
    groups = distinct_images(pixel_values, image_grid_thw)
    if not groups.has_copies:
        return get_image_features(pixel_values, image_grid_thw, **kw)
    merge_size = int(getattr(self.visual, "spatial_merge_size", 2))
    patches = image_grid_thw.prod(-1).tolist()
    kept_patches = [patches[i] for i in groups.kept]
    kept_tokens = [n // merge_size**2 for n in kept_patches]
    out = get_image_features(
        pixel_values.index_select(0, _row_ranges(patches, groups.kept).to(pixel_values.device)),
        image_grid_thw[groups.kept],
        **kw,
    )
    # Tensors with a row per patch or per merged token of the kept images, by row count.
    rows = {
        sum(kept_tokens): _row_ranges(kept_tokens, groups.source),
        sum(kept_patches): _row_ranges(kept_patches, groups.source),
    }
    try:
        repeated = {}
        for name, value in out.items():
            if name == "pooler_output" and isinstance(value, (list, tuple)):
                repeated[name] = type(value)(value[k] for k in groups.source)
            else:
                repeated[name] = _repeat(value, rows)
    except (_CannotRepeat, AttributeError) as e:
        logger.warning("image features hold %s: each image is encoded once per copy", e)
        return get_image_features(pixel_values, image_grid_thw, **kw)
    for name, value in repeated.items():
        out[name] = value
    return out


def install(model: torch.nn.Module) -> bool:
    """Wrap ``model``'s image encoding so each distinct image of a forward is encoded once.

    ``model`` is a transformers vision-language model (the ``...ForConditionalGeneration``,
    possibly wrapped by FSDP); the wrapper goes on the inner model whose ``forward`` calls
    ``get_image_features``. Returns whether it was installed: ``False`` for a family outside
    :data:`SHARING_FAMILIES` or a model already wrapped.
    """
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in SHARING_FAMILIES:
        return False
    # The module that owns the vision tower is the one whose forward calls get_image_features
    # (the top-level model's method of that name only delegates to it).
    inner = next((m for m in model.modules() if "visual" in dict(m.named_children())), None)
    current = getattr(inner, "get_image_features", None)
    if current is None or getattr(current, "__func__", None) is _encode_each_distinct_image_once:
        return False
    inner.get_image_features = types.MethodType(_encode_each_distinct_image_once, inner)
    return True
