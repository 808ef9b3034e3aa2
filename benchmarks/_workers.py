"""Celery worker processes for the benchmarks that measure py_reactor on Celery
(``background.py``, ``async_units.py``): started as ``py-reactor worker`` in process groups of
their own, waited for by ping, stopped (SIGTERM, then SIGKILL), their logs kept on request."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from py_reactor.workers.celery import app

__all__ = ["Workers"]

ROOT = Path(__file__).resolve().parent.parent


class Workers:
    """``count`` ``py-reactor worker`` processes importing ``module``, each its own process
    group, stopped here."""

    def __init__(self, url: str, module: str, count: int, concurrency: int, loglevel: str) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="pyr-bench-workers-"))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        for number in range(count):
            log = self.folder / f"worker-{number}.log"
            command = [
                sys.executable, "-m", "py_reactor.cli", "worker", "--redis-url", url,
                "--import", module, "--concurrency", str(concurrency), "--loglevel", loglevel,
            ]  # fmt: skip
            with log.open("wb") as out:
                self.processes.append(
                    subprocess.Popen(
                        command,
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            self.logs.append(log)

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Seconds until every worker answers a ping (its consumer is up)."""
        started = time.monotonic()
        while True:
            for process, log in zip(self.processes, self.logs, strict=True):
                if process.poll() is not None:
                    raise RuntimeError(f"a worker exited: {log.read_text()[-2000:]}")
            replies = app.control.ping(timeout=0.5)
            if len(replies) >= len(self.processes):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"{len(replies)} of {len(self.processes)} workers answered")

    def stop(self, keep_logs: bool = False) -> None:
        """Stop every worker (SIGTERM to its process group, SIGKILL after 10 s); their logs
        are removed unless ``keep_logs``."""
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        if keep_logs:
            print(f"worker logs kept in {self.folder}")
        else:
            shutil.rmtree(self.folder, ignore_errors=True)

    def errors(self) -> list[str]:
        found = []
        for log in self.logs:
            for line in log.read_text(errors="replace").splitlines():
                if "ERROR" in line or "Traceback" in line:
                    found.append(f"{log.name}: {line}")
        return found


def until_stored(
    client: Any, ids: list[str], timeout: float, status: str = "completed", pause: float = 0.0005
) -> None:
    """Poll the stored status of ``ids`` (one pipelined HGET each, every ``pause`` seconds)
    until all are ``status``.

    Raises:
        RuntimeError: one ended another way; TimeoutError: not all within ``timeout`` seconds.
    """
    from py_reactor.storage import keys

    deadline = time.monotonic() + timeout
    left = list(ids)
    while left:
        with client.pipeline(transaction=False) as pipe:
            for execution_id in left:
                pipe.hget(keys.execution(execution_id), "status")
            statuses = pipe.execute()
        bad = [s for s in statuses if s in ("failed", "halted", "aborted", "cancelled")]
        if bad:
            raise RuntimeError(f"an execution ended {bad[0]}")
        left = [i for i, s in zip(left, statuses, strict=True) if s != status]
        if left:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(left)} executions not {status}")
            time.sleep(pause)
