"""What differs between model families on the model side, in one table keyed by ``model_type``.

The processor side (resize rules, geometry, placeholder strings) lives in
:mod:`vlrollout.processors.families`; this table answers what the engine and a teacher-forced
forward need to feed a model exactly as its own forward and ``generate`` do:

- **positions**: ``"mrope"`` — 3-D positions from the model's ``get_rope_index`` (Qwen-VL); a
  text token appended after a prompt sits where ``get_rope_index`` puts it over prompt + that token
  (see :func:`vlrollout.engine.inputs.prompt_positions`), which is not ``max(prompt) + 1`` when
  the temporal axis of an image is scaled (Qwen2.5-VL's ``tokens_per_second``). ``"sequential"``
  — positions ``0..L-1``.
- **token_types_input**: the forward argument that takes per-token modality ids (0 text, 1
  image): ``mm_token_type_ids`` for Qwen-VL (its 3-D positions), ``token_type_ids`` for Gemma 3
  (image tokens attend to each other bidirectionally during prefill; without them the forward
  silently attends causally), ``None`` when the model takes none.
- **one_row_decode**: why requests of the family decode one at a time, or ``None``: a cache the
  engine cannot merge into a decode batch (Qwen3.5's linear-attention layers keep a recurrent
  state per sequence in their own cache class).
- **unsupported**: a reason the package cannot feed the family, raised when an engine is built.

Videos reach ``get_rope_index`` in the form :func:`rope_grids` gives them: one
``video_grid_thw`` row per run of video tokens (Qwen3-VL writes a timestamp before every temporal
patch, so a video is several runs) and one ``second_per_grid_ts`` entry per run of image or video
tokens (Qwen2.5-VL reads both from one iterator).

Sources (transformers 5.3): ``modeling_qwen2_vl.py``/``modeling_qwen2_5_vl.py``/
``modeling_qwen3_vl.py``/``modeling_qwen3_5.py`` (``get_rope_index``), ``modeling_gemma3.py``
(``create_causal_mask_mapping``: ``token_type_ids`` add a bidirectional mask within each image
during the first forward), ``modeling_llava.py``, ``modeling_llava_onevision.py``
(``image_sizes``), ``modeling_idefics3.py`` (``pixel_values``/``pixel_attention_mask`` per
sequence).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from transformers import AutoConfig

IMAGE_TOKEN_ATTRS = ("image_token_id", "image_token_index")
"""Config attributes naming the image placeholder token, in the order families use them."""

POSITION_KEYS = ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")
"""Vision inputs a Qwen-VL ``get_rope_index`` reads (in :func:`rope_grids`' form)."""

VIDEO_INPUT_KEYS = frozenset({"pixel_values_videos", "video_grid_thw", "second_per_grid_ts"})
"""Processor outputs that carry videos (every other vision key carries images): the frames, their
grid, and Qwen2.5-VL's seconds per temporal patch."""


class UnsupportedModelError(ValueError):
    """The package cannot feed this model family: the family and the missing piece are named."""


@dataclass(frozen=True)
class ModelFamily:
    """How to feed one model family.

    Attributes:
        name: The family (the config's ``model_type``, or ``"text"`` for causal LMs).
        positions: ``"mrope"`` or ``"sequential"`` (see the module docstring).
        token_types_input: Forward argument taking per-token modality ids, or ``None``.
        one_row_decode: Why requests decode one at a time, or ``None`` (they batch).
        unsupported: Why the package refuses the family, or ``None``.
    """

    name: str
    positions: Literal["mrope", "sequential"] = "sequential"
    token_types_input: str | None = None
    one_row_decode: str | None = None
    unsupported: str | None = None


_QWEN = dict(positions="mrope", token_types_input="mm_token_type_ids")
_LINEAR_ATTENTION = (
    "its linear-attention layers keep a recurrent state per sequence in a cache the engine "
    "cannot merge into a decode batch"
)
_SHORT_CONVOLUTION = (
    "its short-convolution layers keep a convolution state per sequence in a cache "
    "(Lfm2HybridConvCache) the engine cannot merge into a decode batch"
)
FAMILIES: dict[str, ModelFamily] = {
    "qwen2_vl": ModelFamily("qwen2_vl", **_QWEN),
    "qwen2_5_vl": ModelFamily("qwen2_5_vl", **_QWEN),
    "qwen3_vl": ModelFamily("qwen3_vl", **_QWEN),
    "qwen3_vl_moe": ModelFamily("qwen3_vl_moe", **_QWEN),
    "qwen3_5": ModelFamily("qwen3_5", **_QWEN, one_row_decode=_LINEAR_ATTENTION),
    "qwen3_5_moe": ModelFamily("qwen3_5_moe", **_QWEN, one_row_decode=_LINEAR_ATTENTION),
    "gemma3": ModelFamily("gemma3", token_types_input="token_type_ids"),
    "llava": ModelFamily("llava"),
    "llava_next": ModelFamily("llava_next"),
    "llava_onevision": ModelFamily("llava_onevision"),
    "idefics3": ModelFamily("idefics3"),
    "smolvlm": ModelFamily("smolvlm"),
    "internvl": ModelFamily("internvl"),
    "glm4v": ModelFamily("glm4v", **_QWEN),
    "glm46v": ModelFamily("glm46v", **_QWEN),
    "mistral3": ModelFamily("mistral3"),
    "lfm2_vl": ModelFamily("lfm2_vl", one_row_decode=_SHORT_CONVOLUTION),
}
TEXT = ModelFamily("text")


def register_family(model_type: str, family: ModelFamily) -> None:
    """Teach the package a model family it does not know (a user's own architecture)."""
    FAMILIES[model_type] = family


def family_of(config: Any) -> ModelFamily:
    """The :class:`ModelFamily` of a model config; a causal LM without a vision tower is ``TEXT``.

    Raises:
        UnsupportedModelError: a vision-language ``model_type`` the table does not hold, or one
            it holds as unsupported.
    """
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(model_type)
    if family is None:
        if not hasattr(config, "vision_config"):
            return TEXT
        raise UnsupportedModelError(
            f"model family {model_type!r} is not known to vlrollout: its position rule, "
            "and modality-id input are unknown. Known families: "
            f"{', '.join(sorted(FAMILIES))}; add yours with "
            "vlrollout.families.register_family(model_type, ModelFamily(...))."
        )
    if family.unsupported:
        raise UnsupportedModelError(f"model family {model_type!r}: {family.unsupported}")
    return family


def video_token_id(config: Any) -> int | None:
    """The video placeholder id of a model config, ``None`` for image-only families."""
    for attr in ("video_token_id", "video_token_index"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value >= 0:
            return value
    return None


def context_length(config: Any) -> int | None:
    """The positions the model has embeddings for (its text config's
    ``max_position_embeddings``), ``None`` when the config does not say."""
    text = getattr(config, "text_config", None) or config
    n = getattr(text, "max_position_embeddings", None)
    return n if isinstance(n, int) and n > 0 else None


def image_token_id(config: Any) -> int | None:
    """The image placeholder id of a model config (``image_token_id`` or ``image_token_index``)."""
    for attr in IMAGE_TOKEN_ATTRS:
        value = getattr(config, attr, None)
        if isinstance(value, int) and value >= 0:
            return value
    return None


def modality_runs(mm_token_type_ids: torch.Tensor) -> list[int]:
    """The modality of each run of image (1) or video (2) tokens, in order.

    >>> modality_runs(torch.tensor([[0, 1, 1, 0, 2, 2, 0, 2, 1]]))
    [1, 2, 2, 1]
    """
    types = mm_token_type_ids.reshape(-1)
    starts = torch.ones_like(types, dtype=torch.bool)
    starts[1:] = types[1:] != types[:-1]
    return [int(t) for t in types[starts & (types != 0)].tolist()]


def rope_grids(
    vision: Mapping[str, torch.Tensor], mm_token_type_ids: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``vision`` (one sequence's tensors) with its video grids in the form the Qwen-VL
    ``get_rope_index`` of transformers 5.3 reads: one grid row per run of modality ids.

    - ``video_grid_thw``: where the prompt holds one run of video tokens per temporal patch
      (Qwen3-VL and Qwen3.5 write a timestamp before each) and the grid one row ``[t, h, w]`` per
      video, each row becomes ``t`` rows ``[1, h, w]``. ``get_rope_index`` takes one row per run
      (it raises ``StopIteration`` on the processor's own output otherwise); the vision tower
      encodes each temporal patch on its own, so its features are the same either way.
    - ``second_per_grid_ts`` (Qwen2.5-VL, one entry per video): ``get_rope_index`` takes one
      entry per image *or* video run, so an image before a video would take the video's entry
      (and the video raise ``StopIteration``). Each image run gets ``1.0`` in front of its place
      (an image is one temporal patch: its spacing is never read); nothing else reads the key.

    Anything already in that form, or without videos, comes back unchanged (the function is
    idempotent).
    """
    out = dict(vision)
    runs = modality_runs(mm_token_type_ids)
    grid = vision.get("video_grid_thw")
    n_video = runs.count(2)
    if grid is not None and n_video != len(grid) and n_video == int(grid[:, 0].sum()):
        frames = grid.repeat_interleave(grid[:, 0], dim=0)
        frames[:, 0] = 1
        out["video_grid_thw"] = frames
    seconds = vision.get("second_per_grid_ts")
    if seconds is not None and 1 in runs and len(seconds) == n_video:
        per_video = iter(seconds.tolist())
        aligned = [1.0 if kind == 1 else next(per_video) for kind in runs]
        out["second_per_grid_ts"] = torch.tensor(
            aligned, dtype=seconds.dtype, device=seconds.device
        )
    return out


def family_name_at(path: str) -> str:
    """The family name of the model in folder ``path``, from its config (local files only): how
    its boxes are read and its prompts built.

    Raises:
        ValueError: the config cannot be read, or names no supported family (the reason).
    """
    try:
        return family_of(AutoConfig.from_pretrained(path, local_files_only=True)).name
    except (OSError, ValueError, UnsupportedModelError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"{path}: cannot read the model family from its config ({reason})"
        ) from None
