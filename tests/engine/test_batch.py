"""Merging KV caches of different lengths with left padding, and dropping rows."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from vlrollout.engine.batch import can_merge, merge_caches, select_rows


def cache(batch, length, fill, layers=2):
    kv = torch.full((batch, 2, length, 4), float(fill))
    return DynamicCache([(kv, kv + 100) for _ in range(layers)])


def test_merge_left_pads_and_masks():
    a, b = cache(1, 3, 1), cache(1, 5, 2)
    merged, mask = merge_caches(
        a, torch.ones(1, 3, dtype=torch.long), b, torch.ones(1, 5, dtype=torch.long)
    )
    assert mask.tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    keys = merged.layers[1].keys
    assert keys.shape == (2, 2, 5, 4)
    assert keys[0, :, :2].abs().sum() == 0 and (keys[0, :, 2:] == 1).all() and (keys[1] == 2).all()
    assert (merged.layers[0].values[1] == 102).all()


def test_select_rows_trims_columns_no_row_uses():
    a, b = cache(1, 2, 1), cache(1, 6, 2)
    merged, mask = merge_caches(
        a, torch.ones(1, 2, dtype=torch.long), b, torch.ones(1, 6, dtype=torch.long)
    )
    kept, kept_mask = select_rows(merged, mask, [0])
    assert kept_mask.tolist() == [[1, 1]] and kept.layers[0].keys.shape == (1, 2, 2, 4)
    kept, kept_mask = select_rows(merged, mask, [1])
    assert kept_mask.shape == (1, 6) and (kept.layers[0].keys == 2).all()


def test_can_merge_rejects_sliding_window_layers():
    from transformers import Qwen2Config

    full = Qwen2Config(num_hidden_layers=2, use_sliding_window=False)
    sliding = Qwen2Config(
        num_hidden_layers=2, use_sliding_window=True, sliding_window=8, max_window_layers=0
    )
    assert can_merge(DynamicCache(config=full))
    assert not can_merge(DynamicCache(config=sliding))
