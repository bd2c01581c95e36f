"""The environment for a trainer subprocess started by a test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DIST_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
"""Set in this process by a session actor (``vlrollout.train.actor``); inherited, they would make
the child's rendezvous collide with ours (EADDRINUSE)."""


def subprocess_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without this process's torch.distributed variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env.update(extra)
    return env


def run_train(
    out: Path,
    *overrides: str,
    timeout: int = 600,
    config: str = "examples/train_grounding.yaml",
    nice: int = 0,
) -> subprocess.CompletedProcess:
    """``vlrollout train --config CONFIG vlrollout.output=OUT OVERRIDES`` as a user runs it (a
    subprocess: its own torch.distributed), from the repository root; asserts it succeeded.
    ``nice``: the subprocess's CPU niceness (19: it computes only when the CPU is idle)."""
    cmd = ["nice", "-n", str(nice)] if nice else []
    cmd += [sys.executable, "-m", "vlrollout.cli", "train"]
    cmd += ["--config", config, f"vlrollout.output={out}", *overrides]
    env = subprocess_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def run_side_by_side(runs: Iterable[Callable[[], object]]) -> list[Future]:
    """Start ``runs`` (calls of :func:`run_train`, longest first) on as many threads as the machine
    has cores and return their futures in order.

    A trainer subprocess computes on one thread (``OMP_NUM_THREADS=1``) and the test waiting on it
    on none, so runs one after another leave every core but one idle. Their results do not depend
    on what else runs: the seeded deterministic engine gives the same tokens under any load
    (``vlrollout.engine.deterministic``), which is what a rerun compared with its run checks.
    """
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="train")
    futures = [pool.submit(run) for run in runs]
    pool.shutdown(wait=False)
    return futures


SHIPPED_MODEL = "actor.path=assets/tiny-qwen2vl"
"""The runs that test the training machinery train the shipped model: it counts and captions, and
the serving and weight tests compare against it (the grounding recipe starts from another)."""

TINY_RUN = (
    SHIPPED_MODEL,
    "total_train_steps=2",
    "train_dataset.batch_size=2",
    "gconfig.n_samples=2",
    "gconfig.max_new_tokens=20",  # a whole Qwen2-VL box is 18 tokens, then the stop token
    "vlrollout.train_items=8",
    "vlrollout.eval_items=4",
    "vlrollout.eval_every=0",  # held-out evaluations before training and after step 2
    "vlrollout.progress=false",
)
"""Two GRPO steps of the tiny model, a checkpoint after the last (``tests/conftest.py``'s
``trained_run`` and ``trained_lora_run``)."""

TRACKERS = (
    "stats_logger.wandb.mode=offline",
    "stats_logger.swanlab.mode=offline",
    "vlrollout.log_rollouts=3",  # not the default 4: the setting is honoured
)
"""Every tracker, offline (TensorBoard's folder is given per run)."""
