"""The process pools rewards run in: owned by this package, replaced when a reward hangs.

Rewards are synchronous CPU-bound functions, so they run in a
``concurrent.futures.ProcessPoolExecutor`` and the event loop awaits them. AReaL's
``AsyncRewardWrapper`` keeps such a pool, but its public API only submits: it cannot replace a
pool whose worker is stuck in a reward that never returns, name the workers to kill, or shut the
pools down on demand. Those are what keep one hung reward from timing out every later one, so this
module owns the pools and the package does not use ``AsyncRewardWrapper`` at all. It keeps the
wrapper's observable rules: the same worker count (:func:`default_max_workers`), the default
multiprocessing start method, one pool shared per worker count, and a call that finds its pool
broken (a worker died) sent once more to a fresh pool; unlike the wrapper, a reward that raises is
not called again.

Killing a pool's workers. ``shutdown`` cannot stop a function that never returns, and the
executor does not publish its processes. Each executor is therefore built with a
multiprocessing context of our own (:class:`_RecordingContext`): the default context, except that
every ``Process`` it creates is also recorded in :attr:`RewardPool.workers`. The executor starts
all its workers through the context it is given, so the list holds exactly this pool's workers,
and they are stopped with the public ``multiprocessing.Process`` API. This needs no initializer,
no ``psutil`` scan of children (which could not tell a reward worker from another child such as an
inference server), and no private executor attribute.

Replacing (:func:`replace_pool`) swaps in a fresh pool, then kills the old workers: the hung call
dies, and calls that were queued or running beside it get ``BrokenProcessPool``, which
:func:`run_in_pool` answers by sending them to the new pool. A reward
that raises is never called again: its exception is the call's outcome.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, TypeVar

from vlrollout.logs import get_logger

from . import task_starts

T = TypeVar("T")
logger = get_logger(__name__)

ACCELERATOR_PREFIXES = ("nvidia", "davinci")
"""Device nodes counted as accelerators: ``/dev/nvidia0``, ``/dev/davinci3``... (a prefix followed
only by digits, so ``/dev/nvidiactl`` is not one)."""

ACCELERATORS_IF_UNKNOWN = 8
"""Accelerators assumed when none are found or ``/dev`` cannot be read, as AReaL's wrapper does: a
cautious guess that keeps the pool small on a machine whose devices are not visible."""

KILL_WAIT_S = 10.0
"""Seconds to wait for killed workers to end (``SIGKILL`` cannot be caught, so they do)."""

OWNER_CHECK_S = 0.5
"""How often a worker checks that the process owning its pool still runs (:func:`end_with_owner`)."""


_POOLS: dict[int, RewardPool] = {}  # worker count -> the pool calls go to now
_LOCK = threading.Lock()


def accelerator_count(dev: Path = Path("/dev")) -> int:
    """Accelerators on this machine, counted from device nodes (no CUDA context is created).

    Returns :data:`ACCELERATORS_IF_UNKNOWN` when there are none or ``dev`` cannot be listed.
    """
    try:
        names = os.listdir(dev)
    except OSError:
        return ACCELERATORS_IF_UNKNOWN
    for prefix in ACCELERATOR_PREFIXES:
        found = [n for n in names if n.startswith(prefix) and n[len(prefix) :].isdigit()]
        if found:
            return len(found)
    return ACCELERATORS_IF_UNKNOWN


def default_max_workers() -> int:
    """Reward workers per pool: ``max((cpu_count // accelerators) // 2, 1)``, AReaL's rule.

    Half the CPU cores of one accelerator's share, so the rollout process keeps cores for
    preparing prompts; one worker on a machine without visible accelerators and few cores.
    """
    return max(((os.cpu_count() or 1) // accelerator_count()) // 2, 1)


class _RecordingContext:
    """The default multiprocessing context, also recording each process it creates in ``workers``.

    ``ProcessPoolExecutor`` asks its context for ``Process``, ``Queue``, ``SimpleQueue``, locks
    and the start method; only ``Process`` differs from the default context.
    """

    def __init__(self, workers: list[BaseProcess]) -> None:
        self._context = multiprocessing.get_context()
        self._workers = workers

    def Process(self, *args: Any, **kwargs: Any) -> BaseProcess:  # noqa: N802 - the context API
        process = self._context.Process(*args, **kwargs)
        self._workers.append(process)
        return process

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def init_worker(starts: multiprocessing.connection.Connection) -> None:
    """A worker's start: its signals (:func:`set_worker_signals`), where it reports the
    tasks it starts (:mod:`vlrollout.rewards.task_starts`), and a watch on its owner
    (:func:`end_with_owner`)."""
    set_worker_signals()
    task_starts.init_worker(starts)
    threading.Thread(
        target=end_with_owner, args=(os.getppid(),), name="owner-watch", daemon=True
    ).start()


def end_with_owner(owner: int, every_s: float = OWNER_CHECK_S) -> None:
    """End this worker once its parent ``owner`` is gone.

    An owner killed outright (SIGKILL, the OOM killer) cannot stop its pool, and a worker waits
    for calls on a queue whose other end its siblings keep open: it would outlive the run, and
    every killed run of a long job would leave its workers behind. An orphan is adopted by
    another process, which changes its parent; that is checked every ``every_s`` seconds (a
    parent-death signal would not do: Linux sends it when the thread that started the worker
    ends, and AReaL starts reward calls from threads of its own).
    """
    while os.getppid() == owner:
        time.sleep(every_s)
    os._exit(1)


def set_worker_signals() -> None:
    """A worker's start: Ctrl-C and SIGTERM are for the process that owns the pool.

    A terminal's Ctrl-C reaches every process of the foreground group; a worker that took it would
    die with a ``KeyboardInterrupt`` traceback of its own, printed under the command's one-line
    "stopped by SIGINT". The owner stops its workers itself (:meth:`RewardPool.kill`,
    :meth:`RewardPool.shutdown`). A SIGTERM sent to the whole group (``timeout``, a cluster's job
    manager) ends a worker at once: the default action, not the owner's handler the worker
    inherited by fork (the CLI's raises an exception, which a worker would print as a traceback).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@dataclass(eq=False)
class RewardPool:
    """One process pool and the worker processes it started.

    Attributes:
        max_workers: Its size, and its key among the pools: rewards that ask for the same size
            share it.
        executor: Where calls are submitted.
        workers: Every process the executor started (see the module docstring).
        starts: Where its workers report the tasks they start.
        killed_under_hung_call: Set by :func:`replace_pool` (``hung=True``) before it kills
            the workers.
    """

    max_workers: int
    executor: ProcessPoolExecutor = field(init=False)
    workers: list[BaseProcess] = field(init=False, default_factory=list)
    starts: task_starts.StartBoard = field(init=False)
    killed_under_hung_call: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        context = _RecordingContext(self.workers)
        self.starts = task_starts.StartBoard(self, context)
        self.executor = ProcessPoolExecutor(
            max_workers=self.max_workers,
            mp_context=context,
            initializer=init_worker,
            initargs=(self.starts.writer,),
        )

    def start(self) -> None:
        """Start every worker now, rather than on the first call, and return once they all run.

        With the default ``fork`` start method a worker is a copy of this process as it is when
        the worker starts, sharing its memory pages until either side writes one. A trainer
        starts its workers before it loads the model (:func:`vlrollout.train.session.start_session`),
        so that its writes to the weights, gradients and optimizer state copy no shared page:
        the first step would otherwise pay for those copies, and each copied page would be held
        twice.
        """
        calls = [self.executor.submit(os.getpid) for _ in range(self.max_workers)]
        for call in calls:
            call.result()

    def kill(self) -> None:
        """Stop accepting calls and kill every worker now, busy or not.

        Calls still queued or running get ``BrokenProcessPool`` (nothing is cancelled: a cancelled
        call would look like its caller was cancelled).
        """
        self.executor.shutdown(wait=False)
        self.starts.close()
        for process in self.running_workers():
            process.kill()

    def stop(self, grace_s: float) -> None:
        """Shut down: queued calls are cancelled, running ones get ``grace_s`` seconds to finish,
        then their workers are killed (a hung reward would otherwise keep the process alive).
        Returns once every worker has ended."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.starts.close()
        for process in self.running_workers(grace_s):
            process.kill()
        self.running_workers(KILL_WAIT_S)

    def running_workers(self, wait_s: float = 0.0) -> list[BaseProcess]:
        """The workers still running after waiting up to ``wait_s`` seconds for all to end.

        Reads each process's sentinel rather than ``is_alive()``: the executor's own thread reaps
        its workers at the same time, and ``is_alive()`` can answer True for a worker it is
        reaping.
        """
        deadline = time.monotonic() + wait_s
        running = [p for p in self.workers if p.pid is not None]  # started
        while running:
            left = max(deadline - time.monotonic(), 0.0)
            ended = set(multiprocessing.connection.wait([p.sentinel for p in running], left))
            running = [p for p in running if p.sentinel not in ended]
            if left == 0.0:
                break
        return running


def current_pool(max_workers: int | None = None) -> RewardPool:
    """The pool of ``max_workers`` workers (default :func:`default_max_workers`) that calls go
    to now, created on first use."""
    size = default_max_workers() if max_workers is None else max_workers
    if size < 1:
        raise ValueError(f"a reward pool needs at least one worker, got {size}")
    with _LOCK:
        pool = _POOLS.get(size)
        if pool is None:
            pool = _POOLS[size] = RewardPool(size)
            _stop_pools_at_exit()
        return pool


_EXIT_HOOK: list[Any] = []


def _stop_pools_at_exit() -> None:
    """Stop the pools when this process exits, once registered. A process started by
    ``multiprocessing`` joins its children at exit before anything else could stop them, so its
    workers, waiting for calls, would keep it from ever exiting; multiprocessing's exit
    finalizers run before that join."""
    if not _EXIT_HOOK:
        _EXIT_HOOK.append(
            multiprocessing.util.Finalize(None, shutdown_reward_pools, exitpriority=10)
        )


def replace_pool(pool: RewardPool, hung: bool = False) -> bool:
    """Give ``pool``'s size a fresh pool and kill ``pool``'s workers, if ``pool`` is still current.

    Several calls that time out on the same pool replace it once: the later ones find it already
    replaced and do nothing. ``hung``: replaced under a call that hung (its neighbours are sent
    again as often as that happens, :func:`run_in_pool`), not after a crash. Returns whether
    this call replaced it.
    """
    with _LOCK:
        if _POOLS.get(pool.max_workers) is not pool:
            return False
        _POOLS[pool.max_workers] = RewardPool(pool.max_workers)
        pool.killed_under_hung_call = hung
    pool.kill()
    return True


def live_reward_pools() -> list[RewardPool]:
    """The pools calls go to now (one per worker count asked for)."""
    with _LOCK:
        return list(_POOLS.values())


def shutdown_reward_pools(keep: Iterable[RewardPool] = (), grace_s: float = 5.0) -> None:
    """Shut down every current pool except those in ``keep`` (see :meth:`RewardPool.stop`).

    A later call creates a fresh pool. ``keep`` lets a command stop only the pools it started
    (take :func:`live_reward_pools` before it runs).
    """
    kept = {id(p) for p in keep}
    with _LOCK:
        stopping = [p for p in _POOLS.values() if id(p) not in kept]
        for pool in stopping:
            del _POOLS[pool.max_workers]
    for pool in stopping:
        pool.stop(grace_s)


async def run_in_pool(fn: Callable[..., T], *args: Any, max_workers: int | None = None) -> T:
    """``fn(*args)`` in the current pool of ``max_workers`` workers, awaited without blocking.

    What ``fn`` raises is raised here, after one call: ``fn`` is user code (a reward that may keep
    state), so it is never run again behind the caller's back. A pool that
    :func:`replace_pool` killed under a hung neighbour had done nothing wrong by this call: the
    call is sent to the fresh pool, as often as neighbours break it (the caller that times a hung
    call cancels it before replacing the pool, so a hung call is not sent again). A pool whose
    worker crashed is replaced and the call sent once more, with a warning; a second crash is
    raised, as the call itself may be what kills its worker, and leaves a fresh pool behind. ``fn`` and ``args`` must be
    picklable.
    """
    loop = asyncio.get_running_loop()
    crashed = False
    while True:
        pool = current_pool(max_workers)
        try:
            return await loop.run_in_executor(pool.executor, fn, *args)
        except BrokenProcessPool as e:
            if pool.killed_under_hung_call:  # a neighbour's doing, not this call's
                continue
            if crashed:  # a second crash: this call may be what kills its worker
                replace_pool(pool)  # the next call, maybe an innocent one, gets a working pool
                raise
            crashed = True
            replace_pool(pool)
            logger.warning(
                "reward pool broken (%s: a worker died); sending %s once more to a fresh pool",
                e,
                getattr(getattr(fn, "recipe", None), "name", None)  # a RewardBatch: its reward
                or getattr(fn, "__qualname__", type(fn).__name__),
            )
