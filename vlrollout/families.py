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

Sources (transformers 5.3): ``modeling_qwen2_vl.py``/``modeling_qwen2_5_vl.py``/
``modeling_qwen3_vl.py``/``modeling_qwen3_5.py`` (``get_rope_index``), ``modeling_gemma3.py``
(``create_causal_mask_mapping``: ``token_type_ids`` add a bidirectional mask within each image
during the first forward), ``modeling_llava.py``, ``modeling_llava_onevision.py``
(``image_sizes``), ``modeling_idefics3.py`` (``pixel_values``/``pixel_attention_mask`` per
sequence).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

IMAGE_TOKEN_ATTRS = ("image_token_id", "image_token_index")
"""Config attributes naming the image placeholder token, in the order families use them."""


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


def image_token_id(config: Any) -> int | None:
    """The image placeholder id of a model config (``image_token_id`` or ``image_token_index``)."""
    for attr in IMAGE_TOKEN_ATTRS:
        value = getattr(config, attr, None)
        if isinstance(value, int) and value >= 0:
            return value
    return None
