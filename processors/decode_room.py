"""A bound on the image and video pixels this process decodes at once.

A prompt's images, and its videos' sampled frames, are decoded at full size before the processor
resizes them, so preparing one costs memory in proportion to their pixels, not to the tokens they
become: one 64-megapixel PNG of one colour is a few hundred KB on disk and close to a GB while it
is prepared. Prompts are prepared concurrently (a run's ``--concurrency``, a group's episodes of
different items, a server's requests), so without a bound a few such prompts together can take
all of the machine's memory. :data:`DECODE_ROOM` holds the pixels being decoded to a share of the
machine's memory, split among the training processes on the machine; a preparation waits its
turn (first come, first served) until its images and frames fit beside those being decoded, and
one larger than the whole room is prepared alone.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

RESIDENT_PER_PIXEL = 16
"""Resident bytes a process may grow by per image pixel it decodes, at its peak, with a margin
(``bench/bench_serve_decoded.py`` measures one request at a time): the decoded RGB image, the
image processor's copies of it before its resize, and the allocator's slack."""
MODE_WEIGHTS = {
    "CMYK": 1.25,
    "YCbCr": 1.25,
    "LAB": 1.25,
    "HSV": 1.25,
    "I;16": 2.0,
    "I;16B": 2.0,
    "I;16L": 2.0,
    "I;16N": 2.0,
    "RGBA": 2.25,
    "RGBa": 2.25,
    "LA": 2.25,
    "La": 2.25,
    "PA": 2.25,
    "I": 2.75,
    "F": 2.75,
}
"""How many pixels one pixel of a mode counts for (8-bit RGB, grey, palette and 1-bit: one): its
decoded size and the conversions to 8-bit RGB (alpha composited on white, 16-bit and 32-bit grey
scaled) cost more than an 8-bit RGB image's (``bench/bench_serve_decoded.py`` measures each)."""
VIDEO_PIXEL_WEIGHT = 0.5
"""How many pixels one pixel of a video's sampled frames counts for: frames are decoded straight to
8-bit RGB and handed to the video processor without a copy, so they cost about half what an
image's pixel does (``bench/bench_serve_decoded.py`` measures a clip)."""
DECODE_MEMORY_SHARE = 1 / 8
"""The share of the machine's memory the images decoded at once may take by default."""


def machine_memory_bytes() -> int:
    """The machine's physical memory (``sysconf``)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class ImageHeaders:
    """What a prompt's images' headers say before any pixel is decoded.

    Attributes:
        sizes: Each image's (width, height) as stored.
        cost: Their pixels as a decode room counts them (weighted by mode, :data:`MODE_WEIGHTS`).
    """

    sizes: list[tuple[int, int]]
    cost: int

    @classmethod
    def of(cls, images: Sequence[Any]) -> ImageHeaders:
        """From PIL images opened lazily (headers read, pixels not decoded).

        >>> from PIL import Image
        >>> ImageHeaders.of([Image.new("RGB", (4, 2)), Image.new("RGBA", (2, 2))])
        ImageHeaders(sizes=[(4, 2), (2, 2)], cost=17)
        """
        sizes = [(int(im.width), int(im.height)) for im in images]
        weighted = sum(im.width * im.height * MODE_WEIGHTS.get(im.mode, 1.0) for im in images)
        return cls(sizes, math.ceil(weighted))


def video_cost(pixels: int) -> int:
    """What ``pixels`` pixels of sampled video frames count for in a decode room.

    >>> video_cost(1001)
    501
    """
    return math.ceil(pixels * VIDEO_PIXEL_WEIGHT)


class Turns:
    """First come, first served: tickets in the order asked, whose turn it is, and the tickets
    given up (a waiter interrupted) that the line skips. Not thread-safe: its owner's lock or
    event loop guards it.

    >>> turns = Turns()
    >>> a, b, c = turns.take(), turns.take(), turns.take()
    >>> turns.give_up(b); turns.serving == a
    True
    >>> turns.advance(); turns.serving == c
    True
    """

    def __init__(self) -> None:
        self.next_ticket = self.serving = 0
        self.abandoned: set[int] = set()

    def take(self) -> int:
        """A ticket, after every one taken before it."""
        self.next_ticket += 1
        return self.next_ticket - 1

    def advance(self) -> None:
        """The ticket being served entered: the next one's turn, past those given up."""
        self.serving += 1
        while self.serving in self.abandoned:
            self.abandoned.discard(self.serving)
            self.serving += 1

    def give_up(self, ticket: int) -> None:
        """``ticket``'s holder stopped waiting: the line goes on without it."""
        if self.serving == ticket:
            self.advance()
        else:
            self.abandoned.add(ticket)


class DecodeRoom:
    """Image pixels decoded at once, at most ``max_pixels`` (``None``: no bound).

    Holders enter in the order they asked; one asking for more than ``max_pixels`` enters once
    the room is empty, alone.

    >>> room = DecodeRoom(max_pixels=100)
    >>> with room.hold(60):
    ...     room.decoding
    60
    >>> room.decoding, room.peak
    (0, 60)
    """

    def __init__(self, max_pixels: int | None) -> None:
        self.max_pixels = max_pixels
        self.decoding = self.peak = 0
        self._lock = threading.Condition()
        self._turns = Turns()

    def _fits(self, pixels: int) -> bool:
        most = self.max_pixels
        return most is None or self.decoding == 0 or self.decoding + pixels <= most

    @contextmanager
    def hold(self, pixels: int) -> Iterator[None]:
        """Room for ``pixels`` for the ``with`` block, waiting for its turn and for them to fit."""
        with self._lock:
            ticket = self._turns.take()
            try:
                self._lock.wait_for(lambda: self._turns.serving == ticket and self._fits(pixels))
            except BaseException:  # interrupted while waiting: the next in line goes on
                self._turns.give_up(ticket)
                self._lock.notify_all()
                raise
            self._turns.advance()  # the next in line may fit beside this one
            self._lock.notify_all()
            self.decoding += pixels
            self.peak = max(self.peak, self.decoding)
        try:
            yield
        finally:
            with self._lock:
                self.decoding -= pixels
                self._lock.notify_all()


def processes_on_this_machine() -> int:
    """The processes that share this machine's memory: torchrun's ``LOCAL_WORLD_SIZE`` (each rank
    of ``vlrollout train --nproc N`` prepares its own prompts), else 1."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


DECODE_ROOM = DecodeRoom(
    int(machine_memory_bytes() * DECODE_MEMORY_SHARE)
    // RESIDENT_PER_PIXEL
    // processes_on_this_machine()
)
"""The process's room, used by :class:`~vlrollout.processors.auto.AutoProcessorPreprocessor`:
:data:`DECODE_MEMORY_SHARE` of the machine's memory, split evenly among the processes on it
(``vlrollout serve``, whose queue bounds decoding, gives its preprocessor an unbounded one)."""
