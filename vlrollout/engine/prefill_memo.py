"""The last prefill of an engine that runs one request at a time, kept for the next request of
the same prompt.

A GRPO group sends one prompt n times. A batching engine prefills the group's requests in one
forward, each distinct row once (``worker.distinct_rows``); an engine that runs one request at a
time (deterministic mode, or a family whose decode takes one row) would prefill the same prompt n
times over. Instead, its worker keeps its last prefill's logits and cache, and a request with the
same row (the same tokens and the same prompt inputs) starts from a copy of them: the same
forward of the same inputs, so the same numbers, and a deterministic run's tokens do not change.
It holds one prompt's cache beside the running one, and is forgotten when the weights change.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from vlrollout.engine.inputs import PreparedInputs


def same_inputs(a: PreparedInputs, b: PreparedInputs) -> bool:
    """Whether two prompts' inputs are the same: the same object (a group shares one), or equal
    token types and vision tensors."""
    if a is b:
        return True
    if (a.mm_token_type_ids is None) != (b.mm_token_type_ids is None) or a.vision.keys() != (
        b.vision.keys()
    ):
        return False
    if a.mm_token_type_ids is not None and not torch.equal(
        a.mm_token_type_ids, b.mm_token_type_ids
    ):
        return False
    return all(
        a.vision[k].shape == b.vision[k].shape and torch.equal(a.vision[k], b.vision[k])
        for k in a.vision
    )


@dataclass(frozen=True)
class PrefillMemo:
    """One row's prefill: its tokens and prompt inputs, its M-RoPE position delta, its last
    ``[1, vocab]`` logits and its cache. Never handed out itself: :meth:`copies` gives the
    caller its own logits and cache to sample from and decode into."""

    row: tuple[int, ...]
    inputs: PreparedInputs
    rope_delta: int
    logits: torch.Tensor
    cache: Any

    def serves(self, row: list[int], inputs: PreparedInputs) -> bool:
        """Whether a prefill of ``row`` with ``inputs`` would compute exactly this one."""
        return self.row == tuple(row) and same_inputs(self.inputs, inputs)

    def copies(self) -> tuple[torch.Tensor, Any]:
        """Copies of the logits and the cache (a decode step appends to its cache in place)."""
        return self.logits.clone(), copy.deepcopy(self.cache)
