"""Turn a ``ModelRequest`` into the tensors the model's prefill needs, and check them.

The images and videos come from ``req.metadata["multi_modal_input"]`` when present (the tensors
the trainer also gets, so the engine and the trainer see the same pixels by construction);
images alone may come from ``req.image_data`` (base64 strings, as SGLang receives them) run
through the processor's image processor. Either way the placeholders already expanded in
``req.input_ids`` must agree with the number of images and videos and the tokens
``image_grid_thw``/``video_grid_thw`` imply; a mismatch raises :class:`PlaceholderMismatchError`
naming both numbers (the failure behind verl #3469 and TRL #4488).

Position ids are computed here, per request, instead of through the model's stateful
``rope_deltas`` attribute (Qwen2-VL's ``compute_3d_position_ids`` caches the delta on the
module, which concurrent requests would overwrite). For Qwen-VL families the prompt's 3-D
positions come from ``model.model.get_rope_index`` (transformers 5.3,
``models/qwen2_vl/modeling_qwen2_vl.py``), the function AReaL's ``FSDPEngine._prepare_mb_list``
reaches through ``compute_3d_position_ids``, with the video grids in the form it reads
(:func:`vlrollout.families.rope_grids`: Qwen3-VL's per-frame runs, Qwen2.5-VL's
``second_per_grid_ts`` and ``tokens_per_second`` spacing); every later text token at index ``i``
sits at ``i + rope_delta`` on all three axes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from vlrollout import families
from vlrollout.compat.transformers import rope_index
from vlrollout.processors.auto import channels_last_kwargs
from vlrollout.processors.base import run_lengths
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_PIXELS,
    decode_inline,
    load_image,
)

# Keys of a processor output that are not model inputs for the images.
_NOT_VISION_KEYS = {"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids"}
# Placeholder strings of common VLM families; any present in the tokenizer is never sampled.
_PLACEHOLDER_TOKENS = (
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<image>",
    "<video>",
)
_PLACEHOLDER_ATTRS = (
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
    "image_token_index",
    "video_token_index",
)


class PlaceholderMismatchError(ValueError):
    """The image (or video) placeholders in ``input_ids`` disagree with the media sent;
    ``kind`` says which: ``"image"`` or ``"video"``."""

    def __init__(self, message: str, kind: str = "image") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class PreparedInputs:
    """One request, ready for prefill.

    Attributes:
        input_ids: Prompt token ids (placeholders expanded).
        vision: Tensors for the prefill forward only (``pixel_values`` float, ``image_grid_thw``
            int64 ``[num_images, 3]``, ...), on the engine's device; empty for text-only.
        mm_token_type_ids: ``[1, L]`` int64 (0 text, 1 image, 2 video), or ``None`` when the
            request has no images or videos.
    """

    input_ids: list[int]
    vision: dict[str, torch.Tensor] = field(default_factory=dict)
    mm_token_type_ids: torch.Tensor | None = None


def placeholder_token_ids(model_config: Any, processor: Any, tokenizer: Any) -> set[int]:
    """Ids of vision placeholder tokens (image/video pads, vision start/end) to never sample."""
    ids: set[int] = set()
    for obj in (model_config, getattr(model_config, "text_config", None), processor):
        for attr in _PLACEHOLDER_ATTRS:
            value = getattr(obj, attr, None) if obj is not None else None
            if isinstance(value, int) and value >= 0:
                ids.add(value)
    if tokenizer is not None:
        vocab = tokenizer.get_vocab()
        ids.update(vocab[t] for t in _PLACEHOLDER_TOKENS if t in vocab)
    return ids


def decode_image(
    data: Any, *, max_pixels: int = DEFAULT_MAX_PIXELS, max_bytes: int = DEFAULT_MAX_BYTES
):
    """The RGB PIL image of one ``image_data`` entry: a base64 string, a ``data:`` URL (SGLang's
    inputs) or a PIL image.

    Strings are decoded by the processors' :func:`~vlrollout.processors.image_loading.decode_inline`
    and every entry is loaded by their :func:`~vlrollout.processors.image_loading.load_image`, with
    the processors' limits: the engine sees the pixels the trainer sees, an image over
    ``max_pixels`` (a decompression bomb) is refused before its pixels are decoded, and files are
    never read.

    Raises:
        TypeError: ``data`` is neither a string nor a PIL image.
        ValueError: The image cannot be used; the message carries the processors' reason
            (``image_too_large``, ``image_decode``, ...) and detail.
    """
    from PIL import Image

    if not isinstance(data, str | Image.Image):
        raise TypeError(f"image_data entries must be base64 strings, got {type(data).__name__}.")
    try:
        source = decode_inline(data, "image_data", max_bytes) if isinstance(data, str) else data
        return load_image(source, "image_data", max_pixels=max_pixels, max_bytes=max_bytes).image
    except PreprocessError as e:
        raise ValueError(f"Cannot decode an image from image_data: {e.reason}: {e.detail}") from e


def _as_vision_dict(mm: Any) -> dict[str, torch.Tensor]:
    if isinstance(mm, list | tuple):  # the trajectory form: a list of per-sample dicts
        dicts = [d for d in mm if d]
        keys = {k for d in dicts for k in d}
        return {k: torch.cat([torch.as_tensor(d[k]) for d in dicts if k in d]) for k in keys}
    if not isinstance(mm, dict):
        raise TypeError(
            f'metadata["multi_modal_input"] must be a dict of tensors, got {type(mm).__name__}.'
        )
    return {k: torch.as_tensor(v) for k, v in mm.items()}


def check_token_ids(input_ids: list[int], vocab_size: int) -> None:
    """Every id indexes the model's input embedding: checked before the request is queued, so a
    bad one is the caller's ``ValueError`` (a 400 from serve), not an ``IndexError`` from inside
    the model's forward."""
    low, high = min(input_ids), max(input_ids)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"input_ids hold token id {bad} at position {input_ids.index(bad)}, outside the "
            f"model's vocabulary of {vocab_size} ids (0..{vocab_size - 1})."
        )


def count_placeholders(input_ids: list[int], token_id: int | None) -> tuple[int, int]:
    """``(tokens, runs)`` of ``token_id`` in ``input_ids``; a prompt without it (most have no
    video) costs one ``list.count``."""
    n_tokens = input_ids.count(token_id) if token_id is not None else 0
    if not n_tokens:
        return 0, 0
    return n_tokens, _runs(torch.tensor(input_ids) == token_id)


def _runs(hit: torch.Tensor) -> int:
    """Runs of True in a 1-D bool tensor."""
    return int((hit[1:] > hit[:-1]).sum()) + int(hit[0]) if hit.numel() else 0


def check_placeholders(
    input_ids: list[int],
    vision: dict[str, torch.Tensor],
    image_token_id: int | None,
    video_token_id: int | None,
    merge_size: int,
    mm_token_type_ids: torch.Tensor | None = None,
) -> None:
    """Raise :class:`PlaceholderMismatchError` unless placeholders match the images and videos.

    Placeholders are the tokens of each placeholder id, or, when ``mm_token_type_ids`` is given,
    the tokens it marks 1 (image) or 2 (video): GLM-4.1V writes video frames with its image
    token.

    With ``image_grid_thw`` (Qwen-VL), each image ``i`` needs ``prod(image_grid_thw[i]) //
    merge_size**2`` consecutive ``image_token_id`` tokens; videos likewise with
    ``video_grid_thw``. Families without grids (LLaVA, Gemma 3, Idefics3, ...) expand an image
    into a layout of their own (tiles, several runs); for them placeholders and pixels must be
    present together, and the model's forward checks the token count against its features.

    >>> check_placeholders([7, 5, 5, 8], {"image_grid_thw": torch.tensor([[1, 2, 4]])}, 5, None, 2)
    >>> check_placeholders([7, 5, 8], {"image_grid_thw": torch.tensor([[1, 2, 4]])}, 5, None, 2)
    Traceback (most recent call last):
    ...
    vlrollout.engine.inputs.PlaceholderMismatchError: input_ids hold 1 image placeholder tokens in 1 run(s), but image_grid_thw implies 2 tokens for 1 image(s) (merge size 2). Build input_ids and the images with the same processor settings (min/max pixels, patch and merge size).
    """
    for kind, value, token_id, grid_key, data_key in (
        ("image", 1, image_token_id, "image_grid_thw", "pixel_values"),
        ("video", 2, video_token_id, "video_grid_thw", "pixel_values_videos"),
    ):
        grid = vision.get(grid_key)
        if mm_token_type_ids is not None:
            hit = mm_token_type_ids.reshape(-1) == value
            n_tokens, n_runs = int(hit.sum()), _runs(hit)
        else:
            n_tokens, n_runs = count_placeholders(input_ids, token_id)
        if grid is None:
            if data_key in vision and not n_tokens:
                raise PlaceholderMismatchError(
                    f"{data_key} was given but input_ids hold no {kind} placeholder token "
                    f"(id {token_id}): the {kind}s would never reach the model.",
                    kind,
                )
            if n_tokens and data_key not in vision:
                raise PlaceholderMismatchError(
                    f"input_ids hold {n_tokens} {kind} placeholder tokens but the request has no "
                    f"{kind}s: send them in metadata['multi_modal_input'] or {kind}_data.",
                    kind,
                )
            continue
        expected = int(grid.prod(-1).sum()) // merge_size**2
        if n_tokens != expected or n_runs != grid.shape[0]:
            raise PlaceholderMismatchError(
                f"input_ids hold {n_tokens} {kind} placeholder tokens in {n_runs} run(s), but "
                f"{grid_key} implies {expected} tokens for {grid.shape[0]} {kind}(s) "
                f"(merge size {merge_size}). Build input_ids and the {kind}s with the same "
                "processor settings (min/max pixels, patch and merge size).",
                kind,
            )
        if kind == "image":  # Qwen3-VL writes a video's frames as several runs
            _check_each_image(input_ids, mm_token_type_ids, token_id, grid, merge_size)


def _check_each_image(
    input_ids: list[int],
    mm_token_type_ids: torch.Tensor | None,
    token_id: int | None,
    grid: torch.Tensor,
    merge_size: int,
) -> None:
    """Image k's run of placeholders has the tokens of grid row k: with the totals and the
    number of runs right, images sent in another order than their placeholders would still
    fill each other's runs."""
    if mm_token_type_ids is not None:
        runs = run_lengths((mm_token_type_ids.reshape(-1) == 1).tolist())
    else:
        runs = run_lengths([t == token_id for t in input_ids])
    want = (grid.prod(-1) // merge_size**2).tolist()
    if runs != want:
        raise PlaceholderMismatchError(
            f"input_ids hold image placeholder runs of {shown_counts(runs)} tokens, but "
            f"image_grid_thw implies {shown_counts(want)} tokens, one run per image in order "
            f"(merge size {merge_size}): the images are in another order than their "
            "placeholders, or were built with other processor settings.",
            "image",
        )


def shown_counts(counts: list[int], most: int = 8) -> str:
    """``counts`` as ``"4, 8"``, the first ``most`` of a long list and how many more.

    >>> shown_counts([4, 8]), shown_counts(list(range(10)), most=3)
    ('4, 8', '0, 1, 2 and 7 more')
    """
    shown = ", ".join(map(str, counts[:most]))
    return shown if len(counts) <= most else f"{shown} and {len(counts) - most} more"


def modality_ids(model_config: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """0 for text, 1 for image, 2 for video placeholder tokens of ``input_ids`` (any shape),
    from the config's placeholder ids. GLM-4.1V writes a video's frames with its image token
    between ``video_start_token_id`` and ``video_end_token_id``: those are video (2), as its
    processor marks them.

    >>> from types import SimpleNamespace as C
    >>> modality_ids(C(image_token_id=5, video_token_id=6), torch.tensor([1, 5, 6, 6])).tolist()
    [0, 1, 2, 2]
    >>> glm = C(image_token_id=5, video_start_token_id=8, video_end_token_id=9)
    >>> modality_ids(glm, torch.tensor([5, 8, 5, 5, 9, 5])).tolist()
    [1, 0, 2, 2, 0, 1]
    """
    types = torch.zeros_like(input_ids)
    image_id = families.image_token_id(model_config)
    video_id = families.video_token_id(model_config)
    if image_id is not None:
        types[input_ids == image_id] = 1
    if video_id is not None:
        types[input_ids == video_id] = 2
    start = getattr(model_config, "video_start_token_id", None)
    end = getattr(model_config, "video_end_token_id", None)
    if image_id is not None and start is not None and end is not None:
        inside = (input_ids == start).cumsum(-1) > (input_ids == end).cumsum(-1)
        types[(input_ids == image_id) & inside] = 2
    return types


def _modality_ids(
    input_ids: list[int], given: Any, metadata: dict[str, Any], model_config: Any
) -> torch.Tensor:
    """``[1, L]`` int64 modality ids of a prompt: the processor's (from ``multi_modal_input``
    or ``metadata["mm_token_type_ids"]``), else :func:`modality_ids`."""
    if given is None:
        given = metadata.get("mm_token_type_ids")
    if given is None:
        given = modality_ids(model_config, torch.tensor(input_ids))
    types = torch.as_tensor(given, dtype=torch.long).reshape(1, -1)
    if types.shape[1] != len(input_ids):
        raise ValueError(
            f"mm_token_type_ids has {types.shape[1]} entries for {len(input_ids)} input_ids."
        )
    return types


def prepare_inputs(
    req: Any,
    processor: Any,
    model_config: Any,
    device: torch.device | str,
    dtype: torch.dtype,
) -> PreparedInputs:
    """Build :class:`PreparedInputs` for ``req`` and validate its placeholders.

    Args:
        req: An AReaL ``ModelRequest``.
        processor: Used for ``req.image_data`` when ``req.processor`` is ``None``.
        model_config: The model's config (placeholder ids, merge size).
        device: Where the vision tensors go.
        dtype: Pixel tensors (``pixel_values``, ``pixel_values_videos``) are cast to this, the
            model's dtype; ``second_per_grid_ts`` keeps its own (positions read it).
    """
    input_ids = [int(t) for t in req.input_ids]
    if not input_ids:
        raise ValueError("req.input_ids is empty: the engine needs a prompt.")
    metadata = req.metadata or {}
    if metadata.get("multi_modal_input"):
        vision = _as_vision_dict(metadata["multi_modal_input"])
    elif req.image_data:
        proc = req.processor or processor
        image_processor = getattr(proc, "image_processor", None)
        if image_processor is None:
            raise ValueError(
                "req.image_data was given but neither req.processor nor the engine has an "
                "image processor; pass processor=... to the engine or send "
                "metadata['multi_modal_input']."
            )
        images = [decode_image(d) for d in req.image_data]
        out = image_processor(
            images=images, return_tensors="pt", **channels_last_kwargs(image_processor, images)
        )
        vision = {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}
    else:
        vision = {}
    mm_types = vision.pop("mm_token_type_ids", None)
    vision = {k: v for k, v in vision.items() if k not in _NOT_VISION_KEYS}
    image_id = families.image_token_id(model_config)
    video_id = families.video_token_id(model_config)
    if vision:
        mm_types = _modality_ids(input_ids, mm_types, metadata, model_config)
        vision = families.rope_grids(vision, mm_types)
    vision_cfg = getattr(model_config, "vision_config", None)
    merge = getattr(vision_cfg, "spatial_merge_size", None) or 1
    check_placeholders(input_ids, vision, image_id, video_id, merge, mm_types)
    if not vision:
        return PreparedInputs(input_ids=input_ids)
    # Pixels take the model's dtype; grids and frame spacing (read by positions) stay exact.
    vision = {
        k: v.to(device=device, dtype=v.dtype if k in families.POSITION_KEYS else dtype)
        if v.is_floating_point()
        else v.to(device)
        for k, v in vision.items()
    }
    return PreparedInputs(input_ids=input_ids, vision=vision, mm_token_type_ids=mm_types.to(device))


def uses_mrope(model: Any) -> bool:
    """Whether the model takes 3-D (M-RoPE) position ids (:mod:`vlrollout.families`)."""
    return families.family_of(model.config).positions == "mrope"


def prompt_positions(
    model: Any,
    ids: torch.Tensor,
    mm_token_type_ids: torch.Tensor | None,
    vision: dict[str, torch.Tensor],
) -> tuple[torch.Tensor, int]:
    """Position ids for a prefill of ``ids`` (``[1, L]``) and the offset of later tokens.

    For M-RoPE the positions come from the model's own ``get_rope_index`` over the prompt plus
    one appended text token, and the offset is that token's position minus ``L``: a generated
    token continues exactly where a teacher-forced forward over prompt + completion (the
    trainer's, ``generate``'s) puts it. ``get_rope_index``'s own delta is ``max(position) + 1 - L``,
    which differs when an image's temporal positions are scaled past the text that follows it
    (Qwen2.5-VL's ``tokens_per_second``: the temporal index of an image starting at position
    ``s`` is ``s * tokens_per_second``).

    Returns:
        ``(position_ids, rope_delta)``: ``[3, 1, L]`` for M-RoPE models, else ``[1, L]``
        (int64); a text token at index ``i >= L`` has position ``i + rope_delta``.
    """
    length = ids.shape[1]
    if not uses_mrope(model):
        return torch.arange(length, device=ids.device).unsqueeze(0), 0
    if mm_token_type_ids is None or not vision:
        pos = torch.arange(length, device=ids.device).view(1, 1, -1).expand(3, 1, -1)
        return pos, 0
    types = mm_token_type_ids
    if types.shape[1] < length:  # re-prefill after generated (text) tokens
        pad = torch.zeros(1, length - types.shape[1], dtype=types.dtype, device=types.device)
        types = torch.cat([types, pad], dim=1)
    # One text token appended (its id is never read: the modality ids say "text").
    ids = torch.cat([ids, ids[:, -1:]], dim=1)
    types = torch.cat([types, torch.zeros_like(types[:, -1:])], dim=1)
    grids = {k: vision[k] for k in families.POSITION_KEYS if k in vision}
    pos, _ = rope_index(model.model, ids, mm_token_type_ids=types, **grids)
    following = pos[:, 0, -1]
    if bool((following != following[0]).any()):
        raise ValueError(
            f"{type(model).__name__}.get_rope_index puts a text token at {following.tolist()}, "
            "not at one position on every axis: the engine cannot continue decoding from it."
        )
    return pos[..., :length], int(following[0]) - length
