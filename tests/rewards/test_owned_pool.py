"""The reward pools are the package's own: sized as AReaL sizes them, replaced when a reward hangs,
shut down by the CLI, and reached without any private name of AReaL or of the executor."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from vlrollout.rewards import executor
from vlrollout.rewards.executor import (
    current_pool,
    live_reward_pools,
    replace_pool,
    run_in_pool,
    shutdown_reward_pools,
)

REPO = Path(__file__).resolve().parents[2]
PRIVATE = [
    "_executors",
    "_recreate_executor",
    "AsyncRewardWrapper._lock",
    "._processes",
    "._broken",
]
"""AReaL's ``AsyncRewardWrapper`` internals and ``ProcessPoolExecutor`` internals."""


def test_no_private_pool_state_is_reached_for():
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for folder in ("vlrollout", "processors", "rewards")
        for path in sorted((REPO / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if any(name in line for name in PRIVATE)
    ]
    assert found == []


def test_the_private_name_scan_sees_a_use():
    line = "old = AsyncRewardWrapper._executors.get(key); old._processes"
    assert [name for name in PRIVATE if name in line] == ["_executors", "._processes"]


def test_worker_count_follows_areals_rule(monkeypatch):
    monkeypatch.setattr(executor, "accelerator_count", lambda: 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert executor.default_max_workers() == 8
    monkeypatch.setattr(executor, "accelerator_count", lambda: 8)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert executor.default_max_workers() == 1  # never below one


def test_accelerators_are_counted_from_device_nodes(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "sda"):
        (tmp_path / name).touch()
    assert executor.accelerator_count(tmp_path) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert executor.accelerator_count(empty) == executor.ACCELERATORS_IF_UNKNOWN
    assert executor.accelerator_count(tmp_path / "missing") == executor.ACCELERATORS_IF_UNKNOWN


def _pids(pool):
    return {w.pid for w in pool.workers}


def test_a_pool_records_exactly_the_workers_that_run_its_calls():
    async def main():
        return {await run_in_pool(os.getpid, max_workers=2) for _ in range(6)}

    seen = asyncio.run(main())
    pool = current_pool(2)
    assert seen <= _pids(pool) and len(pool.workers) == 2
    assert os.getpid() not in _pids(pool)


def test_starting_a_pool_starts_every_worker_before_any_call():
    pool = current_pool(6)
    try:
        assert pool.workers == []  # a pool starts its workers on its first call...
        pool.start()  # ...or when asked
        assert len(pool.running_workers()) == 6
        assert os.getpid() not in _pids(pool)
    finally:
        shutdown_reward_pools(keep=[p for p in live_reward_pools() if p is not pool])


def test_replacing_a_hung_pool_kills_its_workers_and_reruns_the_call_beside_once():
    async def main():
        pool = current_pool(3)
        await run_in_pool(os.getpid, max_workers=3)  # the workers are up
        hung = [pool.executor.submit(time.sleep, 60) for _ in range(3)]  # every worker busy
        beside = asyncio.create_task(run_in_pool(os.getpid, max_workers=3))  # queued behind
        await asyncio.sleep(0.2)
        assert replace_pool(pool)
        assert not replace_pool(pool)  # already replaced: a second timeout does nothing
        pid = await asyncio.wait_for(beside, 30)
        return pool, hung, pid

    t0 = time.perf_counter()
    old, hung, pid = asyncio.run(main())
    assert time.perf_counter() - t0 < 30
    new = current_pool(3)
    assert new is not old and pid in _pids(new)
    assert all(isinstance(f.exception(timeout=10), BrokenProcessPool) for f in hung)
    assert old.running_workers(wait_s=10) == []


def test_shutdown_kills_a_worker_that_does_not_stop_and_keeps_the_pools_asked_for():
    kept = current_pool(1)
    pool = current_pool(4)
    busy = pool.executor.submit(time.sleep, 60)
    while not busy.running():
        time.sleep(0.01)
    t0 = time.perf_counter()
    shutdown_reward_pools(keep=[kept], grace_s=0.5)
    assert time.perf_counter() - t0 < 10
    assert pool.running_workers() == []
    live = live_reward_pools()
    assert kept in live and pool not in live
    with pytest.raises(RuntimeError):  # shut down (or broken, once its worker was killed)
        pool.executor.submit(os.getpid)
    assert current_pool(4) is not pool  # a later call gets a fresh pool


def test_the_cli_shuts_down_the_pools_its_command_started():
    from vlrollout.cli import run_command

    older = current_pool(1)
    started = []

    def command() -> int:
        async def main():
            return await run_in_pool(os.getpid, max_workers=5)

        asyncio.run(main())
        started.append(current_pool(5))
        return 0

    assert run_command("run", command) == 0
    (pool,) = started
    live = live_reward_pools()
    assert pool not in live and older in live
    assert pool.workers and pool.running_workers() == []
    with pytest.raises(RuntimeError):  # shut down (or broken, once its worker was killed)
        pool.executor.submit(os.getpid)


def _send_self_sigint() -> str:
    """In a worker: Ctrl-C as a terminal sends it to the whole foreground group."""
    import signal

    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)  # a worker that took it would have died with a KeyboardInterrupt by now
    return "alive"


def test_a_worker_lets_ctrl_c_to_the_owner():
    """The owner says "stopped by SIGINT" in one line; a worker that took the signal would die
    with a traceback of its own (and the call with BrokenProcessPool)."""

    import signal

    async def main():
        # Python's own handler, as in a command's process (asyncio.run installs one of its own,
        # which a forked worker would inherit instead).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        return await run_in_pool(_send_self_sigint, max_workers=1)

    shutdown_reward_pools()  # workers forked from here, not reused from an earlier test
    try:
        assert asyncio.run(main()) == "alive"
    except KeyboardInterrupt:  # the worker's, sent back as the call's result
        pytest.fail("a reward worker took Ctrl-C")
    finally:
        shutdown_reward_pools()


def _sigterm_is_default() -> bool:
    import signal

    return signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_worker_ends_quietly_on_sigterm():
    """A SIGTERM to the whole process group (``timeout``, a cluster's job manager) reaches the
    workers too: a worker must take the default action, not the owner's handler that it inherited
    by fork (the CLI's raises ``SignalExit``, which a worker would print as a traceback)."""
    import signal

    from vlrollout.cli import _raise_signal_exit

    previous = signal.signal(signal.SIGTERM, _raise_signal_exit)
    shutdown_reward_pools()  # workers forked from here, not reused from an earlier test
    try:
        assert asyncio.run(run_in_pool(_sigterm_is_default, max_workers=1))
    finally:
        signal.signal(signal.SIGTERM, previous)
        shutdown_reward_pools()


OWNER = """
import os, sys, time
from vlrollout.rewards.executor import current_pool
pool = current_pool(2)
pool.start()
print(" ".join(str(p.pid) for p in pool.workers), flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, counts as
    ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_workers_end_when_their_owner_is_killed():
    """SIGKILL (the OOM killer, ``kill -9``) gives the owner no chance to stop its pool: each
    worker notices it lost its owner and ends, rather than waiting for calls that never come
    (holding its copy of the owner's memory) for the rest of the machine's uptime."""
    import signal
    import subprocess
    import sys

    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    finally:
        owner.kill()
        for pid in pids if "pids" in locals() else []:
            if _alive(pid):
                os.kill(pid, 9)


def _die() -> None:
    os._exit(3)


def test_a_call_that_kills_its_worker_twice_leaves_a_fresh_pool_for_the_next_call(caplog):
    """The crash is raised to its own call; the next call, an innocent one, finds a working pool
    (it had found the broken one, was blamed in the warning and sent twice)."""

    async def both():
        with pytest.raises(BrokenProcessPool):
            await run_in_pool(_die, max_workers=1)
        caplog.clear()
        return await run_in_pool(abs, -3, max_workers=1)

    try:
        assert asyncio.run(both()) == 3
        assert "reward pool broken" not in caplog.text
    finally:
        shutdown_reward_pools()
