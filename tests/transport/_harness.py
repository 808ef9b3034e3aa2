"""The harness of every test that runs real Celery worker processes (``py-reactor worker``).

Workers are started as a user would start them, on the session's private redis-server as
store and broker (no eager mode), each in a process group of its own so that a test can kill
one with its pool. The reactors they import report through Redis (``records``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from py_reactor import Reactor, configure, workers

__all__ = ["ROOT", "Worker", "on_queue", "records", "serving", "start_workers"]

ROOT = Path(__file__).resolve().parents[2]


class Worker:
    """One ``py-reactor worker`` process (and its pool), in a process group of its own.

    ``imports``: the reactors module it imports (every one imports ``_celery_reactors``, which
    applies the settings); ``settings`` are environment variables that module reads (see
    there); ``lease``: its execution lease in seconds, for the recovery tests (None: the
    library's default, 30 s, so that a pool process stalled a second or two on a busy machine
    never has its run recovered behind its back).
    """

    def __init__(
        self,
        url: str,
        queue: str = "py_reactor",
        concurrency: int = 2,
        settings: dict[str, str] | None = None,
        *,
        imports: str = "tests.transport._celery_reactors",
        lease: float | None = None,
    ) -> None:
        self.log = Path(tempfile.mkstemp(prefix="pyr-celery-", suffix=".log")[1])
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            **({} if lease is None else {"PY_REACTOR_TEST_LEASE": str(lease)}),
            **(settings or {}),
        }
        command = [
            sys.executable, "-m", "py_reactor.cli", "worker",
            "--redis-url", url,
            "--import", imports,
            "--concurrency", str(concurrency),
            "--queue", queue,
            "--loglevel", "INFO",
        ]  # fmt: skip
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while " ready." not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Celery worker did not start:\n{self.output()}")
            time.sleep(0.05)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """kill -9 the worker and its pool processes, as a machine that dies would."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.unlink(missing_ok=True)


@contextlib.contextmanager
def serving(
    url: str,
    queue: str,
    imports: str,
    ping: type[Reactor],
    started: list[Worker],
    park_delay: float = 30.0,
) -> Iterator[list[Worker]]:
    """Two worker processes (four pool processes in all) serving ``queue`` for a whole module,
    importing ``imports``, their park timer at ``park_delay`` s without jitter (a resume within
    seconds was woken, not timed), with the default execution lease; listed in ``started``
    while they run (their logs explain a run that did not end). One job (``ping``, a
    ``@background`` reactor of ``imports``) goes through the queue before the first test: a
    worker that says it is ready may still take a while over its first job on a loaded
    machine."""
    settings = {"PY_REACTOR_TEST_PARK_DELAY": str(park_delay), "PY_REACTOR_TEST_PARK_JITTER": "0"}
    started[:] = [
        Worker(url, queue, settings=settings, imports=imports, lease=None) for _ in range(2)
    ]
    try:
        for worker in started:
            worker.wait_ready()
        configure(worker="celery", redis_url=url, celery_queue=queue)
        warm = ping.run().wait(timeout=120)
        assert warm.is_success, warm
        yield list(started)
    finally:
        for worker in started:
            worker.stop()
        started.clear()


def on_queue(url: str, queue: str, park_delay: float = 30.0) -> None:
    """Dispatch to ``queue`` (and no thread worker of this process competes for the work)."""
    workers.stop()
    configure(
        worker="celery", redis_url=url, celery_queue=queue, park_delay=park_delay, park_jitter=0
    )


def start_workers(
    url: str,
    count: int,
    queue: str = "py_reactor",
    settings: dict[str, str] | None = None,
    *,
    lease: float | None = None,
) -> list[Worker]:
    """``count`` workers on ``queue``, started and ready."""
    started = [Worker(url, queue, settings=settings, lease=lease) for _ in range(count)]
    for worker in started:
        worker.wait_ready()
    return started


def records(raw: redis.Redis, key: str) -> list[tuple[str, int]]:
    """What the steps of the run keyed ``key`` recorded: ``(what, pid)``, in order."""
    entries = raw.lrange(f"celery-test:{key}", 0, -1)
    return [(what, int(pid)) for what, _, pid in (e.rpartition(":") for e in entries)]
