"""Hand memory freed after a burst back to the system.

glibc's allocator keeps freed heap memory in its arenas (one per thread that allocated: the event
loop, the image-decoding threads, the engine's thread), so after a burst of image requests the
server's resident memory stays near its peak although the requests are gone. ``malloc_trim(0)``
(glibc's public API, ``man 3 malloc_trim``) returns the free pages of every arena;
``bench/bench_serve_load.py`` records the server's resident memory idle, at its peak and after a
burst. Other C libraries (musl, macOS) have no ``malloc_trim``; there this is a no-op. The server
does it a second after its queue drains (:func:`trim_after_drain`) and after each large image
decode (:func:`trim_soon`), off the event loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # no C library found, or one without malloc_trim
        return None


def release_free_memory() -> bool:
    """Return the allocator's free memory to the system; ``False`` where that is not possible
    (no glibc). Takes milliseconds; call it off the event loop."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


TRIM_DELAY_S = 1.0
"""Seconds between the queue draining and freed memory being handed back
(:func:`release_free_memory`): a server answering one request at a time drains after each, and
one hand-back per second at most is enough."""


def trim_soon() -> None:
    """Hand freed memory back now, off the event loop, without waiting for it."""
    asyncio.get_running_loop().run_in_executor(None, release_free_memory)


def trim_after_drain() -> Callable[[], None]:
    """An ``on_drain`` callback that hands freed memory back, off the event loop,
    :data:`TRIM_DELAY_S` after the queue drains; drains while one is pending share it, so the
    last drain of a burst is always followed by one."""
    pending: list[asyncio.TimerHandle] = []

    def trim() -> None:
        pending.clear()
        trim_soon()

    def on_drain() -> None:
        if not pending:
            pending.append(asyncio.get_running_loop().call_later(TRIM_DELAY_S, trim))

    return on_drain
