"""``vlrollout train`` with ``rollout.max_head_offpolicyness = k > 0``: each step's items submitted
k steps ahead through AReaL's executor, so rollouts keep running while the trainer updates.

The fast tests check the pieces (the dataloader's order and resumption, the next k batches
submitted before the trainer gets its batch, the nothing-accepted stop through AReaL's own
``WorkflowExecutor``, the config checks); the slow ones run the command line:
every trained token at most k weight versions old and stamped with the version of the weights
that sampled it (teacher-forced with those weights), and a run killed mid-way resumed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig

from tests.train.async_train_run import RECORD
from tests.train.procs import ROOT, run_train, subprocess_env
from tests.train.test_cli_train import SMALL
from vlrollout.ledger import NothingAccepted
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.train.asynchronous import (
    AsyncRollouts,
    build_loader,
    config_warnings,
    keep_all,
    policy_drift,
)
from vlrollout.train.data import batch_items
from vlrollout.workflows import RLVRWorkflow

REWARD = "tests.workflows.reward_fns.contains_answer"
ASYNC = [
    "rollout.max_head_offpolicyness=1",
    "actor.use_decoupled_loss=true",
    "vlrollout.reward=tests.train.reward_fns.even_token_ids",  # differs per sample: weights move
    "actor.optimizer.lr=1e-3",
]


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


# ----------------------------------------------------------------------------- the dataloader
def test_the_loader_reads_the_steps_items_in_order_and_resumes_from_its_state():
    items = [{"id": i} for i in range(7)]  # 2 steps of 3 per epoch, the 7th item left out
    steps = [[it["id"] for it in batch_items(items, s, 3, 5)] for s in range(6)]
    loader = build_loader(items, 3, seed=5)
    batches = iter(loader)
    assert [[it["id"] for it in next(batches)] for _ in range(4)] == steps[:4]
    state = json.loads(json.dumps({"first": 0, "loader": loader.state_dict()}))  # state.json

    resumed = iter(build_loader(items, 3, seed=5, state=state))
    assert [[it["id"] for it in next(resumed)] for _ in range(2)] == steps[4:6]
    # A checkpoint without a loader state (an on-policy run): start after its steps.
    assert [it["id"] for it in next(iter(build_loader(items, 3, seed=5, start=5)))] == steps[5]


# ----------------------------------------------------------------------------- nothing accepted
def _item(i: int, question: str = "What is 2+2?") -> dict:
    return {"id": f"q{i}", "messages": question, "answer": "4", "task": "count"}


class _Engine:
    """An engine's public ``submit``/``wait`` as the embedded and remote engines implement them
    on one process: AReaL's own ``WorkflowExecutor``, each item's group in AReaL's
    ``GroupedRolloutWorkflow``."""

    def __init__(self, engine, k: int, batch_size: int) -> None:
        from areal.infra.workflow_executor import WorkflowExecutor

        config = InferenceEngineConfig(
            consumer_batch_size=batch_size, max_head_offpolicyness=k, max_concurrent_rollouts=16
        )
        self.workflow_executor = WorkflowExecutor(config, engine)
        self.workflow_executor.initialize(
            logger=logging.getLogger("test"), train_data_parallel_size=1
        )

    def submit(self, data, workflow, group_size):
        from areal.infra.remote_inf_engine import GroupedRolloutWorkflow

        grouped = GroupedRolloutWorkflow(workflow, group_size, logging.getLogger("test"))
        return self.workflow_executor.submit(data, workflow=grouped)

    def wait(self, count, timeout=None, raise_timeout=True):
        return self.workflow_executor.wait(count, timeout=timeout, raise_timeout=raise_timeout)

    def submitted(self) -> int:
        """Items handed to the executor so far (waiting for admission, running or finished)."""
        stats = self.workflow_executor.staleness_manager.get_stats()
        return stats.enqueued + stats.running + stats.accepted + stats.rejected


def _rollouts(tokenizer, items, k: int = 1) -> tuple[AsyncRollouts, _Engine]:
    answer = tokenizer.encode("It is 4", add_special_tokens=False) + [tokenizer.eos_token_id]

    def script(req) -> list[int]:
        if "broken" in tokenizer.decode(req.input_ids):
            raise ConnectionError("server went away")
        return answer

    scripted = ScriptedEngine(script, stop_token_ids=[tokenizer.eos_token_id], latency_s=(0, 0.01))
    engine = _Engine(scripted, k=k, batch_size=2)
    wf = RLVRWorkflow(REWARD, GenerationHyperparameters(max_new_tokens=8), tokenizer)
    return AsyncRollouts(engine, wf, 2, k, build_loader(items, 2, seed=0), first=0), engine


def test_an_async_step_with_nothing_accepted_stops_with_counts_and_reasons(tokenizer):
    items = [_item(i, "this is broken") for i in range(6)]
    rollouts, engine = _rollouts(tokenizer, items)
    try:
        with pytest.raises(NothingAccepted) as caught:
            rollouts.next_batch(1)
    finally:
        engine.workflow_executor.destroy()
    lines = str(caught.value).splitlines()
    # At least a step's worth of episodes (2 items x 2) was rejected before the stop.
    match = re.fullmatch(
        r"no episode of training step 1 was accepted \((\d+) episodes, (\d+) rejected\)", lines[0]
    )
    assert match and match[1] == match[2] and int(match[1]) >= 4
    assert re.fullmatch(r"  engine_error: \d+ \(e\.g\. item q\d: ConnectionError: .*\)", lines[1])


def test_an_async_step_with_some_rejections_waits_for_a_full_batch(tokenizer):
    items = [_item(i) for i in range(8)]
    first = batch_items(items, 0, 2, seed=0)[0]  # the first item pulled: its group is rejected
    first["messages"] = "this is broken"
    rollouts, engine = _rollouts(tokenizer, items)
    try:
        batch, outcome = rollouts.next_batch(1)
    finally:
        engine.workflow_executor.destroy()
    assert len(batch) == 2  # two groups of accepted episodes
    assert all(t["input_ids"].shape[0] == 2 for t in batch)
    assert outcome["accepted"] >= 4 and outcome["rejected_by_reason"]["engine_error"] >= 2
    assert rollouts.state()["loader"]["_num_yielded"] >= 2


def test_groups_accepted_during_the_update_count_for_the_next_step(tokenizer):
    """With k >= 1 a step's groups often finish during the previous update, before the step
    starts waiting: they count for it, so rejections after them do not stop a run whose data
    is only partly bad, and each finished episode is counted in one step's outcome."""
    items = [_item(i) for i in range(8)]
    batch_items(items, 1, 2, seed=0)[0]["messages"] = "this is broken"  # step 2: bad, then good
    for item in batch_items(items, 2, 2, seed=0):  # step 3's items, pulled as replacements
        item["messages"] = "this is broken"
    rollouts, engine = _rollouts(tokenizer, items)
    try:
        _, first = rollouts.next_batch(1)
        time.sleep(0.5)  # the update: step 2's groups finish meanwhile
        batch, second = rollouts.next_batch(2)
    finally:
        engine.workflow_executor.destroy()
    assert len(batch) == 2
    # Step 2: its own bad and good item, step 3's two bad items, then one good one.
    assert second["accepted"] == 4 and second["rejected_by_reason"] == {"engine_error": 6}
    later = rollouts.guard.outcome()  # finished after step 2 got its batch
    total = rollouts.workflow.ledger.submitted
    assert first["submitted"] + second["submitted"] + later["submitted"] == total


# ----------------------------------------------------------------------------- submitted ahead
@pytest.mark.parametrize("k", [1, 2])
def test_the_next_k_batches_are_submitted_before_the_trainer_gets_its_batch(tokenizer, k):
    """However fast a batch rolls out, the items of the next k steps are with AReaL's executor
    when ``next_batch`` returns, so they roll out during the update that follows."""
    rollouts, engine = _rollouts(tokenizer, [_item(i) for i in range(8)], k=k)
    try:
        submitted = []
        for step in (1, 2):
            batch, _ = rollouts.next_batch(step)
            assert len(batch) == 2
            submitted.append(engine.submitted())
    finally:
        engine.workflow_executor.destroy()
    assert submitted == [2 * (1 + k), 2 * (2 + k)]


def _group(lengths: list[int], width: int) -> dict:
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths], dtype=torch.bool)
    ids = torch.arange(len(lengths) * width).reshape(len(lengths), width) * mask
    return {"input_ids": ids, "attention_mask": mask, "logprobs": ids.float() / 7}


def test_one_process_keeps_the_groups_as_areals_redistribution_does(actor):
    """:func:`keep_all` (no collectives) returns what AReaL's ``redistribute_trajectories``
    returns to the only rank: the same groups, padding trimmed, in the same order."""
    from areal.infra.dist_rollout import redistribute_trajectories

    groups = [_group([3, 5], 7), _group([9, 2], 9), _group([4, 4], 6), _group([1, 8], 8)]
    for packing in ("ffd", "kk"):
        kept = keep_all(groups, packing)
        areal = redistribute_trajectories(groups, packing_algorithm=packing).data
        assert len(kept) == len(areal) == 4
        for a, b in zip(kept, areal, strict=True):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert keep_all([], "ffd") == []


# ----------------------------------------------------------------------------- drift
def _traj(versions, logprobs, prox):
    n = len(versions)
    return {
        "loss_mask": torch.tensor([[0] + [1] * (n - 1)]),
        "versions": torch.tensor([versions]),
        "logprobs": torch.tensor([logprobs]),
        "prox_logp": torch.tensor([prox]),
    }


def test_drift_pairs_each_stale_token_with_the_proximal_logprob_that_scores_it():
    # Prompt token, then tokens sampled at versions 2, 2, 3; the trainer is at 3. prox_logp[i]
    # scores token i + 1, so the stale tokens are prox positions 0 and 1.
    traj = _traj([-1, 2, 2, 3], [0.0, -1.0, -0.5, -2.0], [-1.25, -0.25, -9.0, 0.0])
    drift = policy_drift([traj], version=3)
    assert drift == {"staleness/behave_kl": 0.0, "staleness/max_log_ratio": 0.25}
    other = _traj([-1, 2, 3], [0.0, -3.0, -1.0], [-1.0, -4.0, 0.0])
    both = policy_drift([traj, other], version=3)
    assert both["staleness/behave_kl"] == pytest.approx((0.25 - 0.25 - 2.0) / 3)
    assert both["staleness/max_log_ratio"] == 2.0


def test_drift_is_zero_on_policy_and_absent_without_a_proximal_policy():
    fresh = _traj([-1, 3, 3], [0.0, -1.0, -2.0], [-5.0, -6.0, 0.0])
    assert policy_drift([fresh], version=3) == {
        "staleness/behave_kl": 0.0,
        "staleness/max_log_ratio": 0.0,
    }
    del fresh["prox_logp"]
    assert policy_drift([fresh], version=3) == {}


# ----------------------------------------------------------------------------- configuration
def _config(tmp_path, *overrides):
    from vlrollout.train.config import load_config

    return load_config(
        "examples/train_grounding.yaml", [f"vlrollout.output={tmp_path}", *overrides]
    )


def test_async_config_warns_when_the_loss_trains_stale_tokens_as_on_policy(tmp_path):
    k2 = "rollout.max_head_offpolicyness=2"
    recomputed = _config(tmp_path, k2, "actor.recompute_logprob=true")
    (line,) = config_warnings(recomputed)
    assert "actor.recompute_logprob=true" in line and "up to 2 weight versions old" in line
    decoupled = _config(
        tmp_path, k2, "actor.use_decoupled_loss=true", "actor.recompute_logprob=true"
    )
    (line,) = config_warnings(decoupled)
    assert "one minibatch" in line and "actor.use_decoupled_loss=false" in line
    screened = _config(
        tmp_path,
        k2,
        "actor.use_decoupled_loss=true",
        "actor.recompute_logprob=true",
        "+actor.rejection_sampling={level:token,action:mask,metric:ratio,upper:5.0}",
    )
    assert config_warnings(screened) == []
    interpolated = _config(
        tmp_path, k2, "actor.use_decoupled_loss=true", "+actor.prox_logp_method=loglinear"
    )
    assert config_warnings(interpolated) == []  # a proximal policy that is not the current one
    assert config_warnings(_config(tmp_path, k2)) == []  # PPO against the sampling policy
    assert config_warnings(_config(tmp_path)) == []  # on-policy: nothing to say


# ----------------------------------------------------------------------------- whole runs
@pytest.mark.slow
def test_async_run_trains_fresh_tokens_from_the_weights_that_sampled_them(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "tests/train/async_train_run.py"), "0.15"]
    cmd += ["--config", "examples/train_grounding.yaml", f"vlrollout.output={out}"]
    # Equal lengths: episodes finish in the order they started, the order AReaL's bound assumes.
    cmd += [*SMALL, *ASYNC, "total_train_steps=3", "vlrollout.eval_every=0"]
    cmd += ["gconfig.max_new_tokens=12", "+gconfig.min_new_tokens=12"]
    env = subprocess_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    steps = _jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert all(r["n_trajectories"] == 4 for r in steps)
    # (a) Every trained token at most k = 1 version old, and the next batch under way during
    # every update (else this run would test nothing asynchronous).
    assert [r["staleness_max"] for r in steps] == [0, 1, 1]
    # Every step reports the drift; the first has no stale token (unit tests above check values).
    assert steps[0]["staleness/max_log_ratio"] == 0.0
    assert all(r["staleness/max_log_ratio"] >= 0.0 for r in steps)

    batches = _jsonl(out / RECORD)
    assert [b["step"] for b in batches] == [1, 2, 3]
    for b, r in zip(batches, steps, strict=True):
        oldest = min(min(vs) for vs in b["versions"])
        assert r["staleness_max"] == b["version"] - oldest
        for vs in b["versions"]:
            # (b) Versions never go down within a sequence, and none is ahead of the trainer.
            assert vs == sorted(vs) and b["version"] - 1 <= vs[0] and vs[-1] <= b["version"]
        # Each token's logprob is that of the weights its version names.
        assert max(b["gap"].values()) <= 1e-4, b["gap"]
    trained = [g for b in batches for v, g in b["gap_to_start"].items() if v != "0"]
    assert trained and max(trained) > 1e-2  # those weights are not the starting ones


@pytest.mark.slow
def test_async_run_resumes_after_a_kill(tmp_path):
    out = tmp_path / "run"
    args = [*SMALL, *ASYNC, "total_train_steps=4", "vlrollout.eval_every=0"]
    cmd = [sys.executable, "-m", "vlrollout.cli", "train", "--config"]
    cmd += ["examples/train_grounding.yaml", f"vlrollout.output={out}", *args]
    env = subprocess_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    latest = out / "checkpoints" / "latest"
    log = tmp_path / "killed.log"
    with open(log, "w") as stderr:
        # its own process group: the kill takes the run's child processes with it
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 600
        while not (latest.exists() and latest.read_text().strip() == "step_2"):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    state = json.loads((out / "checkpoints" / "step_2" / "state.json").read_text())
    pulled = state["rollouts"][0]["loader"]["_num_yielded"]
    assert state["rollouts"][0]["first"] == 0 and pulled >= 2

    run_train(out, *args)  # resumes after step 2
    steps = _jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    # Rollouts of this tiny model finish well within an update, and still every step after
    # the first of each process trained the batch submitted before the previous update.
    assert [r["staleness_max"] for r in steps] == [0, 1, 0, 1]
    # Each process's one-time set-up, reported with its first step (not inside its update).
    assert ["time/setup" in r for r in steps] == [True, False, True, False]
    assert [r["step"] for r in _jsonl(out / "eval.jsonl")] == [0, 4]
    end = json.loads((out / "checkpoints" / "step_4" / "state.json").read_text())
    # The resumed loader went on from the killed run's position (the same first position, two
    # more steps' batches pulled), not from the start of the data.
    assert end["rollouts"][0]["first"] == 0
    assert end["rollouts"][0]["loader"]["_num_yielded"] >= pulled + 2


def test_async_config_warning_counts_one_version_in_the_singular(tmp_path):
    k1 = _config(tmp_path, "rollout.max_head_offpolicyness=1", "actor.recompute_logprob=true")
    (line,) = config_warnings(k1)
    assert "up to 1 weight version old" in line
