"""The engine's model embeds pre-cut image patches with a matrix product instead of oneDNN's 3-D
convolution: the same embeddings up to float rounding, from the current weights."""

from __future__ import annotations

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from tests.engine.batches import generate_all
from vlrollout.engine import LocalInferenceEngine, patch_embed
from vlrollout.testing.tiny_families import tiny_vlm
from vlrollout.testing.tiny_model import tiny_qwen2vl

PATCH_FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v"]


def _conv(bias: bool, **kw) -> torch.nn.Conv3d:
    torch.manual_seed(0)
    return torch.nn.Conv3d(3, 16, kernel_size=(2, 4, 4), stride=(2, 4, 4), bias=bias, **kw)


@pytest.mark.parametrize("bias", [False, True])
def test_one_kernel_inputs_give_the_convolutions_embeddings(bias):
    conv = _conv(bias)
    patches = torch.randn(37, 3, 2, 4, 4)
    want = conv(patches)
    assert patch_embed.install(conv) == 1
    got = conv(patches)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)


def test_larger_inputs_still_run_the_convolution():
    conv = _conv(True)
    volume = torch.randn(2, 3, 4, 8, 12)  # 2 x 2 x 3 patches each
    want = conv(volume)
    patch_embed.install(conv)
    torch.testing.assert_close(conv(volume), want, rtol=0, atol=0)


def test_the_product_reads_the_weights_as_they_are_now():
    """Weight updates copy into the parameters: the next call uses them."""
    conv = _conv(True)
    patch_embed.install(conv)
    patches = torch.randn(5, 3, 2, 4, 4)
    with torch.no_grad():
        conv.weight.mul_(-3.0)
        conv.bias.add_(1.0)
    want = torch.nn.functional.conv3d(patches, conv.weight, conv.bias, stride=conv.stride)
    torch.testing.assert_close(conv(patches), want)


@pytest.mark.parametrize(
    "kw",
    [dict(padding=1), dict(dilation=2), dict(stride=(1, 2, 2))],
    ids=["padding", "dilation", "stride"],
)
def test_convolutions_that_do_not_tile_are_left_alone(kw):
    torch.manual_seed(0)
    kw = {"stride": (2, 4, 4), **kw}
    conv = torch.nn.Conv3d(3, 8, kernel_size=(2, 4, 4), **kw)
    assert patch_embed.install(conv) == 0


def test_installing_twice_changes_nothing_more():
    model, _ = tiny_qwen2vl(seed=0)
    assert patch_embed.install(model) == 1
    assert patch_embed.install(model) == 0


@pytest.mark.parametrize("family", PATCH_FAMILIES)
def test_the_vision_tower_gives_the_same_features(family):
    """Each family's patch embedding, on the features its tower returns for real pixels."""
    model, _ = tiny_vlm(family, seed=1)
    tower = model.model.visual
    grid = torch.tensor([[1, 8, 8]])
    patch_dim = tower.patch_embed.proj.weight[0].numel()
    pixels = torch.randn(64, patch_dim, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        want = model.model.get_image_features(pixel_values=pixels, image_grid_thw=grid)
        assert patch_embed.install(model) == 1
        got = model.model.get_image_features(pixel_values=pixels, image_grid_thw=grid)
    torch.testing.assert_close(got.pooler_output, want.pooler_output, rtol=1e-4, atol=1e-5)


def test_the_engine_embeds_patches_without_the_convolution(vision_prompt, monkeypatch):
    """A request through the engine never calls the 3-D convolution: its model was changed when
    the engine took it."""
    calls = []
    conv3d = torch.nn.functional.conv3d

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return conv3d(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "conv3d", counting)
    model, processor = tiny_qwen2vl(seed=0)
    prompt = vision_prompt(seed=1)
    gconfig = GenerationHyperparameters(max_new_tokens=2, min_new_tokens=2, greedy=True)
    req = ModelRequest(
        input_ids=prompt["input_ids"],
        metadata={"multi_modal_input": prompt["mm"]},
        gconfig=gconfig,
    )
    with torch.inference_mode():
        model(input_ids=torch.tensor([prompt["input_ids"]]), **prompt["mm"])
    assert calls, "the model's own forward runs the convolution"
    calls.clear()
    with LocalInferenceEngine(model, processor, max_batch_size=2) as engine:
        generate_all(engine, [req])
    assert calls == []
