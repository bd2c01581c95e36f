"""``vlrollout train`` on a GPU: two GRPO steps with the actor and the embedded engine on CUDA.

Skipped without a CUDA device. On a GPU, AReaL's actor takes the device by itself and
``vlrollout.engine.device=cuda`` puts the engine beside it; the run must train (the checkpoint's
weights differ from the starting model's; a reward that scores random text differently per
sample keeps the advantages non-zero), time every phase in ``metrics.jsonl``, and apply none of
the CPU defaults (:mod:`vlrollout.train.cpu`), which would mean it never saw the GPU.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.train.procs import ROOT, TINY_RUN, run_train

PHASES = ("time/rollout", "time/logp", "time/update", "time/weight_sync", "time/step")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_train_on_cuda_changes_the_weights_and_times_every_phase(tmp_path):
    proc = run_train(
        tmp_path,
        *TINY_RUN,
        "vlrollout.engine.device=cuda",
        "actor.recompute_logprob=true",
        "vlrollout.reward=tests.train.reward_fns.even_token_ids",
    )
    assert "CPU default" not in proc.stderr, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r[p] > 0 for r in rows for p in PHASES), rows
    assert all(r["memory/peak_device"] > 0 for r in rows), rows
    assert any(r["grad_norm"] > 0 for r in rows)
    start = load_file(ROOT / "assets/tiny-qwen2vl/model.safetensors")
    trained = load_file(tmp_path / "checkpoints/step_2/model.safetensors")
    assert sorted(trained) == sorted(start)
    assert any(not torch.equal(trained[k], start[k]) for k in start)
