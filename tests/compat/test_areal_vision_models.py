"""``register_vision_model`` makes AReaL's FSDP engine treat a family as a vision model."""

from __future__ import annotations

from areal.engine.core import model as areal_model

from vlrollout.compat.areal import register_vision_model


def test_registered_family_is_a_vision_model_to_areal(monkeypatch):
    monkeypatch.setattr(areal_model, "VALID_VISION_MODELS", list(areal_model.VALID_VISION_MODELS))
    assert not areal_model.is_valid_vision_model("llava")
    register_vision_model("llava")
    register_vision_model("llava")
    assert areal_model.is_valid_vision_model("llava")
    assert areal_model.VALID_VISION_MODELS.count("llava") == 1
