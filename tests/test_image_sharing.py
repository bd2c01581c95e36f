"""Each distinct image of a forward is encoded once, and the forward and its gradients stay those
of the model that encodes every copy."""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image

from vlrollout import image_sharing
from vlrollout.image_sharing import distinct_images
from vlrollout.testing.tiny_families import count_image_encodings, tiny_vlm

TRAINABLE = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")


def test_copies_are_found_by_pixels_not_by_sums():
    a = torch.arange(8.0).view(4, 2)
    a_permuted = a.flip(0)  # same grid, same sum, other pixels
    a_nudged = a.clone()
    a_nudged[3, 1] += 1e-6
    px = torch.cat([a, a_permuted, a, a_nudged, a])
    found = distinct_images(px, torch.tensor([[1, 2, 2]] * 5))
    assert found.kept == [0, 1, 3]
    assert found.source == [0, 1, 0, 2, 0]


def test_same_pixels_in_another_grid_are_another_image():
    px = torch.arange(8.0).view(4, 2)
    found = distinct_images(torch.cat([px, px]), torch.tensor([[1, 2, 2], [1, 1, 4]]))
    assert found.kept == [0, 1]


def _batch(processor, sizes_and_colours):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi?"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    images = [Image.new("RGB", size, colour) for size, colour in sizes_and_colours]
    return processor(text=[prompt] * len(images), images=images, padding=True, return_tensors="pt")


def _forward_and_grads(model, batch, weights):
    model.zero_grad()
    logits = model(**batch).logits
    (logits * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.mark.parametrize("family", TRAINABLE)
def test_forward_and_gradients_equal_encoding_every_copy(family):
    model, processor = tiny_vlm(family)
    a, b = ((56, 56), (200, 30, 30)), ((84, 56), (10, 220, 90))
    batch = _batch(processor, [a, a, b, a])
    shared = copy.deepcopy(model)
    assert image_sharing.install(shared)
    assert not image_sharing.install(shared)  # once

    encoded = count_image_encodings(shared)
    torch.manual_seed(0)
    logits = model(**batch).logits
    weights = torch.randn_like(logits)
    want, want_grads = _forward_and_grads(model, batch, weights)
    got, got_grads = _forward_and_grads(shared, batch, weights)

    assert encoded == [2]  # the two distinct images, not four
    assert (got - want).abs().max().item() < 1e-5
    assert got_grads.keys() == want_grads.keys()
    vision = [n for n in want_grads if "visual" in n]
    assert vision, "the vision tower must get gradients"
    for name, grad in want_grads.items():  # equal up to the order of float additions
        gap = (got_grads[name] - grad).norm().item()
        assert gap <= 1e-4 * grad.norm().item() + 1e-9, (name, gap, grad.norm().item())


def test_a_model_outside_the_known_families_is_left_alone():
    model, _ = tiny_vlm("qwen2_vl")
    model.config.model_type = "my_vlm"
    before = model.model.get_image_features
    assert not image_sharing.install(model)
    assert model.model.get_image_features == before


def test_a_copy_of_a_wrapped_model_encodes_with_its_own_weights():
    """``copy.deepcopy`` of a wrapped model (a reference copy kept before a weight update)
    encodes with the copy's vision tower, not the original's."""
    model, processor = tiny_vlm("qwen2_vl")
    image_sharing.install(model)
    copied = copy.deepcopy(model)
    batch = _batch(processor, [((56, 56), (200, 30, 30))] * 2)
    with torch.no_grad():
        before = copied(**batch).logits
        for p in model.model.visual.parameters():
            p.add_(1.0)  # the original changes; the copy must not notice
        after = copied(**batch).logits
    assert torch.equal(before, after)


@pytest.mark.parametrize("family", TRAINABLE)
def test_a_remembered_image_is_not_encoded_again_by_a_later_forward(family):
    """The engine's memo: a group larger than the engine's free rows prefills in several
    forwards; the later ones reuse the first one's features of the same image."""
    model, processor = tiny_vlm(family)
    a, b = ((56, 56), (200, 30, 30)), ((84, 56), (10, 220, 90))
    remembering = copy.deepcopy(model)
    assert image_sharing.install(remembering, memo_bytes=64 << 20)
    encoded = count_image_encodings(remembering)
    with torch.inference_mode():
        for images in ([a, a], [a, b, a], [b], [a]):
            batch = _batch(processor, images)
            got, want = remembering(**batch).logits, model(**batch).logits
            assert (got - want).abs().max().item() < 1e-5
    assert encoded == [1, 1]  # a once, then b once; the last two forwards encode nothing


def test_new_weights_make_the_memo_forget():
    model, processor = tiny_vlm("qwen2_vl")
    image_sharing.install(model, memo_bytes=64 << 20)
    encoded = count_image_encodings(model)
    batch = _batch(processor, [((56, 56), (200, 30, 30))])
    with torch.inference_mode():
        model(**batch)
        image_sharing.forget(model)
        model(**batch)
    assert encoded == [1, 1]


def test_the_memo_keeps_within_its_bytes_and_is_not_used_with_gradients():
    model, processor = tiny_vlm("qwen2_vl")
    image_sharing.install(model, memo_bytes=1)  # room for no image
    encoded = count_image_encodings(model)
    batch = _batch(processor, [((56, 56), (200, 30, 30))])
    with torch.inference_mode():
        model(**batch)
        model(**batch)
    trained, _ = tiny_vlm("qwen2_vl")
    image_sharing.install(trained, memo_bytes=64 << 20)
    encoded_in_training = count_image_encodings(trained)
    trained(**batch)
    trained(**batch)
    assert encoded == [1, 1] and encoded_in_training == [1, 1]


def test_a_copy_of_a_model_with_a_memo_has_an_empty_memo_of_its_own():
    """A reference copy (``copy.deepcopy``) of an engine's model: the memo's lock does not
    travel, and the copy remembers nothing of the original's images, so it encodes its first
    image itself and remembers it in its own memo."""
    model, processor = tiny_vlm("qwen2_vl")
    image_sharing.install(model, memo_bytes=64 << 20)
    batch = _batch(processor, [((56, 56), (200, 30, 30))])
    with torch.inference_mode():
        model(**batch)
    copied = copy.deepcopy(model)
    encoded = count_image_encodings(copied)
    with torch.inference_mode():
        copied(**batch)
        copied(**batch)
    assert encoded == [1]
