"""Attention per packed sequence: the same logits and gradients as sdpa over the whole row."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.train.test_family_training import TRAINABLE, _prepared
from vlrollout.families import FAMILIES
from vlrollout.testing.tiny_families import tiny_vlm
from vlrollout.train import packed_attention
from vlrollout.train.packed_attention import causal_segments
from vlrollout.train.packing import mrope_positions, separate_packed_sequences

MROPE_TRAINABLE = tuple(f for f in TRAINABLE if FAMILIES[f].positions == "mrope")
"""The trainable families this test packs by hand (3-D positions from ``get_rope_index``, one
grid per image); every trainable family's packed gradient is checked in test_family_training."""


def _block_causal(lengths: list[int]) -> torch.Tensor:
    n = sum(lengths)
    seg = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    return (seg[:, None] == seg[None, :]) & torch.ones(n, n, dtype=torch.bool).tril()


def test_segments_are_read_off_a_block_causal_mask():
    assert causal_segments(_block_causal([3, 1, 4])) == [(0, 3), (3, 4), (4, 8)]


@pytest.mark.parametrize(
    "broken",
    [
        lambda m: m.index_put_((torch.tensor(5), torch.tensor(1)), torch.tensor(True)),  # across
        lambda m: m.index_put_((torch.tensor(6), torch.tensor(5)), torch.tensor(False)),  # a hole
        lambda m: m.index_put_((torch.tensor(4), torch.tensor(6)), torch.tensor(True)),  # future
    ],
)
def test_any_other_mask_is_left_to_sdpa(broken):
    mask = _block_causal([3, 1, 4])
    assert causal_segments(broken(mask)) is None


def _packed_batch(processor, model):
    seqs = [
        _prepared(processor, "What is this?", (64, 48)),
        _prepared(processor, "Only text here."),
        _prepared(processor, "And this one?", (40, 90)),
    ]
    lens = [s["input_ids"].shape[1] for s in seqs]
    pad = 5
    ids = torch.cat([s["input_ids"] for s in seqs], 1)
    mb = {
        "input_ids": torch.cat([ids, torch.zeros(1, pad, dtype=ids.dtype)], 1),
        "mm_token_type_ids": torch.cat(
            [*(s["mm_token_type_ids"] for s in seqs), torch.zeros(1, pad, dtype=torch.long)], 1
        ),
        "cu_seqlens": torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32),
        "image_grid_thw": torch.cat([s["image_grid_thw"] for s in seqs if "image_grid_thw" in s]),
    }
    mb["position_ids"] = mrope_positions(model.model, mb)
    separate_packed_sequences(mb)  # as the trainer's micro-batches: positions restart, no mask
    mb["pixel_values"] = torch.cat([s["pixel_values"] for s in seqs if "pixel_values" in s])
    del mb["cu_seqlens"]
    return mb, len(seqs) + 1  # the trailing padding is one more segment


def _logits_and_grads(model, mb):
    model.zero_grad()
    logits = model(**{**mb, "attention_mask": None}, use_cache=False).logits
    logits.pow(2).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.mark.parametrize("family", MROPE_TRAINABLE)
def test_packed_row_gives_sdpas_logits_and_gradients(family, monkeypatch):
    model, processor = tiny_vlm(family)
    model.set_attn_implementation("sdpa")
    mb, n_segments = _packed_batch(processor, model)
    packed = copy.deepcopy(model)
    assert packed_attention.install(packed)
    assert not packed_attention.install(packed)  # only a model on sdpa is switched

    split: list[int] = []
    real = packed_attention.causal_segments
    monkeypatch.setattr(
        packed_attention,
        "causal_segments",
        lambda m: split.append(len(s := real(m) or [])) or (s or None),
    )
    want, want_grads = _logits_and_grads(model, mb)
    got, got_grads = _logits_and_grads(packed, mb)

    assert split and set(split) == {n_segments}  # every decoder attention ran per sequence
    assert (got - want).abs().max().item() < 1e-4
    assert got_grads.keys() == want_grads.keys()
    for name, grad in want_grads.items():
        gap = (got_grads[name] - grad).norm().item()
        assert gap <= 1e-4 * grad.norm().item() + 1e-9, (name, gap)
