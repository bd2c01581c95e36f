"""The tiny random models of every family agree with their processors, see their images, and save
and load offline."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from vlrollout.testing.tiny_families import (
    MODEL_CLASSES,
    TINY_FAMILIES,
    save_tiny_vlm,
    tiny_vlm,
)

QUESTION = [{"type": "text", "text": "Look at this: "}]


def _messages(n_images: int) -> list[dict]:
    """One user turn: text, then ``n_images`` images, then a question."""
    parts = QUESTION + [{"type": "image"}] * n_images + [{"type": "text", "text": "How many?"}]
    return [{"role": "user", "content": parts}]


def _striped(size: tuple[int, int], a: tuple[int, int, int], b: tuple[int, int, int]):
    """An RGB image of vertical stripes, 7 px wide, alternating ``a`` and ``b``."""
    image = Image.new("RGB", size, a)
    for x in range(0, size[0], 14):
        image.paste(Image.new("RGB", (7, size[1]), b), (x, 0))
    return image


IMAGES = [_striped((40, 70), (0, 0, 255), (255, 255, 0)), Image.new("RGB", (90, 50), "green")]
"""Two images of different sizes and contents (Idefics3/SmolVLM split the wide one into tiles)."""


def _inputs(processor, images: list[Image.Image]):
    text = processor.apply_chat_template(_messages(len(images)), add_generation_prompt=True)
    return processor(text=[text], images=[images], return_tensors="pt")


def _logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).logits


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def built(family):
    return tiny_vlm(family)


@pytest.fixture(scope="module")
def saved(family, tmp_path_factory):
    return save_tiny_vlm(family, tmp_path_factory.mktemp(family))


def _image_token_id(config) -> int:
    return config.image_token_id if hasattr(config, "image_token_id") else config.image_token_index


def test_model_class_and_image_token_id_match_processor(family, built):
    model, processor = built
    assert type(model).__name__ == MODEL_CLASSES[family]
    processor_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    assert _image_token_id(model.config) == processor_id
    inputs = _inputs(processor, [Image.new("RGB", (40, 30), "red")])
    assert (inputs["input_ids"] == processor_id).sum() > 0
    assert model.config.get_text_config().vocab_size >= len(processor.tokenizer)


@pytest.mark.parametrize(
    "images",
    [
        [Image.new("RGB", (60, 45), (200, 30, 30))],
        IMAGES,
    ],
    ids=["one_image", "two_images"],
)
def test_forward_gives_finite_logits_of_full_shape(built, images):
    model, processor = built
    inputs = _inputs(processor, images)
    logits = _logits(model, inputs)
    vocab = model.config.get_text_config().vocab_size
    assert logits.shape == (1, inputs["input_ids"].shape[1], vocab)
    assert torch.isfinite(logits).all()


def test_image_pixels_reach_the_last_logits(built):
    model, processor = built
    first = _inputs(processor, [_striped((56, 56), (255, 0, 0), (0, 0, 0))])
    second = _inputs(processor, [_striped((56, 56), (0, 0, 255), (255, 255, 255))])
    assert torch.equal(first["input_ids"], second["input_ids"])
    assert not torch.equal(first["pixel_values"], second["pixel_values"])
    diff = (_logits(model, first)[0, -1] - _logits(model, second)[0, -1]).abs().max()
    assert diff > 1e-3


def test_next_token_distribution_is_far_from_uniform(built):
    model, processor = built
    probs = _logits(model, _inputs(processor, [Image.new("RGB", (60, 45), "red")]))[0, -1]
    probs = probs.softmax(-1)
    assert probs.max() > 10 / probs.numel()
    assert model.lm_head.weight is not model.get_input_embeddings().weight


def test_save_and_load_give_identical_logits(family, built, saved):
    """The loaded model is bit-identical; so is the loaded processor when asked for the saved image
    processor's speed (by default transformers 5 upgrades a saved slow one to its fast variant)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model, processor = built
    loaded = AutoModelForImageTextToText.from_pretrained(saved, local_files_only=True).eval()
    use_fast = type(processor.image_processor).__name__.endswith("Fast")
    loaded_processor = AutoProcessor.from_pretrained(
        saved, local_files_only=True, use_fast=use_fast
    )
    assert type(loaded).__name__ == MODEL_CLASSES[family]
    assert type(loaded_processor) is type(processor)
    assert type(loaded_processor.image_processor) is type(processor.image_processor)
    inputs = _inputs(processor, IMAGES)
    loaded_inputs = _inputs(loaded_processor, IMAGES)
    assert inputs.keys() == loaded_inputs.keys()
    for key in inputs:
        assert torch.equal(inputs[key], loaded_inputs[key]), key
    assert torch.equal(_logits(model, inputs), _logits(loaded, loaded_inputs))
    assert loaded.generation_config.eos_token_id == processor.tokenizer.eos_token_id


def test_default_processor_load_gives_the_same_tokens(built, saved):
    from transformers import AutoProcessor

    _, processor = built
    inputs = _inputs(processor, IMAGES)
    loaded_inputs = _inputs(AutoProcessor.from_pretrained(saved, local_files_only=True), IMAGES)
    assert inputs.keys() == loaded_inputs.keys()
    for key in inputs.keys() - {"pixel_values"}:
        assert torch.equal(inputs[key], loaded_inputs[key]), key
    assert inputs["pixel_values"].shape == loaded_inputs["pixel_values"].shape


def test_qwen2_5_vl_saves_tokens_per_second_2(tmp_path):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(save_tiny_vlm("qwen2_5_vl", tmp_path))
    assert config.vision_config.tokens_per_second == 2


def test_seed_and_dtype_and_lm_head_std():
    model, _ = tiny_vlm("llava", seed=0, dtype=torch.bfloat16, lm_head_std=0.5)
    same, _ = tiny_vlm("llava", seed=0, dtype=torch.bfloat16, lm_head_std=0.5)
    other, _ = tiny_vlm("llava", seed=1, dtype=torch.bfloat16, lm_head_std=0.5)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert torch.equal(model.lm_head.weight, same.lm_head.weight)
    assert not torch.equal(model.lm_head.weight, other.lm_head.weight)
    assert model.lm_head.weight.float().std().item() == pytest.approx(0.5, rel=0.05)
    assert not model.training


def test_unknown_family_is_rejected_with_the_known_ones():
    with pytest.raises(ValueError, match="qwen2_vl"):
        tiny_vlm("blip2")
