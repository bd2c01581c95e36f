"""Admission control: a bound on the generation requests the server holds and on their bytes.

Every generation request the server has admitted and not yet answered is *queued* (waiting for
the engine or decoding): it holds its body, its decoded images and its tensors. Without a bound
the server's memory grows with the number of clients; with one, a request that would exceed it is
answered at once with 503 and ``Retry-After`` (as vLLM and SGLang answer when full), before its
body is read. Control routes (pause, continue, weight updates) and ``/health`` are never refused:
a trainer must be able to update weights while the queue is full.

A request is charged its ``Content-Length`` when it arrives; a body sent without one (chunked)
is charged when it has been read (:meth:`Admission.grow`).

A body says little about what its images decode to (a flat PNG of a few hundred KB decodes to
hundreds of MB), so decoding has a bound of its own, in pixels (:meth:`Admission.decoding_room`):
once a request's images' headers are read, it waits until its pixels fit beside those being
decoded, and a request whose pixels could never fit gets 413.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from vlrollout.processors.decode_room import RESIDENT_PER_PIXEL, Turns
from vlrollout.serve.errors import BadRequest, body_too_large
from vlrollout.serve.limits import RESIDENT_PER_QUEUED_BYTE

RETRY_AFTER_S = 1
"""Seconds a refused client is asked to wait (``Retry-After``): the tiny model answers a request
in well under a second, a full queue drains within seconds."""
LARGE_DECODE_SHARE = 1 / 8
"""A decode that took at least this share of the pixels decoded at once is followed by
``on_large_decode`` (the server hands freed memory back): glibc keeps a decode's freed memory in
the arena of the thread that decoded, so without it each decoding thread would add a large
decode's worth to the server's resident memory (``bench/bench_serve_decoded.py``'s burst)."""
TICKET: web.RequestKey[int] = web.RequestKey("admitted_bytes", int)
"""The bytes an admitted request is charged, kept on the request."""


@dataclass(frozen=True)
class QueueLimits:
    """How much the server queues before it answers 503.

    Args:
        max_requests: Generation requests admitted and not yet answered (``None``: no bound).
        max_bytes: Their request bodies' bytes together (``None``: no bound).
    """

    max_requests: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_requests", "max_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"QueueLimits.{name} must be >= 1 or None, got {value}")


class Admission:
    """The queue's counters and the admission decision (one event loop: no locks needed).

    Args:
        limits: The bounds.
        on_drain: Called each time the last queued request leaves (e.g. to hand freed memory
            back to the system).
        on_large_decode: Called after each decode of at least :data:`LARGE_DECODE_SHARE` of
            the pixels decoded at once (likewise).

    >>> gate = Admission(QueueLimits(max_requests=1, max_bytes=10))
    >>> gate.admit(4), gate.admit(4)
    (True, False)
    """

    def __init__(
        self,
        limits: QueueLimits,
        on_drain: Callable[[], Any] | None = None,
        on_large_decode: Callable[[], Any] | None = None,
    ) -> None:
        self.limits = limits
        self.on_drain = on_drain
        self.on_large_decode = on_large_decode
        self.requests = self.bytes = 0
        self.admitted = self.refused = 0
        self.peak_requests = self.peak_bytes = 0
        self.decoding = self.peak_decoding = 0  # image pixels being decoded
        self._decoded = asyncio.Condition()
        self._turns = Turns()

    def admit(self, nbytes: int) -> bool:
        """Queue one request of ``nbytes``; ``False`` (counted as refused) when it would exceed
        either bound."""
        most = self.limits.max_requests
        if (most is not None and self.requests >= most) or not self._fits(nbytes):
            self.refused += 1
            return False
        self.requests += 1
        self.admitted += 1
        self._add(nbytes)
        return True

    def grow(self, nbytes: int) -> bool:
        """Charge an admitted request ``nbytes`` more; ``False`` when that exceeds the byte
        bound: nothing is charged and the request counts as refused instead of admitted (it is
        answered 503; :meth:`release` still follows)."""
        if not self._fits(nbytes):
            self.admitted -= 1
            self.refused += 1
            return False
        self._add(nbytes)
        return True

    def release(self, nbytes: int) -> None:
        """An admitted request of ``nbytes`` (all it was charged) was answered."""
        self.requests -= 1
        self.bytes -= nbytes
        if self.requests == 0 and self.on_drain is not None:
            self.on_drain()

    def _fits(self, nbytes: int) -> bool:
        most = self.limits.max_bytes
        return most is None or self.bytes + nbytes <= most

    def _add(self, nbytes: int) -> None:
        self.bytes += nbytes
        self.peak_requests = max(self.peak_requests, self.requests)
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    @property
    def max_decoding(self) -> int | None:
        """Image pixels decoded at once: the byte bound's share of memory at
        :data:`RESIDENT_PER_PIXEL` (``None``: no byte bound)."""
        most = self.limits.max_bytes
        return None if most is None else most * RESIDENT_PER_QUEUED_BYTE // RESIDENT_PER_PIXEL

    @contextlib.asynccontextmanager
    async def decoding_room(self, pixels: int, media: str, where: str) -> AsyncIterator[None]:
        """Hold room to decode an admitted request's ``media`` (``"2 image(s)"``, what the
        413 names) of ``pixels`` (read from their headers) for the ``with`` block, waiting for
        its turn (first come, first served) and until they fit beside the pixels being decoded.
        Media that could never fit are a 413, counted as refused."""
        most = self.max_decoding
        if most is not None and pixels > most:
            self.admitted -= 1
            self.refused += 1
            raise BadRequest(
                f"{where}: the request's {media} count for {pixels} pixels, more "
                f"than this server decodes at once ({most} pixels: the --max-queued-mb share of "
                f"memory at {RESIDENT_PER_PIXEL} bytes per pixel; a pixel with alpha or of more "
                "than 8 bits counts for more, a video frame's for half); send smaller images, or "
                "videos of fewer or smaller frames",
                status=413,
            )
        async with self._decoded:
            ticket = self._turns.take()
            try:  # first come, first served: a large request is not overtaken for ever
                await self._decoded.wait_for(
                    lambda: (
                        self._turns.serving == ticket
                        and (most is None or self.decoding + pixels <= most)
                    )
                )
            except BaseException:  # the client went away while it waited
                self._turns.give_up(ticket)
                self._decoded.notify_all()
                raise
            self._turns.advance()
            self._decoded.notify_all()
            self.decoding += pixels
            self.peak_decoding = max(self.peak_decoding, self.decoding)
        try:
            yield
        finally:
            async with self._decoded:
                self.decoding -= pixels
                self._decoded.notify_all()
            large = most is not None and pixels >= LARGE_DECODE_SHARE * most
            if large and self.on_large_decode is not None:
                self.on_large_decode()

    def snapshot(self) -> dict[str, int | None]:
        """The counters, as ``/health`` reports them under ``queue``."""
        return {
            "requests": self.requests,
            "bytes": self.bytes,
            "max_requests": self.limits.max_requests,
            "max_bytes": self.limits.max_bytes,
            "admitted": self.admitted,
            "refused": self.refused,
            "peak_requests": self.peak_requests,
            "peak_bytes": self.peak_bytes,
            "decoding_pixels": self.decoding,
            "max_decoding_pixels": self.max_decoding,
            "peak_decoding_pixels": self.peak_decoding,
        }

    def full(self, where: str) -> BadRequest:
        """The 503 a refused request gets, naming the bounds."""
        limits = self.limits
        return BadRequest(
            f"{where}: the server's queue is full ({limits.max_requests} requests or "
            f"{limits.max_bytes} bytes; --max-queued-requests, --max-queued-mb); retry later",
            status=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )


def admission_middleware(
    gate: Admission, paths: Collection[str], max_body_bytes: int | None = None
):
    """An aiohttp middleware admitting requests to ``paths`` (the generation routes) through
    ``gate``; other paths pass untouched. A declared body over ``max_body_bytes`` gets its 413
    first: it could never be admitted, so a 503 would only make the client retry it."""

    @web.middleware
    async def admit(request: web.Request, handler) -> web.StreamResponse:
        if request.path not in paths or request.method != "POST":
            return await handler(request)
        nbytes = request.content_length or 0
        if max_body_bytes is not None and nbytes > max_body_bytes:
            raise body_too_large(request.path, max_body_bytes)
        if not gate.admit(nbytes):
            raise gate.full(request.path)
        request[TICKET] = nbytes
        try:
            return await handler(request)
        finally:
            gate.release(request[TICKET])

    return admit


def charge_read_body(request: web.Request, gate: Admission | None, nbytes: int) -> None:
    """Charge a body read without a ``Content-Length`` (chunked) to its admitted request; 503
    when that exceeds the byte bound."""
    if gate is None or TICKET not in request or request.content_length is not None:
        return
    if not gate.grow(nbytes):
        raise gate.full(request.path)
    request[TICKET] += nbytes


class TokenRate:
    """Generated tokens per second over the last ``window_s`` seconds.

    >>> rate = TokenRate(window_s=10.0)
    >>> rate.add(50, now=100.0); rate.add(50, now=105.0)
    >>> rate.per_second(now=105.0), rate.total
    (10.0, 100)
    """

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self.total = 0
        self._events: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, tokens: int, now: float | None = None) -> None:
        self.total += tokens
        self._events.append((time.monotonic() if now is None else now, tokens))

    def per_second(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        while self._events and self._events[0][0] < now - self.window_s:
            self._events.popleft()
        return sum(n for _, n in self._events) / self.window_s
