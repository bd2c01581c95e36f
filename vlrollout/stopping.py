"""Stopping an asyncio command on SIGINT or SIGTERM.

The CLI's SIGTERM handler raises :class:`~vlrollout.errors.SignalExit` from wherever the main
thread is. Inside an event loop that is one of the loop's own callbacks, and an exception raised
there is logged and dropped by the loop (uvloop), so the command would go on to the end. While a
coroutine runs, :func:`until_signalled` takes the signals through the loop instead: they cancel
the coroutine's task, whose ``finally`` blocks run, and :class:`SignalExit` is raised after.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import TypeVar

from vlrollout.errors import SignalExit

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def until_signalled(work: Awaitable[T]) -> T:
    """The result of ``work``; SIGINT or SIGTERM cancels it and raises ``SignalExit(signum)``.

    Off the main thread, where a loop cannot take signals, ``work`` is simply awaited.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    received: list[int] = []

    def on_signal(signum: int) -> None:
        if not received:
            received.append(signum)
            task.cancel()

    installed = []
    for signum in STOP_SIGNALS:
        previous = signal.getsignal(signum)
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append((signum, previous))
        except (RuntimeError, ValueError, NotImplementedError):  # not the main thread
            pass
    try:
        return await task
    except asyncio.CancelledError:
        if not received:
            raise
        raise SignalExit(received[0]) from None
    finally:
        for signum, previous in installed:  # the loop's removal leaves the default handler
            loop.remove_signal_handler(signum)
            signal.signal(signum, previous)
