"""Prefilled prompt rows kept for queued requests that send the same prompt.

A GRPO group sends one prompt (the same tokens and image tensors) ``group`` times. Requests
prefilled together share one row of the forward (``worker.distinct_rows``); a group larger than
the free rows of the batch is admitted in rounds, and without this each round would run the
prompt's forward again, the vision tower included. After a prefill, the worker keeps the KV
cache columns and last logits of each prompt row that a queued request also sends, and a later
round takes them instead of running the forward: the same values the forward gave the first
round, so each request samples what it would have sampled from a prefill of its own.

A kept row lives only while a queued request sends its prompt (at most one row's prompt cache
per distinct queued prompt) and is dropped when weights change (see ``DecodeWorker``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from vlrollout.compat.transformers import DynamicCache, cache_of, layer_of
from vlrollout.engine.batch import as_growing


def same_inputs(a: Any, b: Any) -> bool:
    """Whether two ``PreparedInputs`` feed the model the same prompt inputs: the same object,
    or equal token types and vision tensors."""
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


@dataclass(eq=False)
class KeptPrefill:
    """One prefilled prompt row.

    Attributes:
        inputs: The ``PreparedInputs`` of the task whose row it is.
        row: The row's tokens (prompt and tokens so far).
        layers: Per layer ``(keys, values)``, each ``[1, kv_heads, len(row), head_dim]``.
        logits: ``[vocab]`` logits at the row's last position.
        rope_delta: The row's M-RoPE position shift (0 without M-RoPE).
    """

    inputs: Any
    row: tuple[int, ...]
    layers: list[tuple[torch.Tensor, torch.Tensor]]
    logits: torch.Tensor
    rope_delta: int

    def serves(self, inputs: Any, row: tuple[int, ...]) -> bool:
        """Whether a task with ``inputs`` and prefill ``row`` would run this same row."""
        return len(row) == len(self.row) and row == self.row and same_inputs(self.inputs, inputs)

    def serves_task(self, task: Any) -> bool:
        """``serves`` for a queued task, cheapest checks first (the queue may be long)."""
        ids, out = task.inputs.input_ids, task.out_tokens
        if len(ids) + len(out) != len(self.row):
            return False
        return self.serves(task.inputs, tuple(ids + out))

    def cache(self, grow: int) -> tuple[DynamicCache, torch.Tensor]:
        """A fresh one-row cache of copies of the kept columns (``grow`` spare columns per
        layer; 0: plain ``DynamicLayer`` ones) and its ``[1, len(row)]`` bool mask."""
        if grow:
            cache = as_growing(cache_of([layer_of(k, v) for k, v in self.layers]), grow)
        else:
            cache = cache_of([layer_of(k.clone(), v.clone()) for k, v in self.layers])
        mask = torch.ones(1, len(self.row), dtype=torch.bool, device=self.logits.device)
        return cache, mask


def row_of_cache(cache: DynamicCache, index: int, length: int) -> list[tuple[torch.Tensor, ...]]:
    """Copies of the last ``length`` cached columns of row ``index`` of a left-padded prefill
    cache (a row's own columns), per layer ``(keys, values)``."""
    return [
        tuple(
            t[index : index + 1, :, t.shape[-2] - length :].clone()
            for t in (layer.keys, layer.values)
        )
        for layer in cache.layers
    ]


class KeptPrefills:
    """The kept rows: looked up by the next prefills, pruned to what queued tasks send."""

    def __init__(self) -> None:
        self.rows: list[KeptPrefill] = []

    def find(self, inputs: Any, row: tuple[int, ...]) -> KeptPrefill | None:
        return next((k for k in self.rows if k.serves(inputs, row)), None)

    def wanted(self, inputs: Any, row: tuple[int, ...], queued: Iterable[Any]) -> bool:
        """Whether a queued task sends this row and none is kept for it yet."""
        probe = KeptPrefill(inputs, row, [], torch.empty(0), 0)
        return self.find(inputs, row) is None and any(probe.serves_task(t) for t in queued)

    def prune(self, queued: Iterable[Any]) -> None:
        """Drop the rows no queued task sends."""
        if self.rows:
            queued = list(queued)
            self.rows = [k for k in self.rows if any(k.serves_task(t) for t in queued)]

    def clear(self) -> None:
        self.rows = []
