"""A prefill hands the model and its vision tower the request's own pixel tensor: a prompt of
4,096 image tokens has 77 MB of float32 patch rows, and each copy of them is that much more peak
memory than ``generate`` needs for the same prompt."""

from __future__ import annotations

import gc
import time
import weakref

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from tests.engine.batches import generate_all
from vlrollout.engine import LocalInferenceEngine, patch_embed
from vlrollout.testing.tiny_families import count_image_encodings
from vlrollout.testing.tiny_model import tiny_qwen2vl


def _group(prompt, n: int) -> list[ModelRequest]:
    gconfig = GenerationHyperparameters(max_new_tokens=2, min_new_tokens=2, greedy=True)
    meta = {"multi_modal_input": prompt["mm"]}
    return [ModelRequest(input_ids=prompt["input_ids"], metadata=meta, gconfig=gconfig)] * n


def _storages(module: torch.nn.Module, argument: str) -> list[int]:
    """The storage address of ``argument`` (keyword or first positional) at every call of
    ``module`` (a pre-hook that stays on the model)."""
    seen: list[int] = []

    def spy(_module, args, kwargs):
        value = kwargs.get(argument, args[0] if args else None)
        if value is not None:
            seen.append(value.untyped_storage().data_ptr())

    module.register_forward_pre_hook(spy, with_kwargs=True)
    return seen


def test_a_prefill_of_one_distinct_row_passes_the_request_pixels_uncopied(vision_prompt):
    """One request, or a group of one prompt (one distinct row), needs no concatenation."""
    model, processor = tiny_qwen2vl(seed=0)
    seen = _storages(model.model, "pixel_values")
    prompt = vision_prompt(seed=1)
    own = prompt["mm"]["pixel_values"].untyped_storage().data_ptr()
    with LocalInferenceEngine(model, processor, max_batch_size=4) as engine:
        generate_all(engine, _group(prompt, 1))
        generate_all(engine, _group(prompt, 3))
    assert seen == [own, own]


def test_the_vision_tower_encodes_the_request_pixels_uncopied(vision_prompt):
    """The image-sharing wrapper gives the tower a view of the forward's pixels when the images
    it encodes are consecutive rows of them (here: two distinct images of one prompt)."""
    model, processor = tiny_qwen2vl(seed=0)
    seen = _storages(model.model.visual, "hidden_states")
    prompt = vision_prompt(seed=1, n_images=2)
    own = prompt["mm"]["pixel_values"].untyped_storage().data_ptr()
    with LocalInferenceEngine(model, processor, max_batch_size=4) as engine:
        generate_all(engine, _group(prompt, 1))
    assert seen == [own]


def test_kept_features_of_pixels_changed_in_place_are_not_reused(vision_prompt):
    """The engine's kept image features are keyed by views of the forward's own pixels: a
    caller that then writes another picture into that tensor gets the new picture encoded,
    not the old one's features (the model's output equals a fresh forward's)."""
    model, processor = tiny_qwen2vl(seed=0)
    encoded = count_image_encodings(model)
    first, second = vision_prompt(seed=3), vision_prompt(seed=4)
    grid = first["mm"]["image_grid_thw"]
    assert torch.equal(grid, second["mm"]["image_grid_thw"])
    ids = torch.tensor([first["input_ids"]])
    pixels = first["mm"]["pixel_values"].clone()
    with LocalInferenceEngine(model, processor, max_batch_size=2), torch.inference_mode():
        model(input_ids=ids, pixel_values=pixels, image_grid_thw=grid)
        pixels.copy_(second["mm"]["pixel_values"])  # the buffer reused for another picture
        got = model(input_ids=ids, pixel_values=second["mm"]["pixel_values"], image_grid_thw=grid)
    fresh, _ = tiny_qwen2vl(seed=0)
    patch_embed.install(fresh)  # embeds patches as the engine's model does
    with torch.inference_mode():
        want = fresh(input_ids=ids, pixel_values=second["mm"]["pixel_values"], image_grid_thw=grid)
    assert encoded == [1, 1]
    torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=0)


def test_a_finished_request_leaves_its_pixels_to_the_caller(vision_prompt):
    """The engine prepares a group's prompt once for the requests of it in flight, and keeps
    nothing of it once they are done: the caller dropping the prompt frees its pixels."""
    model, processor = tiny_qwen2vl(seed=0)
    prompt = vision_prompt(seed=1)
    prompt["mm"] = {k: v.clone() for k, v in prompt["mm"].items()}
    pixels = weakref.ref(prompt["mm"]["pixel_values"])
    with LocalInferenceEngine(model, processor, max_batch_size=4) as engine:
        generate_all(engine, _group(prompt, 3))
        assert engine.stats()["prefill_batches"] == 1
        del prompt
        deadline = time.monotonic() + 10  # the worker drops its kept features once idle
        while pixels() is not None and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.01)
        assert pixels() is None


def test_a_refused_request_keeps_no_prepared_prompt(vision_prompt):
    model, processor = tiny_qwen2vl(seed=0)
    prompt = vision_prompt(seed=1)
    prompt["input_ids"] = [*prompt["input_ids"], model.config.text_config.vocab_size]
    with LocalInferenceEngine(model, processor, max_batch_size=4) as engine:
        with pytest.raises(ValueError, match="outside the model's vocabulary"):
            generate_all(engine, _group(prompt, 2))
        assert len(engine._in_flight) == 0
