"""The harness of every test that runs real Celery worker processes (``py-reactor worker``).

Workers are started as a user would start them, on the session's private redis-server as
store and broker (no eager mode), each in a process group of its own so that a test can kill
one with its pool. The reactors they import report through Redis (``records``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from py_reactor import Reactor, configure, find, workers
from tests._wait import until

__all__ = [
    "ROOT",
    "RUNNING",
    "Worker",
    "explain",
    "finished",
    "go",
    "on_queue",
    "ran_nothing",
    "recorded",
    "records",
    "serving",
    "start_workers",
    "stored",
    "waiting",
    "whats",
]

ROOT = Path(__file__).resolve().parents[2]

#: Every worker started and not stopped yet (their logs explain a run that did not end).
RUNNING: list[Worker] = []


class Worker:
    """One ``py-reactor worker`` process (and its pool), in a process group of its own.

    ``imports``: the reactors module it imports (every one applies the settings, with
    ``_worker_side.apply_settings``); ``settings`` are environment variables that module reads
    (see there); ``lease``: its execution lease in seconds, for the recovery tests (None: the
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
        # The project root first; the test's own PYTHONPATH stays behind it.
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {
            **os.environ,
            "PYTHONPATH": path,
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
        RUNNING.append(self)

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
        if self in RUNNING:
            RUNNING.remove(self)
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
    started: list[Worker] | None = None,
    park_delay: float = 30.0,
    settings: dict[str, str] | None = None,
) -> Iterator[list[Worker]]:
    """Two worker processes (four pool processes in all) serving ``queue`` for a whole module,
    importing ``imports``, their park timer at ``park_delay`` s without jitter (a resume within
    seconds was woken, not timed), with the default execution lease; listed in ``started``
    while they run (their logs explain a run that did not end); ``settings``: more of the
    ``PY_REACTOR_TEST_*`` variables the reactors module applies. One job (``ping``, a
    ``@background`` reactor of ``imports``) goes through the queue before the first test: a
    worker that says it is ready may still take a while over its first job on a loaded
    machine."""
    started = [] if started is None else started
    settings = {
        **(settings or {}),
        "PY_REACTOR_TEST_PARK_DELAY": str(park_delay),
        "PY_REACTOR_TEST_PARK_JITTER": "0",
    }
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


def whats(raw: redis.Redis, key: str) -> list[str]:
    """What the steps of the run keyed ``key`` recorded, without the pids."""
    return [what for what, _ in records(raw, key)]


def recorded(raw: redis.Redis, key: str, what: str) -> bool:
    """Whether a step of the run keyed ``key`` recorded something starting with ``what``."""
    return any(entry.startswith(what) for entry in whats(raw, key))


def go(raw: redis.Redis, key: str) -> float:
    """Let the body waiting on ``key`` go on (``_worker_side.hold_until_told``); when
    (monotonic) it was told."""
    raw.rpush(f"celery-test:{key}:go", "go")
    return time.monotonic()


def stored(execution_id: str) -> Any:
    """The stored execution (failing if it is not stored)."""
    found = find(execution_id)
    assert found is not None, f"execution {execution_id} is not stored"
    return found


def waiting(execution_id: str, primitive: str | None = None, timeout: float = 30) -> Any:
    """The stored execution once it is parked (status waiting) on ``primitive`` (None: on
    anything); failing after ``timeout`` seconds with where it is."""

    def parked() -> Any:
        found = find(execution_id)
        if found is None or found.status != "waiting" or not found.waiting_on:
            return None
        return found if primitive in (None, found.waiting_on["primitive"]) else None

    try:
        return until(parked, f"{execution_id} parked on {primitive or 'anything'}", timeout)
    except AssertionError as exc:
        found = find(execution_id)
        seen = None if found is None else (found.status, found.waiting_on)
        raise AssertionError(f"{exc}; it is {seen}") from None


def explain(raw: redis.Redis, key: str, ids: list[str]) -> str:
    """Where the executions ``ids`` are, what the run keyed ``key`` recorded, and what the
    running workers logged (the message of a run that did not end)."""
    lines = [f"records of {key}: {raw.lrange(f'celery-test:{key}', 0, -1)}"]
    for execution_id in ids:
        found = find(execution_id)
        if found is not None:
            trace = [(e["type"], e["step"]) for e in found.trace]
            lines.append(f"{execution_id}: {found.status} {found.waiting_on} {trace}")
    lines += [worker.output()[-3000:] for worker in RUNNING]
    return "\n".join(lines)


def finished(out: Any, raw: redis.Redis, key: str, timeout: float = 30) -> Any:
    """``out.wait(timeout)``; if it does not end, fail saying where it and the units it
    dispatched are, what the steps recorded and what the workers logged."""
    try:
        return out.wait(timeout=timeout)
    except TimeoutError as exc:
        found = find(out.execution_id)
        units = [
            str(e["execution_id"])
            for e in (found.trace if found is not None else [])
            if e["type"] == "dispatched"
        ]
        raise AssertionError(f"{exc}\n{explain(raw, key, [out.execution_id, *units])}") from exc


def ran_nothing(
    started: list[Worker], execution_id: str, epoch: int = 0, times: int = 1, timeout: float = 30
) -> list[str]:
    """Wait until the logs of the workers ``started`` say, ``times`` times in all, that a job of
    ``execution_id`` sent at ``epoch`` ran nothing (``py_reactor.transport.celery.run_job``:
    a redelivered or duplicated message, or one the run moved on from): the positive sign that
    such a copy was consumed and dropped. Returns the lines (more than ``times`` fails)."""
    said = re.compile(
        rf"the job of execution {re.escape(execution_id)} \(sent at epoch {epoch}\) ran nothing"
    )

    def lines() -> list[str]:
        return [line for w in started for line in w.output().splitlines() if said.search(line)]

    found = until(
        lambda: len(lines()) >= times and lines(),
        f"the workers logged {times} job(s) of {execution_id} at epoch {epoch} that ran nothing",
        timeout,
    )
    assert len(found) == times, found
    return found
