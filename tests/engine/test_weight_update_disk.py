"""The engine's side of AReaL's disk weight-update contract.

AReaL's ``FSDPEngine._update_weights_from_disk`` asks the engine for the update *before* it
saves, then publishes ``names.update_weights_from_disk(experiment, trial, version)``. A fake
trainer thread here does the same: the engine must wait for the key, then load the new weights
(never the old or half-written folder), then generate again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest, WeightUpdateMeta
from areal.utils import name_resolve, names

from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.testing.tiny_model import tiny_qwen2vl

EXP, TRIAL = "disk-update-test", "t0"


@pytest.fixture(autouse=True)
def _name_resolve(tmp_path):
    """AReaL's default name_resolve repository is NFS-backed and needs a root folder."""
    from areal.api.cli_args import NameResolveConfig

    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=str(tmp_path / "nr")))


def _greedy(engine, prompt):
    req = ModelRequest(
        input_ids=prompt,
        gconfig=GenerationHyperparameters(greedy=True, min_new_tokens=6, max_new_tokens=6),
    )
    return asyncio.run(engine.agenerate(req))


@pytest.mark.parametrize("case", ["fresh_folder", "old_folder"])
def test_disk_update_waits_for_trainer_and_loads_new_weights(tmp_path, case):
    old, processor = tiny_qwen2vl(seed=0)
    new, _ = tiny_qwen2vl(seed=3)
    prompt = processor.tokenizer("count the shapes")["input_ids"]
    with LocalInferenceEngine(tiny_qwen2vl(seed=3)[0], processor) as ref:
        expected = _greedy(ref, prompt)
    path = tmp_path / "weight_update_v1"
    if case == "old_folder":
        old.save_pretrained(path)  # a reused folder: complete, but the previous weights
    meta = WeightUpdateMeta(type="disk", path=str(path), clear_checkpoint_after_load=False)
    engine = LocalInferenceEngine(old, processor)
    engine.initialize()
    engine.configure_disk_updates(EXP + case, TRIAL, timeout_s=60)
    try:
        log: list = []
        trainer = threading.Thread(
            target=_trainer_case, args=(engine, meta, new, 0, 0.5, log, EXP + case)
        )
        trainer.start()
        trainer.join(120)
        assert log[0] == ("saving", False), "the engine loaded before the trainer saved"
        assert log[-1] == ("loaded", True)
        engine.set_version(1)
        got = _greedy(engine, prompt)
    finally:
        engine.destroy()
    assert got.output_tokens == expected.output_tokens
    torch.testing.assert_close(got.output_logprobs, expected.output_logprobs, atol=1e-5, rtol=0)
    assert got.output_versions == [1] * len(got.output_tokens)


def _trainer_case(engine, meta, new_model, version, delay_s, log, exp):
    engine.pause_generation()
    fut = engine.update_weights_from_disk(meta)
    time.sleep(delay_s)
    log.append(("saving", fut.done()))
    new_model.save_pretrained(meta.path)
    key = names.update_weights_from_disk(exp, TRIAL, version)
    name_resolve.add(key, str(datetime.now().timestamp()), replace=True)
    fut.result(timeout=60)
    engine.continue_generation()
    log.append(("loaded", True))


def test_stale_key_is_not_the_trainers_word(tmp_path):
    """A key left by an earlier run (older than the request) does not release the load."""
    model, processor = tiny_qwen2vl(seed=0)
    key = names.update_weights_from_disk(EXP + "stale", TRIAL, 0)
    name_resolve.add(key, str(datetime.now().timestamp() - 3600), replace=True)
    meta = WeightUpdateMeta(type="disk", path=str(tmp_path / "never"))
    with LocalInferenceEngine(model, processor) as engine:
        engine.configure_disk_updates(EXP + "stale", TRIAL, timeout_s=0.3)
        engine.pause_generation()
        fut = engine.update_weights_from_disk(meta)
        with pytest.raises(TimeoutError, match="did not publish"):
            fut.result(timeout=30)
        # Generation resumed by itself: the engine is not left paused.
        prompt = processor.tokenizer("hello")["input_ids"]
        assert len(_greedy(engine, prompt).output_tokens) == 6


def test_destroy_stops_and_joins_a_disk_update_still_waiting_for_the_trainer(tmp_path):
    """A trainer that never publishes its key must not leave the waiting thread behind."""
    model, processor = tiny_qwen2vl(seed=0)
    engine = LocalInferenceEngine(model, processor)
    engine.initialize()
    engine.configure_disk_updates(EXP + "destroy", TRIAL, timeout_s=60)
    meta = WeightUpdateMeta(type="disk", path=str(tmp_path / "never_saved"))
    fut = engine.update_weights_from_disk(meta)
    time.sleep(0.1)  # the thread is polling name_resolve now
    t0 = time.monotonic()
    engine.destroy()
    assert time.monotonic() - t0 < 10
    assert not [t for t in threading.enumerate() if t.name == "disk-weight-update"]
    with pytest.raises(RuntimeError, match="destroyed"):
        fut.result(timeout=0)


def test_a_folder_missing_tensors_is_refused_and_the_weights_kept(tmp_path):
    """transformers fills a tensor the folder lacks with fresh random values; loading such a
    folder (a partial save) would serve a corrupted policy, so it is an error naming the
    tensors, and the engine keeps its weights."""
    from safetensors.torch import load_file, save_file

    model, processor = tiny_qwen2vl(seed=0)
    prompt = processor.tokenizer("count the shapes")["input_ids"]
    path = tmp_path / "partial"
    tiny_qwen2vl(seed=3)[0].save_pretrained(path)
    weights = load_file(path / "model.safetensors")
    kept = {k: v for k, v in weights.items() if "lm_head" not in k}
    assert len(kept) < len(weights)
    save_file(kept, path / "model.safetensors", metadata={"format": "pt"})
    with LocalInferenceEngine(model, processor) as engine:
        before = _greedy(engine, prompt)
        meta = WeightUpdateMeta(type="disk", path=str(path), clear_checkpoint_after_load=False)
        with pytest.raises(ValueError, match="lm_head.weight"):
            engine.load_weights_from_disk(meta).result(timeout=60)
        after = _greedy(engine, prompt)
    assert after.output_tokens == before.output_tokens
    torch.testing.assert_close(after.output_logprobs, before.output_logprobs, atol=0, rtol=0)
