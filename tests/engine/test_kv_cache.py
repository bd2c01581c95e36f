"""The decode batch's KV cache appends in place: growing layers, rows dropped by moving the last
rows into their places, and the engine's decode steps reusing one buffer per layer."""

from __future__ import annotations

import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from tests.engine.batches import assert_as_if_alone, generate_all
from vlrollout.compat.transformers import GrowingLayer, cache_of, layer_of
from vlrollout.engine import LocalInferenceEngine
from vlrollout.engine.batch import as_growing, drop_rows, merge_caches, select_rows
from vlrollout.engine.step_forward import DirectStep


def states(rows: int, columns: int, start: float = 0.0) -> torch.Tensor:
    """``[rows, 2 heads, columns, 3]`` whose values name their row and column."""
    row = torch.arange(rows, dtype=torch.float32).view(rows, 1, 1, 1) * 1000
    column = torch.arange(columns, dtype=torch.float32).view(1, 1, columns, 1) + start
    return (row + column).expand(rows, 2, columns, 3).clone()


def test_a_growing_layer_appends_in_place_until_its_room_runs_out():
    layer = GrowingLayer(grow=2)
    keys, _ = layer.update(states(2, 3), -states(2, 3))
    storage = keys.untyped_storage().data_ptr()
    for step in range(2):  # two columns of room: written in place
        keys, values = layer.update(states(2, 1, 3 + step), -states(2, 1, 3 + step))
        assert keys.untyped_storage().data_ptr() == storage
    keys, values = layer.update(states(2, 1, 5), -states(2, 1, 5))  # grows: one copy
    assert keys.untyped_storage().data_ptr() != storage
    torch.testing.assert_close(keys, states(2, 6), rtol=0, atol=0)
    torch.testing.assert_close(values, -states(2, 6), rtol=0, atol=0)
    assert layer.get_seq_length() == 6


def test_keys_assigned_from_outside_are_adopted_at_the_next_update():
    """Transformers' offloading and beam reordering assign ``keys``/``values`` directly."""
    layer = GrowingLayer.holding(states(2, 4), -states(2, 4), length=3, grow=4)
    layer.keys, layer.values = layer.keys[[1, 0]], layer.values[[1, 0]]
    assert layer.buffers is None
    keys, values = layer.update(states(2, 1, 3), -states(2, 1, 3))
    torch.testing.assert_close(keys[0, :, :3], states(2, 3)[1], rtol=0, atol=0)
    torch.testing.assert_close(keys[:, :, 3:], states(2, 1, 3), rtol=0, atol=0)
    assert layer.buffers is not None


def test_dropping_rows_moves_the_last_rows_and_keeps_their_contents():
    """Row 1 of four leaves: row 3 takes its place (no copy of the others), leading columns no
    kept row uses are trimmed, and the new order is reported for the caller's own state."""
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[0, :2] = mask[2, :2] = mask[3, :2] = False  # only row 1 uses columns 0-1
    cache = cache_of([GrowingLayer.holding(states(4, 7), -states(4, 7), 5, grow=2)])
    storage = cache.layers[0].keys.untyped_storage().data_ptr()
    kept, kept_mask, order = drop_rows(cache, mask, [0, 2, 3])
    assert order == [0, 3, 2]
    keys = kept.layers[0].keys
    assert keys.untyped_storage().data_ptr() == storage and keys.shape == (3, 2, 3, 3)
    torch.testing.assert_close(keys, states(4, 5)[order][:, :, 2:], rtol=0, atol=0)
    assert kept_mask.tolist() == [[True] * 3] * 3
    keys, _ = kept.layers[0].update(states(3, 1, 5), -states(3, 1, 5))  # room left: in place
    assert keys.untyped_storage().data_ptr() == storage and keys.shape[2] == 4


def test_dropping_rows_of_plain_layers_copies_them_in_the_same_order():
    mask = torch.ones(3, 4, dtype=torch.bool)
    cache = cache_of([layer_of(states(3, 4), -states(3, 4))])
    kept, _, order = drop_rows(cache, mask, [1, 2])
    assert order == [2, 1]
    torch.testing.assert_close(kept.layers[0].keys, states(3, 4)[[2, 1]], rtol=0, atol=0)


def test_merge_and_select_build_growing_layers_with_room():
    a = as_growing(cache_of([layer_of(states(1, 2), -states(1, 2))]), grow=3)
    b = cache_of([layer_of(states(2, 4), -states(2, 4))])
    merged, mask = merge_caches(a, torch.ones(1, 2), b, torch.ones(2, 4), grow=3)
    assert a.layers == [None] and b.layers == [None]  # consumed layer by layer
    layer = merged.layers[0]
    assert isinstance(layer, GrowingLayer) and layer.buffers[0].shape[2] == 7
    assert layer.keys[0, :, :2].abs().sum() == 0  # left padding is zeros
    kept, _ = select_rows(merged, mask, [1, 1], grow=3)
    assert isinstance(kept.layers[0], GrowingLayer) and kept.layers[0].keys.shape == (2, 2, 4, 3)


def test_decode_steps_reuse_each_layer_s_buffer(tiny, vision_prompt):
    """A decode step writes one column into the cache instead of copying it (the whole cache
    per step, the old layer alive while the new one is made); tokens and logprobs are those of
    each request alone, and rows leave and join on the way."""
    model, processor = tiny
    storages = []  # kept alive, so no address is reused for another

    def record(module, args, kwargs, output):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] == 1:  # a decode step
            storages.append(output.past_key_values.layers[0].keys.untyped_storage())

    reqs = []
    for i in range(6):
        p = vision_prompt(seed=i, width=56 + 28 * (i % 3))
        new = 4 + 6 * i
        gconfig = GenerationHyperparameters(max_new_tokens=new, min_new_tokens=new, greedy=True)
        reqs.append(
            ModelRequest(
                input_ids=p["input_ids"], metadata={"multi_modal_input": p["mm"]}, gconfig=gconfig
            )
        )
    handle = model.get_decoder().register_forward_hook(record, with_kwargs=True)
    try:
        with LocalInferenceEngine(model, processor, max_batch_size=4) as engine:
            results = generate_all(engine, reqs)
            steps = engine.stats()["decode_steps"]
    finally:
        handle.remove()
    assert isinstance(engine._worker._step_forward, DirectStep) and steps > 30
    # One buffer per prefill or merge (rows joined twice) and one growth past 64 columns.
    assert len({s.data_ptr() for s in storages}) <= 5, (len(storages), steps)
    assert_as_if_alone(model, processor, reqs, results)
