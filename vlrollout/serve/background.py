"""Run the server on a background thread with its own event loop (tests, benchmarks, notebooks)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web


class BackgroundServer:
    """Serve an aiohttp application on ``host`` and a free port until :meth:`stop`.

    >>> from aiohttp import web
    >>> with BackgroundServer(web.Application()) as server:
    ...     server.url.startswith("http://127.0.0.1:")
    True
    """

    def __init__(self, app: web.Application, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app, self.host, self.port = app, host, port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def address(self) -> str:
        """``host:port``, as AReaL's clients take it."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        async def up() -> int:
            self._runner = web.AppRunner(self.app, handler_cancellation=True)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.host, self.port)
            await site.start()
            return self._runner.addresses[0][1]  # the port bound for port=0

        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(up(), self._loop).result(timeout)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self._runner is not None:
            fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            fut.result(timeout)
            self._runner = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
        self._loop.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
