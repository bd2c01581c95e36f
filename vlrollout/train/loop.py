"""The GRPO loop of ``vlrollout train``, wired from AReaL's own pieces.

:func:`train` sets the run up (:func:`~vlrollout.train.session.start_session`), evaluates the
starting policy, then takes the steps (:func:`~vlrollout.train.step.train_step`), each followed
by its record, the held-out evaluation when due (:mod:`vlrollout.train.evaluation`), a checkpoint
when due (:mod:`vlrollout.train.checkpoint`) and the HTML report. Nothing of the algorithm is
ours; the other modules add data (:mod:`vlrollout.train.data`), rewards, the rollout engine
(:mod:`vlrollout.train.rollout_engine`), checkpoints and metrics (:mod:`vlrollout.train.stats`).

The batch: with ``rollout.max_head_offpolicyness = 0`` (on-policy), ``actor.rollout_batch`` of the
step's items (AReaL's ``WorkflowExecutor`` running our vision workflow on the engine,
``gconfig.n_samples`` episodes per item), the trainer idle meanwhile; with k > 0,
the step's items submitted k steps ahead, whose episodes keep running while the trainer updates,
at most k weight versions behind it (:mod:`vlrollout.train.asynchronous`).
"""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

from vlrollout.jsonl import append_jsonl, read_jsonl
from vlrollout.train import checkpoint
from vlrollout.train.config import TrainConfig
from vlrollout.train.report import write_report
from vlrollout.train.session import Session, start_session
from vlrollout.train.step import train_step


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run GRPO as configured; returns the last step's record. Resumes from ``output``.

    Under ``torchrun`` every process runs this (:mod:`vlrollout.train.ranks`): each rolls out
    its share of a step's items, and rank 0 evaluates and writes the files.
    """
    s = start_session(cfg)
    record: dict[str, Any] = {}
    try:
        if s.ranks.main and s.start == 0 and not read_jsonl(s.held_out.path):
            s.held_out.run(0, s.loggers)
            s.loggers.commit()
        bar = tqdm(
            range(s.start, s.total),
            initial=s.start,
            total=s.total,
            disable=not (cfg.vlrollout.progress and s.ranks.main),
        )
        for step in bar:
            record = train_step(s, step)
            if s.ranks.main:
                bar.set_postfix(
                    reward=f"{record['reward_mean']:.3f}", s=f"{record['time/step']:.1f}"
                )
            finish_step(s, record)
    finally:
        s.close()
    if s.ranks.main:
        write_report(s.out, cfg)
    return record


def resume_state(s: Session) -> dict[str, Any]:
    """What a checkpoint keeps beside the weights so that a resumed run goes on as this one
    would, one entry per rank: the asynchronous rollouts' loader position (each rank resumes its
    own share of the items) and a deterministic local engine's draw counts (each rank's engine
    counts its own requests, rank 0's the held-out ones too)."""
    state: dict[str, Any] = {}
    if s.rollouts is not None:
        state["rollouts"] = s.ranks.gather([s.rollouts.state()])
    if getattr(s.engine, "deterministic", False):
        state[checkpoint.SAMPLING] = s.ranks.gather([s.engine.sampling_state()])
    return state


def finish_step(s: Session, record: dict[str, Any]) -> None:
    """After a step: its record written and sent to the trackers, the held-out evaluation when
    due (every ``vlrollout.eval_every`` steps and after the last), a checkpoint when due (every
    ``vlrollout.save_every`` steps and after the last), the report rewritten. The other ranks wait
    at the end while rank 0 evaluates."""
    vl, ranks, done = s.cfg.vlrollout, s.ranks, record["step"]
    last = done == s.total
    if ranks.main:
        append_jsonl(s.metrics_path, record)
        s.loggers.add(record)
        if vl.eval_every and done % vl.eval_every == 0 or last:
            s.held_out.run(done, s.loggers)
        s.loggers.commit()
    if done % vl.save_every == 0 or last:
        checkpoint.save(
            s.actor, s.out, done, keep=vl.keep_checkpoints, state=resume_state(s), main=ranks.main
        )
    if ranks.main:
        write_report(s.out, s.cfg)
    ranks.barrier()
