"""When a reward pool task starts in its worker: the moment a call's timeout counts from.

A call can wait in the pool's queue behind the calls before it (one worker on a machine without
accelerators, a GRPO group of slow rewards ahead of it), and that wait says nothing about the
reward. So each worker reports every task as it starts it, over a pipe the pool's workers
inherit (:class:`StartBoard`), and the caller starts the task's clock then
(:func:`expect_start`). A task sent once more to a fresh pool (its first one broke under a hung
neighbour) reports again, and its clock restarts there. A report is one 8-byte message, a single write below ``PIPE_BUF``: workers
writing at once never interleave, and no lock is shared with them (a worker killed mid-write
leaves none held).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

POLL_S = 0.2
"""How often a board's reader checks whether its pool has been closed."""

_TOKEN = struct.Struct("<q")
_WRITER: Connection | None = None  # in a worker: where its starts are reported
_WAITING: dict[int, TaskStart] = {}
_TOKENS = itertools.count()
_LOCK = threading.Lock()


def init_worker(writer: Connection) -> None:
    """A worker's start: report task starts on ``writer``."""
    global _WRITER
    _WRITER = writer


def report_start(token: int | None) -> None:
    """In a worker: the task ``token`` starts now (nothing for a task sent without one)."""
    if token is not None and _WRITER is not None:
        _WRITER.send_bytes(_TOKEN.pack(token))


@dataclass(eq=False)
class TaskStart:
    """Where and when a task last started, read on the event loop that waits for it.

    Attributes:
        loop: That event loop.
        started: Done once a worker has started the task.
        at: The loop's time at the latest start (``None`` before the first).
        pool: The pool whose worker started it last.
    """

    loop: asyncio.AbstractEventLoop
    started: asyncio.Future[None] = field(init=False)
    at: float | None = None
    pool: Any = None

    def __post_init__(self) -> None:
        self.started = self.loop.create_future()


def expect_start() -> tuple[int, TaskStart]:
    """A token for a new task and the :class:`TaskStart` its reports fill in. Call
    :func:`forget` with the token when the task is over."""
    start = TaskStart(asyncio.get_running_loop())
    token = next(_TOKENS)
    with _LOCK:
        _WAITING[token] = start
    return token, start


def forget(token: int) -> None:
    with _LOCK:
        _WAITING.pop(token, None)


class StartBoard:
    """One pool's side of the reports: the pipe its workers write to and a thread that reads
    it. Closing the board ends the thread within :data:`POLL_S`.

    Attributes:
        writer: The end the pool's workers inherit (pass it to :func:`init_worker`).
    """

    def __init__(self, pool: Any, context: Any) -> None:
        self._pool = pool
        self._reader, self.writer = context.Pipe(duplex=False)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read, name="reward-task-starts", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _read(self) -> None:
        try:
            while not self._closed.is_set():
                if self._reader.poll(POLL_S):
                    (token,) = _TOKEN.unpack(self._reader.recv_bytes())
                    _started(token, self._pool)
        except (EOFError, OSError):
            pass
        finally:
            self._reader.close()


def _started(token: int, pool: Any) -> None:
    with _LOCK:
        start = _WAITING.get(token)
    if start is None:  # its caller is done with it
        return
    try:
        start.loop.call_soon_threadsafe(_record, start, pool)
    except RuntimeError:  # its event loop has closed
        pass


def _record(start: TaskStart, pool: Any) -> None:
    start.at, start.pool = start.loop.time(), pool
    if not start.started.done():
        start.started.set_result(None)
