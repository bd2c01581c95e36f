"""Trainer logprobs on a packed batch equal the rollout's on the CPU (sdpa, float32).

AReaL packs all 36 trajectories into one micro-batch here; without the packing fix later
sequences attend to earlier ones (trainer logprobs off by up to 14 nats on this CPU).
"""

from __future__ import annotations

import pytest
import torch

from tests.train.conftest import max_logp_gap, rollout
from vlrollout.train.packing import separate_packed_sequences, text_positions

ATOL = 1e-4


@pytest.fixture(scope="module")
def trajectories(engine):
    from vlrollout.tiny.synthetic import generate_items

    return rollout(engine, generate_items("mix", 36, seed=11))


def test_packed_batch_logprobs_equal_rollout(actor, trajectories):
    lengths = {t["input_ids"].shape[1] for t in trajectories}
    assert len(trajectories) >= 32 and len(lengths) >= 4, lengths
    assert all(t["multi_modal_input"][0]["pixel_values"].numel() for t in trajectories)
    assert actor.config.attn_impl == "sdpa" and actor.config.dtype == "float32"
    gap = max_logp_gap(trajectories, actor.compute_logp(trajectories))
    assert gap <= ATOL, gap


def test_without_the_fix_packed_sequences_leak(actor, trajectories):
    fixed = actor._prepare_mb_list
    actor._prepare_mb_list = fixed.__wrapped__  # AReaL's own, unwrapped
    try:
        gap = max_logp_gap(trajectories, actor.compute_logp(trajectories))
    finally:
        actor._prepare_mb_list = fixed
    assert gap > 0.1, gap


def test_separate_packed_sequences_shapes():
    mb = {
        "input_ids": torch.zeros(1, 7, dtype=torch.long),
        "cu_seqlens": torch.tensor([0, 3, 5], dtype=torch.int32),
        "position_ids": torch.arange(21).view(3, 1, 7),
        "attention_mask": {"full_attention": None},
    }
    separate_packed_sequences(mb)
    assert mb["attention_mask"] is None
    assert mb["position_ids"].shape == (4, 1, 7)
    assert mb["position_ids"][0, 0].tolist() == [0, 1, 2, 0, 1, 0, 1]
    assert torch.equal(mb["position_ids"][1:], torch.arange(21).view(3, 1, 7))
    assert text_positions(torch.tensor([0, 4]), 4).tolist() == [0, 1, 2, 3]
