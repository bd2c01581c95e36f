"""``register_vision_model`` makes AReaL's FSDP engine treat a family as a vision model;
``keep_vision_embeddings_in_parent`` keeps a vision tower's embedding tables out of FSDP units of
their own."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from areal.engine import fsdp_utils
from areal.engine.core import model as areal_model
from areal.engine.fsdp_utils import parallel as fsdp_parallel

from vlrollout.compat.areal import keep_vision_embeddings_in_parent, register_vision_model


def test_registered_family_is_a_vision_model_to_areal(monkeypatch):
    monkeypatch.setattr(areal_model, "VALID_VISION_MODELS", list(areal_model.VALID_VISION_MODELS))
    assert not areal_model.is_valid_vision_model("llava")
    register_vision_model("llava")
    register_vision_model("llava")
    assert areal_model.is_valid_vision_model("llava")
    assert areal_model.VALID_VISION_MODELS.count("llava") == 1


class _Model(torch.nn.Module):
    def __init__(self, model_type: str):
        super().__init__()
        self.config = SimpleNamespace(model_type=model_type)
        self.embed_tokens = torch.nn.Embedding(4, 2)
        self.position_table = torch.nn.Embedding(3, 2)  # a vision tower's, read by .weight

    def get_input_embeddings(self):
        return self.embed_tokens


def test_only_the_text_embeddings_get_a_unit_of_their_own(monkeypatch):
    """AReaL's apply_fsdp2 shards every nn.Embedding through fully_shard; for the named model
    types the fence lets only the text input embeddings through, other types unchanged."""
    sharded: list[torch.nn.Module] = []

    def areal_apply_fsdp2(model, fsdp_kwargs, wrap_policy):  # what AReaL's does with embeddings
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding):
                fsdp_utils.fully_shard(m)

    monkeypatch.setattr(fsdp_parallel, "apply_fsdp2", areal_apply_fsdp2)
    monkeypatch.setattr(fsdp_utils, "fully_shard", lambda m, **_: sharded.append(m))
    keep_vision_embeddings_in_parent(["glm4v"])
    keep_vision_embeddings_in_parent(["lfm2_vl"])  # adds to the types, does not wrap twice
    glm, lfm, other = _Model("glm4v"), _Model("lfm2_vl"), _Model("llava")
    for model in (glm, lfm, other):
        fsdp_parallel.apply_fsdp2(model, {}, None)
    assert sharded == [glm.embed_tokens, lfm.embed_tokens, other.embed_tokens, other.position_table]
