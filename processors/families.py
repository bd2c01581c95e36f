"""Small per-family adapters: placeholder string, resize kwargs, geometry, modality ids.

Everything else (chat template, placeholder expansion, pixel processing) is the transformers
processor's own code; an adapter only answers what differs between families. The family is detected
from the processor's class (and its base classes), so subclasses inherit their parent's adapter.

Sources for the conventions:

- Qwen2-VL / Qwen2.5-VL / Qwen3-VL: ``Qwen2VLImageProcessor`` ``smart_resize`` with
  ``size={"shortest_edge": min_pixels, "longest_edge": max_pixels}``; the model sees
  ``grid_w * patch_size`` × ``grid_h * patch_size`` pixels (patch 14 for Qwen2/2.5-VL, 16 for Qwen3-VL,
  read from the image processor, never hard-coded). ``processing_qwen2_vl.py`` in transformers 5.3.
- LLaVA-1.5: CLIP resize of the shortest edge (``get_resize_output_image_size``:
  long = ``int(edge * long / short)``) + centre crop to ``crop_size`` (top = ``(H - h) // 2`` in
  ``image_transforms.center_crop``; ``round((H - h) / 2)`` in torchvision's ``center_crop`` used by
  the fast processor). Recorded as the resize followed by the crop (negative offsets).
- LLaVA-OneVision: anyres; the canvas is ``select_best_resolution`` over ``image_grid_pinpoints``,
  the image is resized to fit it keeping its aspect (``get_patch_output_size``) and pasted centred
  (``_get_padding_size``: ``divmod(target - size, 2)``), ``image_processing_llava_onevision.py``.
  Recorded as the resize followed by the padding (positive offsets). Several images in one prompt:
  each is padded to a square (``pad_to_square``, centred) and resized to the base size.
- Gemma 3: fixed ``size`` square; placeholder ``boi_token``; modality ids come back as
  ``token_type_ids`` (``processing_gemma3.py``).
- Idefics3 / SmolVLM: resized to multiples of ``max_image_size`` and split into rows × cols tiles plus a
  global tile; the rows/cols are read back from the ``<row_r_col_c>`` tokens in ``input_ids``
  (``processing_idefics3.py``).
- InternVL: ``GotOcr2ImageProcessor`` with ``crop_to_patches`` resizes the image to the tile grid
  ``get_optimal_tiled_canvas`` picks (columns × rows of ``size``) and splits it, adding a
  thumbnail tile when there are several (``image_processing_got_ocr2.py``); the model frame is
  that canvas. Without ``crop_to_patches``, one ``size`` tile.
- GLM-4.1V / GLM-4.6V: Qwen2-VL's rule (``smart_resize``, ``image_grid_thw``) with pixel bounds
  that count both temporal copies of an image (``image_processing_glm4v.py``: ``num_frames`` =
  ``temporal_patch_size``), so a pixel budget is passed doubled.
- Mistral 3 / Pixtral: the longest edge scaled down to ``size["longest_edge"]`` (floor), each side
  rounded up to a multiple of patch × ``spatial_merge_size``; the processor returns those sizes as
  ``image_sizes`` (height, width) (``image_processing_pixtral.py``, ``processing_pixtral.py``).
- LFM2-VL: ``smart_resize`` to multiples of patch × ``downsample_factor`` within the token budget;
  an image over the budget × ``max_pixels_tolerance`` is resized to a ``tile_size`` grid and
  split (``<|img_row_r_col_c|>`` before each tile, then a smart-resized thumbnail); the model frame
  is the tile canvas, else the smart-resized image (``spatial_shapes`` × patch)
  (``image_processing_lfm2_vl_fast.py``, ``processing_lfm2_vl.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .base import ImageGeometry

_VIDEO_FRAME = re.compile(r"Frame\d+: $")
"""The text InternVL's processor writes before each video frame's image span."""

GeometryFn = Callable[[Any, Sequence[tuple[int, int]], dict[str, Any]], list[ImageGeometry]]


def size_getter(size: Any) -> Callable[..., Any]:
    """``get(key, default=None)`` over an image processor's ``size``: a dict, or transformers'
    ``SizeDict`` (attributes)."""
    if isinstance(size, dict):
        return size.get
    return lambda key, default=None: getattr(size, key, default)


def _size_hw(size: Any) -> tuple[int, int] | None:
    """(height, width) from an image processor ``size``/``crop_size`` (dict or SizeDict)."""
    if size is None:
        return None
    get = size_getter(size)
    h, w = get("height"), get("width")
    if h and w:
        return int(h), int(w)
    return None


def _geom(orig: tuple[int, int], model_w: int, model_h: int) -> ImageGeometry:
    return ImageGeometry(orig[0], orig[1], int(model_w), int(model_h))


def qwen_geometry(processor, sizes, outputs) -> list[ImageGeometry]:
    patch = int(processor.image_processor.patch_size)
    grid = outputs["image_grid_thw"].tolist()
    return [_geom(o, g[2] * patch, g[1] * patch) for o, g in zip(sizes, grid, strict=True)]


def _is_fast(image_processor: Any) -> bool:
    return type(image_processor).__name__.endswith("Fast")


def _shortest_edge_resize(w: int, h: int, edge: int) -> tuple[int, int]:
    """``get_resize_output_image_size(size=edge, default_to_square=False)``, as (width, height)."""
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = edge, int(edge * long / short)
    return (new_short, new_long) if w <= h else (new_long, new_short)


def _centre_offset(size: int, crop: int, fast: bool) -> int:
    """Where a centre crop of ``crop`` starts in ``size`` pixels (negative: padded first).

    Both CLIP-style processors start an odd difference at the floor of its half (transformers 5's
    fast ``center_crop`` overrides torchvision's rounding to match the slow one). They differ
    only when the crop is larger than the image: the slow processor pads the extra pixel before
    the image, the fast one after it.
    """
    return int((size - crop) / 2) if fast else (size - crop) // 2


def fixed_size_geometry(processor, sizes, outputs) -> list[ImageGeometry]:
    """Resize (shortest edge or fixed size), then centre crop when the processor crops."""
    ip = processor.image_processor
    crop_hw = (
        _size_hw(getattr(ip, "crop_size", None)) if getattr(ip, "do_center_crop", False) else None
    )
    size = getattr(ip, "size", None)
    get = size_getter(size)
    edge = get("shortest_edge") if size is not None else None
    if crop_hw is not None and edge and getattr(ip, "do_resize", True):
        out = []
        for w, h in sizes:
            rw, rh = _shortest_edge_resize(w, h, int(edge))
            ch, cw = crop_hw
            left = _centre_offset(rw, cw, _is_fast(ip))
            top = _centre_offset(rh, ch, _is_fast(ip))
            out.append(
                ImageGeometry.resized(w, h, rw, rh).then(
                    ImageGeometry.cropped(rw, rh, (left, top, left + cw, top + ch))
                )
            )
        return out
    hw = crop_hw or _size_hw(size)
    if hw is None:
        return generic_geometry(processor, sizes, outputs)
    return [_geom(o, hw[1], hw[0]) for o in sizes]


def _fit(w: int, h: int, target_w: int, target_h: int) -> tuple[int, int]:
    """``get_patch_output_size``: fit inside the target keeping the aspect, as (width, height)."""
    scale_w, scale_h = target_w / w, target_h / h
    if scale_w < scale_h:
        return target_w, min(math.ceil(h * scale_w), target_h)
    return min(math.ceil(w * scale_h), target_w), target_h


def llava_onevision_geometry(processor, sizes, outputs) -> list[ImageGeometry]:
    from transformers.image_processing_utils import select_best_resolution

    ip = processor.image_processor
    base = _size_hw(getattr(ip, "size", None))
    if len(sizes) > 1:  # several images: each padded to a square, then resized to the base tile
        if base is None:
            return generic_geometry(processor, sizes, outputs)
        out = []
        for w, h in sizes:
            m = max(w, h)
            out.append(
                ImageGeometry.padded(w, h, m, m, (m - w) // 2, (m - h) // 2).then(
                    ImageGeometry.resized(m, m, base[1], base[0])
                )
            )
        return out
    out = []
    for w, h in sizes:
        best_h, best_w = select_best_resolution((h, w), ip.image_grid_pinpoints)
        new_w, new_h = _fit(w, h, best_w, best_h)
        out.append(
            ImageGeometry.resized(w, h, new_w, new_h).then(
                ImageGeometry.padded(
                    new_w, new_h, best_w, best_h, (best_w - new_w) // 2, (best_h - new_h) // 2
                )
            )
        )
    return out


def idefics3_geometry(processor, sizes, outputs) -> list[ImageGeometry]:
    tok = processor.tokenizer
    tile = int(processor.image_processor.max_image_size["longest_edge"])
    global_id = tok.convert_tokens_to_ids("<global-img>")
    row_col = {
        tok.convert_tokens_to_ids(f"<row_{r}_col_{c}>"): (r, c)
        for r in range(1, 7)
        for c in range(1, 7)
    }
    grids: list[tuple[int, int]] = []
    rows = cols = 0
    for tid in outputs["input_ids"].reshape(-1).tolist():
        if tid in row_col:
            r, c = row_col[tid]
            rows, cols = max(rows, r), max(cols, c)
        elif tid == global_id:
            grids.append((rows, cols))
            rows = cols = 0
    if len(grids) != len(sizes):
        return generic_geometry(processor, sizes, outputs)
    return [
        _geom(o, c * tile if c else tile, r * tile if r else tile)
        for o, (r, c) in zip(sizes, grids, strict=True)
    ]


def internvl_geometry(processor, sizes, outputs) -> list[ImageGeometry]:
    """The tile canvas (columns × rows of ``size``) the crop-to-patches rule picks per image.

    How many tiles each image became is read back from its ``<img>...</img>`` span (``image_seq_length``
    placeholders per tile), so the rule is applied only where the processor applied it (its
    ``crop_to_patches`` default, or a caller's override). Video frames are image spans too, each
    written after ``Frame{i}: `` (``processing_internvl.py``); those are skipped when the prompt
    holds more spans than images.
    """
    from transformers.models.got_ocr2.image_processing_got_ocr2 import get_optimal_tiled_canvas

    ip = processor.image_processor
    tile_h, tile_w = _size_hw(ip.size)
    start, image = processor.start_image_token_id, processor.image_token_id
    ids = outputs["input_ids"].reshape(-1).tolist()
    spans, n, frame = [], 0, False
    for i, tid in enumerate(ids):
        if tid == start:
            n, frame = 0, _VIDEO_FRAME.search(processor.tokenizer.decode(ids[max(0, i - 8) : i]))
        elif tid == image:
            n += 1
        elif tid == processor.end_image_token_id:
            spans.append((n // processor.image_seq_length, bool(frame)))
    # With as many spans as images there is no video: a user's own "Frame1: <image>" is an image.
    tiles = [t for t, is_frame in spans if len(spans) == len(sizes) or not is_frame]
    if len(tiles) != len(sizes):
        raise ValueError(f"InternVL prompt holds {len(tiles)} image spans for {len(sizes)} images")
    out = []
    for (w, h), n_tiles in zip(sizes, tiles, strict=True):
        if n_tiles == 1:
            out.append(_geom((w, h), tile_w, tile_h))
            continue
        cols, rows = get_optimal_tiled_canvas(
            (h, w), (tile_h, tile_w), ip.min_patches, ip.max_patches
        )
        if cols * rows + 1 != n_tiles:
            raise ValueError(
                f"InternVL image {w}x{h}: {n_tiles} tiles in the prompt, but the crop rule gives "
                f"{cols}x{rows} tiles and a thumbnail"
            )
        out.append(_geom((w, h), cols * tile_w, rows * tile_h))
    return out


def pixtral_geometry(processor, sizes, outputs) -> list[ImageGeometry]:
    """Each image's resized (height, width) as the processor reports it in ``image_sizes``."""
    resized = outputs["image_sizes"].tolist()
    return [_geom(o, w, h) for o, (h, w) in zip(sizes, resized, strict=True)]


def lfm2_vl_geometry(processor, sizes, outputs) -> list[ImageGeometry]:
    """Tile canvas for split images (rows/cols read back from ``<|img_row_r_col_c|>`` tokens),
    else the smart-resized image (its ``spatial_shapes`` row × the encoder patch)."""
    tok, ip = processor.tokenizer, processor.image_processor
    start = tok.convert_tokens_to_ids(processor.image_start_token)
    end = tok.convert_tokens_to_ids(processor.image_end_token)
    row_col = {
        tok.convert_tokens_to_ids(f"<|img_row_{r}_col_{c}|>"): (r, c)
        for r in range(1, ip.max_tiles + 1)
        for c in range(1, ip.max_tiles + 1)
    }
    grids: list[tuple[int, int]] = []
    rows = cols = 0
    for tid in outputs["input_ids"].reshape(-1).tolist():
        if tid == start:
            rows = cols = 0
        elif tid in row_col:
            r, c = row_col[tid]
            rows, cols = max(rows, r), max(cols, c)
        elif tid == end:
            grids.append((rows, cols))
    if len(grids) != len(sizes):
        raise ValueError(
            f"LFM2-VL prompt holds {len(grids)} image spans for {len(sizes)} images: build the "
            "processor with image start/end tokens (use_image_special_tokens)"
        )
    shapes = outputs["spatial_shapes"].tolist()
    patch, tile, out, row = int(ip.encoder_patch_size), int(ip.tile_size), [], 0
    thumb = int(bool(ip.use_thumbnail))
    for orig, (r, c) in zip(sizes, grids, strict=True):
        if r * c > 1:
            out.append(_geom(orig, c * tile, r * tile))
            row += r * c + thumb
        else:
            gh, gw = shapes[row]
            out.append(_geom(orig, gw * patch, gh * patch))
            row += 1
    return out


def glm4v_resize_kwargs(processor, min_pixels: int | None, max_pixels: int | None) -> dict:
    """Qwen's ``size`` bounds, doubled per temporal copy: GLM-4.1V's ``smart_resize`` counts the
    ``temporal_patch_size`` copies of an image against them."""
    t = int(processor.image_processor.temporal_patch_size)
    size = processor.image_processor.size
    get = size_getter(size)
    lo = min_pixels * t if min_pixels is not None else get("shortest_edge")
    hi = max_pixels * t if max_pixels is not None else get("longest_edge")
    if lo is not None and hi is not None:
        check_pixel_bounds(lo // t, hi // t, min_pixels, max_pixels)
    return {"size": {"shortest_edge": int(lo), "longest_edge": int(hi)}}


def lfm2_vl_resize_kwargs(processor, min_pixels: int | None, max_pixels: int | None) -> dict:
    """A pixel budget as LFM2-VL's token budget: one token per (patch × downsample)² pixels."""
    ip = processor.image_processor
    per_token = (int(ip.encoder_patch_size) * int(ip.downsample_factor)) ** 2
    lo = math.ceil(min_pixels / per_token) if min_pixels is not None else ip.min_image_tokens
    hi = max_pixels // per_token if max_pixels is not None else ip.max_image_tokens
    if lo > hi or hi < 1:
        raise ValueError(
            f"min_pixels={min_pixels}/max_pixels={max_pixels} give {lo}..{hi} image tokens of "
            f"{per_token} pixels each; raise max_pixels"
        )
    return {"min_image_tokens": int(lo), "max_image_tokens": int(hi)}


def generic_geometry(processor, sizes, outputs) -> list[ImageGeometry]:
    """``pixel_values`` of shape ``[num_images, C, H, W]`` gives H×W; else the original size."""
    pv = outputs.get("pixel_values")
    if isinstance(pv, torch.Tensor) and pv.ndim == 4 and pv.shape[0] == len(sizes):
        return [_geom(o, pv.shape[3], pv.shape[2]) for o in sizes]
    return [_geom(o, o[0], o[1]) for o in sizes]


def qwen_resize_kwargs(processor, min_pixels: int | None, max_pixels: int | None) -> dict:
    """Both bounds as ``size``: the fast processor ignores a lone ``min_pixels``/``max_pixels``."""
    if min_pixels is None and max_pixels is None:
        return {}
    size = processor.image_processor.size
    get = size_getter(size)
    lo = min_pixels if min_pixels is not None else get("shortest_edge")
    hi = max_pixels if max_pixels is not None else get("longest_edge")
    check_pixel_bounds(lo, hi, min_pixels, max_pixels)
    return {"size": {"shortest_edge": int(lo), "longest_edge": int(hi)}}


def image_size_setting(processor, images_kwargs: dict) -> dict[str, int] | None:
    """The ``size`` an image processor resizes to with ``images_kwargs`` (a pixel budget's
    bounds, or a fixed height and width), as a plain dict; ``None`` without an image processor
    or a ``size``. Two processors with equal settings give placeholders for equal grids.

    >>> from types import SimpleNamespace as N
    >>> image_size_setting(N(image_processor=N(size={"shortest_edge": 4, "longest_edge": 9})), {})
    {'shortest_edge': 4, 'longest_edge': 9}
    """
    ip = getattr(processor, "image_processor", None)
    size = images_kwargs.get("size") or getattr(ip, "size", None)
    if size is None:
        return None
    get = size_getter(size)
    keys = ("shortest_edge", "longest_edge", "height", "width", "max_height", "max_width")
    return {k: int(get(k)) for k in keys if get(k) is not None}


def budget_image_tokens(processor, images_kwargs: dict, width: int, height: int) -> int | None:
    """Image tokens one ``width``×``height`` image takes after a pixel-budget family's resize,
    counted before any pixel is built: the image processor's ``get_number_of_image_patches`` (the
    public method vLLM counts placeholders with) over the merge.

    ``None`` when the processor would not resize or ``images_kwargs`` holds a setting other than
    the ``size`` bounds the count reads.
    """
    ip = processor.image_processor
    if set(images_kwargs) - {"size"} or not getattr(ip, "do_resize", True):
        return None
    size = images_kwargs.get("size") or ip.size
    get = size_getter(size)
    lo, hi = get("shortest_edge"), get("longest_edge")
    # Qwen's count reads min_pixels/max_pixels, GLM-4V's the size bounds: both are given.
    bounds = {"size": {"shortest_edge": lo, "longest_edge": hi}, "min_pixels": lo, "max_pixels": hi}
    return int(ip.get_number_of_image_patches(height, width, bounds)) // int(ip.merge_size) ** 2


def check_pixel_bounds(
    lo: int | None, hi: int | None, min_pixels: int | None, max_pixels: int | None
) -> None:
    """Refuse a pixel budget whose lower bound ``lo`` exceeds ``hi``, naming the processor's
    own bound where one side was not given (``min_pixels``/``max_pixels``: the settings).

    >>> check_pixel_bounds(3136, 100, None, 100)
    Traceback (most recent call last):
    ...
    ValueError: max_pixels=100 is below the processor's own min_pixels 3136: raise max_pixels or set min_pixels too
    """
    if lo is None or hi is None or lo <= hi:
        return
    if min_pixels is None:
        raise ValueError(
            f"max_pixels={hi} is below the processor's own min_pixels {lo}: raise max_pixels "
            "or set min_pixels too"
        )
    if max_pixels is None:
        raise ValueError(
            f"min_pixels={lo} is above the processor's own max_pixels {hi}: lower min_pixels "
            "or set max_pixels too"
        )
    raise ValueError(f"min_pixels={lo} exceeds max_pixels={hi}; swap or fix them")


@dataclass(frozen=True)
class FamilyAdapter:
    """What differs between model families, for :class:`AutoProcessorPreprocessor`.

    Attributes:
        name: Family name (``"qwen2_vl"``, ``"llava"``, ..., ``"generic"``).
        geometry: ``(processor, original_sizes, outputs) -> list[ImageGeometry]``.
        resize_kwargs: ``(processor, min_pixels, max_pixels) -> images_kwargs``; ``None`` when the
            family has no pixel-budget resize (setting min/max pixels is then an error).
        placeholder_attr: Processor attribute holding the text placeholder for one image.
        mm_type_key: Output key holding per-token modality ids.
        image_marker_attrs: Processor attributes naming a token written exactly once per image,
            for families that expand one image into several placeholder runs (Idefics3/SmolVLM:
            one run per tile plus one for the global view, which ``<global-img>`` opens); empty
            when each image is one run of placeholders.
        image_tokens: ``(processor, images_kwargs, width, height) -> tokens or None``, one
            image's tokens from its size alone; ``None`` for families whose resize bounds an
            image's tokens whatever its size (fixed sizes, tiles, token budgets).
    """

    name: str
    geometry: GeometryFn = generic_geometry
    resize_kwargs: Callable[[Any, int | None, int | None], dict] | None = None
    placeholder_attr: str = "image_token"
    mm_type_key: str = "mm_token_type_ids"
    image_marker_attrs: tuple[str, ...] = ()
    image_tokens: Callable[[Any, dict, int, int], int | None] | None = None

    def placeholder(self, processor) -> str | None:
        value = getattr(processor, self.placeholder_attr, None)
        return value if isinstance(value, str) and value else None


_QWEN = dict(
    geometry=qwen_geometry, resize_kwargs=qwen_resize_kwargs, image_tokens=budget_image_tokens
)
_GLM = dict(
    geometry=qwen_geometry, resize_kwargs=glm4v_resize_kwargs, image_tokens=budget_image_tokens
)
ADAPTERS: dict[str, FamilyAdapter] = {
    "Qwen2VLProcessor": FamilyAdapter("qwen2_vl", **_QWEN),
    "Qwen2_5_VLProcessor": FamilyAdapter("qwen2_5_vl", **_QWEN),
    "Qwen3VLProcessor": FamilyAdapter("qwen3_vl", **_QWEN),
    "LlavaProcessor": FamilyAdapter("llava", geometry=fixed_size_geometry),
    "LlavaOnevisionProcessor": FamilyAdapter("llava_onevision", geometry=llava_onevision_geometry),
    "Gemma3Processor": FamilyAdapter(
        "gemma3",
        geometry=fixed_size_geometry,
        placeholder_attr="boi_token",
        mm_type_key="token_type_ids",
    ),
    "Idefics3Processor": FamilyAdapter(
        "idefics3", geometry=idefics3_geometry, image_marker_attrs=("global_image_tag",)
    ),
    "SmolVLMProcessor": FamilyAdapter(
        "smolvlm", geometry=idefics3_geometry, image_marker_attrs=("global_image_token",)
    ),
    "InternVLProcessor": FamilyAdapter("internvl", geometry=internvl_geometry),
    "Glm4vProcessor": FamilyAdapter("glm4v", **_GLM),
    "Glm46VProcessor": FamilyAdapter("glm46v", **_GLM),
    "PixtralProcessor": FamilyAdapter(
        "mistral3", geometry=pixtral_geometry, image_marker_attrs=("image_end_token",)
    ),
    "Lfm2VlProcessor": FamilyAdapter(
        "lfm2_vl",
        geometry=lfm2_vl_geometry,
        resize_kwargs=lfm2_vl_resize_kwargs,
        image_marker_attrs=("image_start_token",),
    ),
}
GENERIC = FamilyAdapter("generic")


def adapter_for(processor: Any) -> FamilyAdapter:
    """The adapter for ``processor``'s class or its nearest known base class; else generic."""
    for cls in type(processor).__mro__:
        if cls.__name__ in ADAPTERS:
            return ADAPTERS[cls.__name__]
    return GENERIC
