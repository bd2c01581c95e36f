"""The whole ``vlrollout train`` loop, two steps, on a tiny random model of each trainable family
(every family run in turn by one subprocess).

Per family: both steps complete; each step is on-policy, so AReaL's importance weights
(trainer logprobs over the rollout's) are 1 within 1e-4 — on step 2 that also says the engine
rolled out with the weights step 1 trained; after every step the engine's parameters equal the
checkpoint just written; the checkpoint loads in transformers and differs from the initial model.

A tiny random model writes random text, on which the grounding reward is 0 for every sample
(zero advantages, no update); ``even_token_ids`` scores random text differently per sample.
The per-step trainer logprob check lives in ``test_family_training.py``; Gemma 3 is refused
before this loop starts.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.train.family_train_run import RECORD
from tests.train.procs import ROOT, subprocess_env
from vlrollout.testing.tiny_families import save_tiny_vlm
from vlrollout.train.support import TRAINABLE

ATOL = 1e-4
SMALL = [
    "total_train_steps=2",
    "train_dataset.batch_size=2",
    "gconfig.n_samples=4",
    "gconfig.max_new_tokens=8",
    "vlrollout.train_items=4",
    "vlrollout.eval_items=1",
    "vlrollout.eval_every=0",
    "vlrollout.save_every=1",
    "vlrollout.progress=false",
    "vlrollout.reward=tests.train.reward_fns.even_token_ids",
]


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _weights(path):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(
        path, dtype=torch.float32, local_files_only=True
    )
    return model.state_dict()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict[str, dict], object]:
    """Two ``vlrollout train`` steps per trainable family, every family in one subprocess (the
    imports paid once): family → its line (``rc``, ``seconds``, ``error``), and the root whose
    ``FAMILY/model`` and ``FAMILY/run`` hold each family's model and run."""
    root = tmp_path_factory.mktemp("families")
    for family in TRAINABLE:
        save_tiny_vlm(family, root / family / "model")
    cmd = [sys.executable, str(ROOT / "tests/train/family_train_run.py"), "--each", str(root)]
    cmd += [*TRAINABLE, "--", "--config", "examples/train_grounding.yaml", *SMALL]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env=subprocess_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"family"')]
    assert [r["family"] for r in lines] == list(TRAINABLE), proc.stderr[-3000:]
    return {r["family"]: r for r in lines}, root


@pytest.mark.slow
@pytest.mark.parametrize("family", TRAINABLE)
def test_two_training_steps(family, runs):
    lines, root = runs
    assert lines[family]["rc"] == 0, lines[family]
    model, out = root / family / "model", root / family / "run"

    steps = _jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in steps] == [1, 2]
    weights = []
    for r in steps:
        assert r["n_trajectories"] == 8 and r["rejected"] == 0, r
        lo = r["areal"]["ppo_actor/update/importance_weight/min"]
        hi = r["areal"]["ppo_actor/update/importance_weight/max"]
        weights.append((lo, hi))
        assert 1 - ATOL <= lo <= hi <= 1 + ATOL, (r["step"], lo, hi)
    assert steps[0]["reward_std"] > 0  # advantages are not all zero: the update moves weights
    synced = _jsonl(out / RECORD)
    wall = lines[family]["seconds"]
    print(f"\n{family}: {wall:.1f} s, importance weights {weights}, engine-checkpoint {synced}")
    assert [r["step"] for r in synced] == [1, 2]
    for r in synced:
        assert r["same_keys"] and r["max_abs_diff"] <= 1e-6, r

    trained = _weights(out / "checkpoints" / "step_2")
    initial = _weights(model)
    assert trained.keys() == initial.keys()
    changed = [k for k in initial if not torch.equal(initial[k], trained[k])]
    assert changed, "no weight changed in two steps"
    assert max((initial[k] - trained[k]).abs().max().item() for k in changed) > 1e-5
