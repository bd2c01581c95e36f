"""World size 2 (torchrun, gloo, FSDP sharding) gives the same step as world size 1.

One fixed batch of 8 GRPO groups; each run's rank 0 saves full gradients and AReaL's stats.
Compared: generated-token logprobs vs the rollout, loss, grad norm and every gradient. Raw
weights after the first Adam step are not compared element-wise: Adam's first step is about
lr·sign(g), so float noise in a near-zero gradient flips it; weights are compared
only where |g| is not tiny.
"""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from tests.train.conftest import rollout
from tests.train.procs import run_side_by_side, subprocess_env

SCRIPT = Path(__file__).with_name("distributed_step.py")
ROOT = Path(__file__).resolve().parents[2]


def _run(world: int, batch: Path, out: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(world),
        str(SCRIPT),
        str(batch),
        str(out),
    ]
    env = subprocess_env(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def base_engine():
    """An engine on the shipped weights, which both runs train from: the session's ``engine``
    may hold weights another test has updated it with."""
    from tests.train.conftest import TINY
    from vlrollout.engine.local import LocalInferenceEngine

    eng = LocalInferenceEngine.from_pretrained(TINY, dtype=torch.float32, seed=0).initialize()
    yield eng
    eng.destroy()


@pytest.mark.slow
def test_world_size_2_equals_world_size_1(base_engine, tmp_path):
    from areal.utils.data import concat_padded_tensors

    from vlrollout.tiny.synthetic import generate_items

    items = generate_items("mix", 8, seed=31)
    groups = [
        concat_padded_tensors(rollout(base_engine, [it] * 4, max_new_tokens=16)) for it in items
    ]
    # Fixed, distinct rewards: the tiny model's 4 samples of one item often score alike, and a
    # group of equal rewards has zero advantage (a zero gradient would compare nothing).
    gen = torch.Generator().manual_seed(0)
    for g in groups:
        g["rewards"] = torch.randn(4, generator=gen)
    batch = tmp_path / "batch.pt"
    torch.save(groups, batch)

    # The two-process run first: it is the longer.
    ws2, ws1 = run_side_by_side(
        [partial(_run, 2, batch, tmp_path / "ws2.pt"), partial(_run, 1, batch, tmp_path / "ws1.pt")]
    )
    one, two = ws1.result(), ws2.result()

    grad_diff = max((two["grads"][n] - g).abs().max().item() for n, g in one["grads"].items())
    print(  # the closing note quotes these (pytest -s)
        f"logp gap ws1 {one['logp_gap']:.2e} ws2 {two['logp_gap']:.2e}; loss "
        f"{one['stats']['ppo_actor/update/actor_loss/avg']:.6g} vs "
        f"{two['stats']['ppo_actor/update/actor_loss/avg']:.6g}; grad_norm "
        f"{one['stats']['ppo_actor/update/grad_norm']:.6g} vs "
        f"{two['stats']['ppo_actor/update/grad_norm']:.6g}; max |grad diff| {grad_diff:.2e}"
    )
    assert one["logp_gap"] <= 1e-4 and two["logp_gap"] <= 1e-4
    assert one["stats"]["ppo_actor/update/grad_norm"] > 1e-3
    for key in ("ppo_actor/update/actor_loss/avg", "ppo_actor/update/grad_norm"):
        assert two["stats"][key] == pytest.approx(one["stats"][key], rel=1e-4, abs=1e-6), key
    assert one["grads"].keys() == two["grads"].keys() and one["grads"]
    scale = max(g.abs().max().item() for g in one["grads"].values())
    for name, g1 in one["grads"].items():
        torch.testing.assert_close(two["grads"][name], g1, atol=1e-5 * scale, rtol=1e-4)
        settled = one["grads"][name].abs() > 1e-6 * scale  # Adam's sign is stable here
        w1, w2 = one["weights"][name][settled], two["weights"][name][settled]
        torch.testing.assert_close(w2, w1, atol=1e-5, rtol=0)
