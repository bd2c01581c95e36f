"""``vlrollout serve`` in a child process for the benchmarks: on a free local port, ready once it
answers ``/health``, stopped (Ctrl-C, then a kill) when the block ends.

The server's log goes to a temporary file rather than a pipe nobody reads (a full pipe would
stall the server); when the server exits before it is ready, the error quotes the log's end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STOP_S = 30.0
"""How long a stopped server may take to exit before it is killed."""


def free_port() -> int:
    """A free local TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """``vlrollout serve --model MODEL --port PORT *flags`` for the length of a ``with`` block.

    Args:
        model: The model folder.
        *flags: Further ``vlrollout serve`` flags (``--protocol``, ``--threads``, ...).
        env: Variables added to this process's environment for the server.
        startup_s: How long the server may take to answer ``/health``.

    Attributes:
        port: The port it listens on; ``url``: ``http://127.0.0.1:PORT``.
    """

    def __init__(
        self, model: str | Path, *flags: str, env: dict[str, str] | None = None, startup_s=300.0
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "vlrollout.cli", "serve", "--model", str(model)]
        self.cmd += ["--port", str(self.port), *flags]
        self.env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.startup_s = startup_s
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()

    def __enter__(self) -> Served:
        self.proc = subprocess.Popen(
            self.cmd, cwd=REPO, env=self.env, stdout=subprocess.DEVNULL, stderr=self._log
        )
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.seek(0)
                tail = self._log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"vlrollout serve exited with {self.proc.returncode}: {tail}")
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"vlrollout serve did not answer /health within {self.startup_s} s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
