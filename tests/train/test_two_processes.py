"""``vlrollout train --nproc 2`` (two processes under torchrun, FSDP over gloo) takes the steps
one process takes on the same data and seed.

Both runs use the deterministic engine, where each completion is a function of the seed and its
request: the two-process run rolls out each rank's share of a step's items on that rank's own
engine, so it samples exactly the episodes the one-process run samples, but only if the other
rank's engine holds the weights of each step (AReaL's update reaches rank 0's engine only; a
stale engine on rank 1 would sample the second step with the first step's weights, and the
rollout logprobs would no longer be the current policy's). Compared per step: the rewards and
generated tokens (exactly), PPO's loss and gradient norm (float noise of the gradient
all-reduce), held-out scores, and the saved weights after each step, which must be much closer
to each other than to the weights they started from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.procs import ROOT, SHIPPED_MODEL, run_train, subprocess_env

STEPS = 2
ARGS = (
    SHIPPED_MODEL,
    f"total_train_steps={STEPS}",
    "train_dataset.batch_size=4",
    "gconfig.n_samples=2",
    "gconfig.max_new_tokens=20",
    "vlrollout.train_items=8",
    "vlrollout.eval_items=4",
    "vlrollout.eval_every=1",
    "vlrollout.save_every=1",
    "vlrollout.progress=false",
    "vlrollout.engine.deterministic=true",
    "seed=3",
)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _weights(out: Path, step: int) -> dict:
    from safetensors.torch import load_file

    (path,) = (out / "checkpoints" / f"step_{step}").glob("*.safetensors")
    return load_file(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("two_processes")
    run_train(root / "one", *ARGS, timeout=900)
    run_train(root / "two", "--nproc", "2", *ARGS, timeout=900)
    return root / "one", root / "two"


@pytest.mark.slow
def test_two_processes_take_the_steps_of_one(runs):
    import torch
    from safetensors.torch import load_file

    one, two = runs
    m1, m2 = _rows(one / "metrics.jsonl"), _rows(two / "metrics.jsonl")
    assert [r["step"] for r in m2] == list(range(1, STEPS + 1))  # written once, by rank 0
    assert all(r["world_size"] == 2 for r in m2) and "world_size" not in m1[0]
    for a, b in zip(m1, m2, strict=True):
        # The whole batch's numbers on rank 0, not its share: the same episodes, all of them.
        assert b["reward_mean"] == pytest.approx(a["reward_mean"], abs=1e-12)
        assert (b["n_trajectories"], b["gen_tokens"]) == (a["n_trajectories"], a["gen_tokens"])
        assert b["diag/group_reward_std"] == pytest.approx(a["diag/group_reward_std"], abs=1e-12)
        assert b["actor_loss"] == pytest.approx(a["actor_loss"], rel=1e-4, abs=1e-7)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    e1, e2 = _rows(one / "eval.jsonl"), _rows(two / "eval.jsonl")
    assert [r["step"] for r in e2] == [0, 1, 2]
    assert [r["eval/mean"] for r in e2] == pytest.approx([r["eval/mean"] for r in e1], abs=1e-6)

    (start,) = (ROOT / "assets" / "tiny-qwen2vl").glob("*.safetensors")
    initial = load_file(start)
    for step in range(1, STEPS + 1):
        w1, w2 = _weights(one, step), _weights(two, step)
        assert w1.keys() == w2.keys()
        moved = torch.cat([(w1[k] - initial[k]).abs().flatten() for k in w1])
        apart = torch.cat([(w1[k] - w2[k]).abs().flatten() for k in w1])
        assert apart.mean() < 0.01 * moved.mean(), (step, apart.mean(), moved.mean())
        assert apart.max() < 0.5 * moved.max()
    saved = sorted(p.name for p in (two / "checkpoints" / f"step_{STEPS}").glob("optim_*"))
    assert saved == ["optim_world_size_2_rank_0.pt", "optim_world_size_2_rank_1.pt"]


@pytest.mark.slow
def test_resuming_with_another_number_of_processes_is_refused(runs):
    _, two = runs
    cmd = [sys.executable, "-m", "vlrollout.cli", "train"]
    cmd += ["--config", "examples/train_grounding.yaml", f"vlrollout.output={two}", *ARGS]
    cmd += [f"total_train_steps={STEPS + 1}"]
    env = subprocess_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "saved by 2 training process(es)" in proc.stderr and "--nproc 2" in proc.stderr
    assert len(_rows(two / "metrics.jsonl")) == STEPS  # nothing trained or rewritten


def test_each_rank_gets_its_own_share_and_together_all():
    from vlrollout.train.ranks import Ranks

    items = list(range(10))
    shares = [Ranks(r, 3).share(items) for r in range(3)]
    assert sorted(x for s in shares for x in s) == items
    assert shares[1] == [1, 4, 7]
    assert Ranks().share(items) == items and Ranks().gather([1, 2]) == [1, 2]


@pytest.mark.slow
def test_two_processes_train_asynchronously_within_the_staleness_bound(tmp_path):
    out = tmp_path / "async"
    args = [a for a in ARGS if not a.startswith(("total_train_steps", "vlrollout.engine"))]
    run_train(
        out,
        "--nproc",
        "2",
        *args,
        "total_train_steps=3",
        "vlrollout.train_items=16",
        "rollout.max_head_offpolicyness=1",
        "actor.use_decoupled_loss=true",
        "actor.recompute_logprob=true",
        timeout=900,
    )
    rows = _rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    # The whole batch each step (4 items x 2 samples, from both ranks).
    assert all(r["n_trajectories"] == 8 for r in rows)
    # Each step's items were submitted before the previous update, on both ranks.
    assert [r["staleness_max"] for r in rows] == [0, 1, 1]
    state = json.loads((out / "checkpoints" / "step_3" / "state.json").read_text())
    # Each rank's loader position, so each resumes its own share of the items.
    assert len(state["rollouts"]) == 2
    assert all(s["loader"]["_num_yielded"] >= 3 for s in state["rollouts"])


@pytest.mark.slow
def test_a_rejected_item_on_one_rank_does_not_end_a_two_process_run(tmp_path):
    """A bad data line leaves one rank with fewer groups than the other; AReaL's gather of the
    ranks' trajectories needs equal numbers, and once ended the run there."""
    from vlrollout.tiny.synthetic import generate_items, write_dataset

    data = write_dataset(generate_items("ground", 3, 7), tmp_path / "data")
    bad = {"id": "bad-1", "messages": 42}
    with open(data, "a") as f:
        f.write(json.dumps(bad) + "\n")
    # Four items, four per step: every step has the bad item on one rank and not the other.
    args = [a for a in ARGS if not a.startswith(("vlrollout.train_items", "vlrollout.eval_every"))]
    run_train(tmp_path / "run", "--nproc", "2", *args, f"train_dataset.path={data}", timeout=900)
    rows = _rows(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["rejected"] for r in rows] == [2, 2]  # the bad item's two episodes, counted
    assert [r["n_trajectories"] for r in rows] == [3 * 2, 3 * 2]


def test_resuming_with_more_processes_is_refused_before_any_starts(tmp_path, capsys, monkeypatch):
    """The launcher reads the checkpoint's optimizer shards first: one line and exit 2, not the
    refusal printed once per process under torchrun's traceback."""
    import vlrollout.train.main as train_main
    from vlrollout.cli import main

    step = tmp_path / "checkpoints" / "step_3"
    step.mkdir(parents=True)
    (step / "state.json").write_text(json.dumps({"step": 3}))
    (step / "optim_world_size_1_rank_0.pt").write_bytes(b"")
    (tmp_path / "checkpoints" / "latest").write_text("step_3")
    monkeypatch.setattr(train_main, "launch", lambda *a: pytest.fail("torchrun was started"))
    args = ["--config", "examples/train_grounding.yaml", f"vlrollout.output={tmp_path}"]
    assert main(["train", "--nproc", "2", *args]) == 2
    err = capsys.readouterr().err
    assert "saved by 1 training process(es) and this run has 2" in err and "--nproc 1" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
