"""Prepare a data item once per GRPO group: a bounded LRU cache with shared in-flight work.

A group of N episodes on one prompt calls ``await cache.aprepare(data)`` N times, concurrently. The
first call starts the preparation in a worker thread (``asyncio.to_thread``, or ``executor`` when
given) so the event loop never blocks on image decoding or the processor; the other N-1 await the same
future. Finished results are kept in an LRU of ``maxsize`` entries. A failed preparation is not
cached: every waiter gets the exception, and the next call retries.

Keys (:func:`item_key`): an explicit id field (``id``, ``uid``, ``idx``, ``index``) when present,
otherwise a SHA-256 over the messages and the identities of the images (file path + size + mtime,
a digest of bytes/strings, a digest of a PIL image's pixels).

Cached :class:`PreparedPrompt` objects are shared between the group's episodes: treat them as
read-only (copy ``input_ids`` before appending to it).

>>> import asyncio
>>> calls = []
>>> class Echo:
...     tokenizer = processor = None
...     def prepare(self, data):
...         calls.append(data["id"])
...         return data["id"]
>>> cache = PreparedPromptCache(Echo(), maxsize=8)
>>> async def group():
...     return await asyncio.gather(*(cache.aprepare({"id": 7}) for _ in range(4)))
>>> asyncio.run(group()), calls
([7, 7, 7, 7], [7])
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from PIL import Image

from .auto import ID_FIELDS
from .base import PreparedPrompt, Preprocessor

KeyFn = Callable[[dict[str, Any]], str]


def _image_identity(source: Any, h: Any) -> None:
    if isinstance(source, Image.Image):
        h.update(f"pil:{source.mode}:{source.size}".encode())
        h.update(hashlib.sha256(source.tobytes()).digest())
    elif isinstance(source, bytes | bytearray | memoryview):
        h.update(b"bytes:" + hashlib.sha256(bytes(source)).digest())
    elif isinstance(source, os.PathLike) or (
        isinstance(source, str) and len(source) < 4096 and Path(source).is_file()
    ):
        p = Path(source)
        st = p.stat()
        h.update(f"path:{p.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode())
    elif isinstance(source, dict):
        for k in sorted(source):
            h.update(str(k).encode())
            _image_identity(source[k], h)
    else:
        h.update(b"str:" + hashlib.sha256(str(source).encode()).digest())


def _messages_digest(obj: Any, h: Any) -> None:
    """Hash messages, treating any inline image value by its identity."""
    if isinstance(obj, dict):
        h.update(b"{")
        for k in sorted(obj, key=str):
            h.update(json.dumps(str(k)).encode())
            if k in ("image", "image_url", "url") and not isinstance(obj[k], dict | list):
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


def item_key(data: dict[str, Any]) -> str:
    """Cache key for a data item: ``"id:<value>"`` from an id field, else ``"sha256:<hex>"``."""
    for field in ID_FIELDS:
        if data.get(field) is not None:
            return f"{field}:{data[field]}"
    h = hashlib.sha256()
    _messages_digest(data.get("messages"), h)
    h.update(b"|images|")
    for src in data.get("images") or []:
        _image_identity(src, h)
        h.update(b";")
    return "sha256:" + h.hexdigest()


class PreparedPromptCache:
    """Bounded LRU of prepared prompts with once-only concurrent preparation.

    Args:
        preprocessor: Anything with ``prepare(data) -> PreparedPrompt``.
        maxsize: Finished entries kept (least recently used evicted first); ``0`` disables keeping
            results but still shares in-flight work.
        key_fn: ``data -> str`` key; :func:`item_key` by default.
        executor: Where ``prepare`` runs; ``asyncio.to_thread`` (the default thread pool) if ``None``.

    Attributes:
        hits, misses, evictions: Counters (a waiter joining an in-flight preparation counts as a hit).
    """

    def __init__(
        self,
        preprocessor: Preprocessor,
        maxsize: int = 1024,
        *,
        key_fn: KeyFn = item_key,
        executor: Executor | None = None,
    ) -> None:
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0, got {maxsize}")
        self.preprocessor = preprocessor
        self.maxsize = maxsize
        self.key_fn = key_fn
        self.executor = executor
        self._done: OrderedDict[str, PreparedPrompt] = OrderedDict()
        self._inflight: dict[str, asyncio.Future] = {}
        self._lock = threading.Lock()  # guards _done for the sync path and cross-thread use
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._done)

    def __contains__(self, key: str) -> bool:
        return key in self._done

    def clear(self) -> None:
        with self._lock:
            self._done.clear()

    def _get(self, key: str) -> PreparedPrompt | None:
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                self.hits += 1
                return self._done[key]
        return None

    def _put(self, key: str, value: PreparedPrompt) -> None:
        if self.maxsize == 0:
            return
        with self._lock:
            self._done[key] = value
            self._done.move_to_end(key)
            while len(self._done) > self.maxsize:
                self._done.popitem(last=False)
                self.evictions += 1

    def prepare(self, data: dict[str, Any]) -> PreparedPrompt:
        """Synchronous, cached ``preprocessor.prepare(data)`` (no in-flight sharing)."""
        key = self.key_fn(data)
        hit = self._get(key)
        if hit is not None:
            return hit
        self.misses += 1
        value = self.preprocessor.prepare(data)
        self._put(key, value)
        return value

    async def aprepare(self, data: dict[str, Any]) -> PreparedPrompt:
        """Cached preparation off the event loop; concurrent calls for one key run it once.

        The preparation runs as its own task, so cancelling one waiter does not cancel it for the
        others. Use one cache instance per event loop (in-flight tasks belong to a loop).
        """
        key = self.key_fn(data)
        hit = self._get(key)
        if hit is not None:
            return hit
        task = self._inflight.get(key)
        if task is None:
            self.misses += 1
            task = asyncio.ensure_future(self._run(key, data))
            self._inflight[key] = task
        else:
            self.hits += 1
        return await asyncio.shield(task)

    async def _run(self, key: str, data: dict[str, Any]) -> PreparedPrompt:
        try:
            if self.executor is None:
                value = await asyncio.to_thread(self.preprocessor.prepare, data)
            else:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(self.executor, self.preprocessor.prepare, data)
            self._put(key, value)
            return value
        finally:
            self._inflight.pop(key, None)
