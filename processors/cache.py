"""Prepare a data item once per GRPO group: a content-keyed, byte-bounded cache with shared work.

A group of N episodes on one prompt calls ``await cache.acquire(data)`` N times, concurrently. The
first call starts the preparation in a worker thread (``asyncio.to_thread``, or ``executor`` when
given) so the event loop never blocks on image decoding or the processor; the other N-1 await the same
future. A failed preparation is not cached: every waiter gets the exception, and the next call
retries.

**Lifetime.** Each ``acquire`` pins the entry until the matching ``release(key)``; when the last
episode of the group releases it, the entry is dropped at once (a finished group holds no memory).
Entries made by the unpinned calls (:meth:`PreparedPromptCache.prepare`,
:meth:`PreparedPromptCache.aprepare`) stay in a least-recently-used list bounded by ``max_bytes``
(and optionally ``maxsize`` entries). Pinned entries are never evicted: the running episodes hold
them anyway, so keeping them costs nothing extra.

**Keys** (:func:`item_key`) are the item's *content*: a SHA-256 over its messages and a digest of
every image and video source (a file's path, size and modification time; the bytes of an encoded
medium or a base64/data-URL string; the mode, size and pixels of a PIL image; each frame of a frame
list). An ``id`` field is never trusted:
datasets repeat ids (row indices after concatenation), and two items with one id must not share a
prompt. A PIL image is digested once per image object (hashing a 2 MP image costs tens of ms, and a
group hands the same object over 8 times): do not draw on an image in place after handing it over;
pass a new image or a copy.

**Size** of an entry (:func:`prepared_nbytes`): the tensors of ``multi_modal_input`` plus the engine
images held (base64 strings, encoded bytes or decoded pixels) plus the token lists.

Cached :class:`PreparedPrompt` objects are shared between the group's episodes: treat them as
read-only (copy ``input_ids`` before appending to it).

>>> import asyncio
>>> calls = []
>>> class Echo:
...     tokenizer = processor = None
...     def prepare(self, data):
...         calls.append(data["messages"])
...         return data["messages"]
>>> cache = PreparedPromptCache(Echo())
>>> async def group():
...     got = await asyncio.gather(*(cache.acquire({"messages": "hi"}) for _ in range(4)))
...     for key, _ in got:
...         cache.release(key)
...     return [value for _, value in got]
>>> asyncio.run(group()), calls, len(cache)
(['hi', 'hi', 'hi', 'hi'], ['hi'], 0)
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import os
import sys
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from .base import PreparedPrompt, Preprocessor
from .errors import PreprocessError
from .image_loading import exif_orientation, file_url_path, has_scheme
from .messages import MEDIA_FIELDS

KeyFn = Callable[[dict[str, Any]], str]

DEFAULT_CACHE_BYTES = 1 << 30
"""Default bound (1 GiB) on what a cache keeps beyond the entries its running episodes use.

Process-wide default for caches built without ``max_bytes``; change it with
:func:`set_default_cache_bytes` (``vlrollout run``'s ``prompt_cache_bytes`` setting)."""

_default_bytes = DEFAULT_CACHE_BYTES


def set_default_cache_bytes(max_bytes: int) -> None:
    """Set the bound used by caches built without ``max_bytes`` (e.g. from a run config)."""
    global _default_bytes
    if max_bytes < 0:
        raise ValueError(f"prompt cache bytes must be >= 0, got {max_bytes}")
    _default_bytes = int(max_bytes)


def default_cache_bytes() -> int:
    """The current process-wide default (``DEFAULT_CACHE_BYTES`` unless set)."""
    return _default_bytes


# -- keys -------------------------------------------------------------------------------------

# A PIL image's digest is computed once per image object (a group of 8 hashes it once, not 8
# times: PreparedPromptCache has a group's episodes await one key).
_PIL_DIGESTS: dict[int, bytes] = {}
_PIL_LOCK = threading.Lock()


def _pil_digest(image: Image.Image) -> bytes:
    with _PIL_LOCK:
        known = _PIL_DIGESTS.get(id(image))
    if known is not None:
        return known
    digest = _hash_pixels(image)
    with _PIL_LOCK:
        _PIL_DIGESTS[id(image)] = digest
    weakref.finalize(image, _PIL_DIGESTS.pop, id(image), None)
    return digest


def _hash_pixels(image: Image.Image) -> bytes:
    """What the model gets from a PIL image: its stored pixels with everything that changes how
    they are read (mode, size, transparency, palette, EXIF orientation, frame)."""
    h = hashlib.sha256(f"pil:{image.mode}:{image.size}:{image.info.get('transparency')}".encode())
    try:
        frame = image.tell() if getattr(image, "n_frames", 1) > 1 else 0
        h.update(f":frame{frame}:orientation{exif_orientation(image)}:".encode())
        palette = image.getpalette() if image.mode in ("P", "PA") else None
        h.update(bytes(palette) if palette else b"")
        h.update(image.tobytes())
    except Exception:  # noqa: BLE001 - undecodable: a key unique to this object; prepare reports it
        h.update(f"undecodable:{id(image)}".encode())
    return h.digest()


OFF_LOOP_PIXELS = 1_000_000
"""New PIL pixels beyond which an item's key is computed in a worker thread: hashing reads
about a millisecond or two per million pixels, more than a thread hop costs below that."""


def new_pil_pixels(data: dict[str, Any]) -> int:
    """Pixels of the PIL images in ``data`` (media fields, or inline in its messages) that
    :func:`item_key` has not hashed yet: the work its key would do."""
    return sum(
        image.width * image.height for image in _pil_images(data) if id(image) not in _PIL_DIGESTS
    )


def _pil_images(obj: Any) -> Iterator[Image.Image]:
    if isinstance(obj, Image.Image):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _pil_images(value)
    elif isinstance(obj, list | tuple):
        for value in obj:
            yield from _pil_images(value)


def _image_identity(source: Any, h: Any) -> None:
    if isinstance(source, Image.Image):
        h.update(b"pil:" + _pil_digest(source))
    elif isinstance(source, bytes | bytearray | memoryview):
        h.update(b"bytes:" + hashlib.sha256(bytes(source)).digest())
    elif isinstance(source, os.PathLike) or (
        isinstance(source, str) and len(source) < 4096 and _is_file(_local_path(source))
    ):
        p = Path(_local_path(source))
        st = p.stat()
        h.update(f"path:{p.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode())
    elif isinstance(source, dict):
        for k in sorted(source):
            h.update(str(k).encode())
            _image_identity(source[k], h)
    elif isinstance(source, list | tuple):  # a video given as frames
        h.update(f"frames:{len(source)}:".encode())
        for frame in source:
            _image_identity(frame, h)
            h.update(b",")
    else:
        h.update(b"str:" + hashlib.sha256(str(source).encode()).digest())


def _local_path(source: str | os.PathLike) -> str | os.PathLike:
    """The path a ``file:`` URL names (the loader reads that file); anything else as given."""
    if isinstance(source, str) and has_scheme(source, "file:"):
        try:
            return str(file_url_path(source, ""))
        except PreprocessError:
            return source  # another host's file: the loader refuses it
    return source


def _is_file(text: str | os.PathLike) -> bool:
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


def _messages_digest(obj: Any, h: Any) -> None:
    """Hash messages, treating any inline image value by its identity."""
    if isinstance(obj, dict):
        h.update(b"{")
        for k in sorted(obj, key=str):
            h.update(json.dumps(str(k)).encode())
            inline = ("image", "image_url", "url", "video", "video_url")
            if k in inline and not isinstance(obj[k], dict) and not _is_text_list(obj[k]):
                _image_identity(obj[k], h)
            else:
                _messages_digest(obj[k], h)
        h.update(b"}")
    elif isinstance(obj, list | tuple):
        h.update(b"[")
        for x in obj:
            _messages_digest(x, h)
        h.update(b"]")
    elif isinstance(obj, str | int | float | bool) or obj is None:
        h.update(json.dumps(obj).encode())
    else:
        _image_identity(obj, h)


def _is_text_list(value: Any) -> bool:
    """A list that is message structure, not a video's frames (frames are PIL images/bytes)."""
    return isinstance(value, list | tuple) and all(isinstance(x, dict) for x in value)


def item_key(data: dict[str, Any]) -> str:
    """Content key of a data item: ``"sha256:<hex>"`` over its messages and the digest of every
    medium in its media fields (``images``, ``videos``, and any other
    :data:`~vlrollout.processors.messages.MEDIA_FIELDS` entry, so an item with an unread medium
    never shares a key with the same item without it).

    >>> a = {"id": 1, "messages": [{"role": "user", "content": "A"}]}
    >>> b = {"id": 1, "messages": [{"role": "user", "content": "B"}]}
    >>> item_key(a) == item_key(b)
    False
    """
    h = hashlib.sha256()
    _messages_digest(data.get("messages"), h)
    for name in sorted(MEDIA_FIELDS & data.keys()):
        value = data[name]
        if value is None or (isinstance(value, list | tuple) and not value):
            continue  # an empty field is no field (the preprocessor treats them alike)
        h.update(f"|{name}|".encode())
        for src in value if isinstance(value, list | tuple) and name.endswith("s") else [value]:
            _image_identity(src, h)
            h.update(b";")
    return "sha256:" + h.hexdigest()


def item_fields_key(data: dict[str, Any]) -> str:
    """:func:`item_key` and every other field of the item but its ``id`` (labels, a plug-in's
    options such as a crop): the key of what a preparation or a scored outcome may depend on.

    >>> a = {"id": 1, "messages": "2+2?", "answer": "4"}
    >>> item_fields_key(a) == item_fields_key({**a, "id": 2}), item_fields_key(a) == item_fields_key(
    ...     {**a, "answer": "5"})
    (True, False)
    """
    others = {
        k: v for k, v in data.items() if k not in MEDIA_FIELDS and k not in ("messages", "id")
    }
    h = hashlib.sha256(item_key(data).encode())
    h.update(json.dumps(others, sort_keys=True, default=repr).encode())
    return "sha256:" + h.hexdigest()


# -- sizes ------------------------------------------------------------------------------------


def prepared_nbytes(value: Any) -> int:
    """Approximate bytes an entry holds: tensors, engine images, video thumbnails, token lists
    (8 bytes a token)."""
    if not isinstance(value, PreparedPrompt):
        value = getattr(value, "prepared", value)  # wrappers that hold a PreparedPrompt
    if not isinstance(value, PreparedPrompt):
        return sys.getsizeof(value)
    total = 8 * (len(value.input_ids) + len(value.mm_token_type_ids or ()))
    total += len(value.prompt_text)
    for t in value.multi_modal_input.values():
        total += t.element_size() * t.nelement()
    total += value.engine_image_nbytes()
    for clip in getattr(value, "videos", None) or ():
        total += sum(t.width * t.height * 3 for t in clip.thumbnails)
    return total


@dataclass
class _Entry:
    value: Any
    nbytes: int


class PreparedPromptCache:
    """Content-keyed prepared prompts with once-only concurrent preparation.

    Args:
        preprocessor: Anything with ``prepare(data) -> PreparedPrompt``.
        maxsize: Optional cap on unpinned entries kept (``None``: only ``max_bytes`` bounds them;
            ``0`` keeps none but still shares in-flight work).
        max_bytes: Bound on the bytes of unpinned entries kept (least recently used evicted
            first); :func:`default_cache_bytes` (1 GiB unless set) when ``None``.
        key_fn: ``data -> str`` key; :func:`item_key` by default.
        executor: Where ``prepare`` runs; ``asyncio.to_thread`` (the default thread pool) if ``None``.
            Either way ``prepare`` runs in the caller's ``contextvars`` context.

    Attributes:
        hits, misses, evictions: Counters (a waiter joining an in-flight preparation counts as a hit;
            ``misses`` is the number of preparations run).
        peak_bytes: The most bytes held at once (pinned and unpinned).
    """

    def __init__(
        self,
        preprocessor: Preprocessor,
        maxsize: int | None = None,
        *,
        max_bytes: int | None = None,
        key_fn: KeyFn = item_key,
        executor: Executor | None = None,
    ) -> None:
        if maxsize is not None and maxsize < 0:
            raise ValueError(f"maxsize must be >= 0, got {maxsize}")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.preprocessor = preprocessor
        self.maxsize = maxsize
        self.max_bytes = default_cache_bytes() if max_bytes is None else max_bytes
        self.key_fn = key_fn
        self.executor = executor
        self._done: OrderedDict[str, _Entry] = OrderedDict()
        self._users: Counter[str] = Counter()
        self._inflight: dict[tuple[int, str], asyncio.Future] = {}
        self._keying: dict[tuple[int, int], asyncio.Future] = {}  # (loop, data) -> its key
        self._lock = threading.RLock()
        self.hits = self.misses = self.evictions = 0
        self.nbytes = self.peak_bytes = 0

    def __len__(self) -> int:
        return len(self._done)

    def __contains__(self, key: str) -> bool:
        return key in self._done

    def clear(self) -> None:
        with self._lock:
            self._done.clear()
            self.nbytes = 0

    def stats(self) -> dict[str, int]:
        """Counters and sizes, for logs and reports."""
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
                "entries": len(self._done),
                "pinned": len(self._users),
                "bytes": self.nbytes,
                "peak_bytes": self.peak_bytes,
                "max_bytes": self.max_bytes,
            }

    # -- storage ------------------------------------------------------------------------------

    def _get(self, key: str) -> Any:
        with self._lock:
            entry = self._done.get(key)
            if entry is not None:
                self._done.move_to_end(key)
                self.hits += 1
                return entry
        return None

    def _put(self, key: str, value: Any) -> None:
        with self._lock:
            pinned = self._users[key] > 0
            if not pinned and (self.maxsize == 0 or self.max_bytes == 0):
                return
            if key in self._done:
                return
            entry = _Entry(value, prepared_nbytes(value))
            self._done[key] = entry
            self.nbytes += entry.nbytes
            self.peak_bytes = max(self.peak_bytes, self.nbytes)
            self._evict()

    def _evict(self) -> None:
        """Drop least recently used unpinned entries until within ``max_bytes``/``maxsize``."""
        unpinned = [k for k in self._done if self._users[k] == 0]
        held = sum(self._done[k].nbytes for k in unpinned)
        count = len(unpinned)
        for k in unpinned:
            if held <= self.max_bytes and (self.maxsize is None or count <= self.maxsize):
                break
            nbytes = self._done.pop(k).nbytes
            self.nbytes -= nbytes
            held -= nbytes
            count -= 1
            self.evictions += 1

    # -- the API ------------------------------------------------------------------------------

    def prepare(self, data: dict[str, Any]) -> Any:
        """Synchronous, cached ``preprocessor.prepare(data)`` (no in-flight sharing, unpinned)."""
        key = self.key_fn(data)
        hit = self._get(key)
        if hit is not None:
            return hit.value
        with self._lock:
            self.misses += 1
        value = self.preprocessor.prepare(data)
        self._put(key, value)
        return value

    async def aprepare(self, data: dict[str, Any]) -> Any:
        """Cached preparation off the event loop, unpinned (kept while the bounds allow)."""
        key = await self._key(data)
        return await self._obtain(key, data)

    async def _key(self, data: dict[str, Any]) -> str:
        """``key_fn(data)``; in one worker thread when it would hash more than
        :data:`OFF_LOOP_PIXELS` new PIL pixels, awaited by every episode that asks for the same
        item object meanwhile (a group's)."""
        if self.key_fn is not item_key or new_pil_pixels(data) <= OFF_LOOP_PIXELS:
            return self.key_fn(data)
        slot = (id(asyncio.get_running_loop()), id(data))  # data stays alive while in flight
        task = self._keying.get(slot)
        if task is None:
            task = asyncio.ensure_future(asyncio.to_thread(item_key, data))
            self._keying[slot] = task
            task.add_done_callback(lambda _: self._keying.pop(slot, None))
        return await asyncio.shield(task)

    async def acquire(self, data: dict[str, Any]) -> tuple[str, Any]:
        """Pin and return ``(key, prepared)``; call :meth:`release` with ``key`` when done.

        Concurrent calls for one key run the preparation once. Cancelling one waiter does not
        cancel the preparation for the others (it runs as its own task).
        """
        key = await self._key(data)
        with self._lock:
            self._users[key] += 1
        try:
            return key, await self._obtain(key, data)
        except BaseException:
            self.release(key)
            raise

    def release(self, key: str) -> None:
        """Unpin ``key``; the last release of an entry drops it."""
        with self._lock:
            if self._users[key] <= 1:
                self._users.pop(key, None)
                entry = self._done.pop(key, None)
                if entry is not None:
                    self.nbytes -= entry.nbytes
            else:
                self._users[key] -= 1

    async def _obtain(self, key: str, data: dict[str, Any]) -> Any:
        hit = self._get(key)
        if hit is not None:
            return hit.value
        loop = asyncio.get_running_loop()
        slot = (id(loop), key)  # in-flight tasks belong to one event loop
        with self._lock:
            task = self._inflight.get(slot)
            if task is None:
                self.misses += 1
                task = asyncio.ensure_future(self._run(slot, data))
                self._inflight[slot] = task
            else:
                self.hits += 1
        return await asyncio.shield(task)

    async def _run(self, slot: tuple[int, str], data: dict[str, Any]) -> Any:
        try:
            if self.executor is None:
                value = await asyncio.to_thread(self.preprocessor.prepare, data)
            else:
                loop = asyncio.get_running_loop()
                prepare = contextvars.copy_context().run  # as asyncio.to_thread does
                value = await loop.run_in_executor(
                    self.executor, prepare, self.preprocessor.prepare, data
                )
            self._put(slot[1], value)
            return value
        finally:
            with self._lock:
                self._inflight.pop(slot, None)
