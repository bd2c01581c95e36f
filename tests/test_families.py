"""The model-family table: every known family resolves, an unknown vision-language family is
refused with its name and the way to add it, and a registered family is used."""

from __future__ import annotations

import inspect

import pytest
import transformers
from transformers import LlavaConfig, PretrainedConfig, Qwen2Config

from vlrollout.families import (
    FAMILIES,
    TEXT,
    ModelFamily,
    UnsupportedModelError,
    family_of,
    image_token_id,
    register_family,
)
from vlrollout.testing.tiny_families import MODEL_CLASSES, TINY_FAMILIES


def test_every_tiny_family_is_known():
    assert set(TINY_FAMILIES) <= set(FAMILIES)
    assert len(TINY_FAMILIES) == 14


@pytest.mark.parametrize("family", sorted(MODEL_CLASSES))
def test_positions_rule_follows_the_model_class(family):
    """3-D positions exactly for families whose base model computes them (``get_rope_index``:
    Qwen-VL, GLM-4.1V/4.6V); the others take ``0..L-1``."""
    generation_class = getattr(transformers, MODEL_CLASSES[family])
    module = inspect.getmodule(generation_class)
    base = getattr(module, MODEL_CLASSES[family].replace("ForConditionalGeneration", "Model"))
    expected = "mrope" if hasattr(base, "get_rope_index") else "sequential"
    assert FAMILIES[family].positions == expected


def test_a_causal_lm_is_text():
    assert family_of(Qwen2Config()) is TEXT


class _NewVLMConfig(PretrainedConfig):
    model_type = "brand_new_vlm"

    def __init__(self, **kwargs):
        self.vision_config = {}
        super().__init__(**kwargs)


def test_an_unknown_vision_family_is_refused_naming_it():
    with pytest.raises(UnsupportedModelError, match="brand_new_vlm.*register_family"):
        family_of(_NewVLMConfig())


def test_a_registered_family_is_used():
    family = ModelFamily("brand_new_vlm", token_types_input="token_type_ids")
    register_family("brand_new_vlm", family)
    try:
        assert family_of(_NewVLMConfig()) is family
    finally:
        FAMILIES.pop("brand_new_vlm")


def test_an_unsupported_family_says_why(monkeypatch):
    monkeypatch.setitem(FAMILIES, "llava", ModelFamily("llava", unsupported="no reason at all"))
    with pytest.raises(UnsupportedModelError, match="'llava': no reason at all"):
        family_of(LlavaConfig())


def test_image_token_id_reads_either_attribute():
    assert image_token_id(LlavaConfig(image_token_id=7)) == 7
    assert image_token_id(Qwen2Config()) is None
