"""What the plugin's fixtures hand to a test: an isolated store, a worker to drain, lock holds.

They work without pytest too (a script can build an :class:`IsolatedStore` on a
:class:`RedisServer` it started), which is also how the plugin uses them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from py_reactor import workers
from py_reactor.config import Config, configure, get_config, reset_config
from py_reactor.coordination.lock import Lock
from py_reactor.errors import StoreUnavailableError
from py_reactor.runtime.execution import snapshot
from py_reactor.storage.inspect import Inspector
from py_reactor.testing._server import RedisServer

if TYPE_CHECKING:
    import redis

    from py_reactor.coordination.lock import LockHold
    from py_reactor.runtime.execution import Execution
    from py_reactor.storage.redis import RedisStore

__all__ = ["IsolatedStore", "LockHolder", "ReactorWorker", "drain"]

#: Seconds a fixture's teardown waits for executions still running before it stops the worker.
SETTLE_TIMEOUT = 10.0


def restore_config(saved: Config) -> None:
    """Put back the settings ``saved`` (a ``get_config()`` snapshot), through ``configure``."""
    reset_config()
    defaults = Config()
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(Config):
        value = getattr(saved, field.name)
        if value == getattr(defaults, field.name):
            continue
        if field.name == "rate_limits":  # stored as ((window s, limit), ...) per name
            value = {name: dict(windows) for name, windows in value.items()}
        changes[field.name] = value
    configure(**changes)


class IsolatedStore:
    """A test's own coordination store: the session's private server, emptied for the test.

    While open, ``configure(redis_url=...)`` points py_reactor at it; closing waits for the
    executions still running, stops this process's thread worker and puts the settings back
    as they were.

    Attributes:
        server: the private server (flushed when the store opens: nothing else uses it).
        url: its URL, for worker processes a test starts (``--redis-url``).
    """

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.url = server.url
        self._saved: Config | None = None
        self._client: redis.Redis | None = None

    def open(self) -> IsolatedStore:
        """Empty the server and point py_reactor at it (the current settings are kept)."""
        self._saved = get_config()
        self.server.flush()
        configure(redis_url=self.url)
        return self

    def close(self) -> None:
        """Wait for running executions, stop the thread worker, restore the settings."""
        if self._saved is None:
            return
        try:
            settle()
            stop_worker()
        finally:
            saved, self._saved = self._saved, None
            if self._client is not None:
                self._client.close()
                self._client = None
            restore_config(saved)

    @property
    def client(self) -> redis.Redis:
        """A Redis client of the server (strings decoded), to look at raw keys."""
        if self._client is None:
            self._client = self.server.client()
        return self._client

    @property
    def store(self) -> RedisStore:
        """The py_reactor store on the server (what the primitives and workers use)."""
        from py_reactor.storage import current_store

        return current_store()

    def executions(self, limit: int = 100) -> list[Execution]:
        """The stored executions, newest first (``Execution`` snapshots)."""
        from py_reactor.storage.executions import ExecutionStore

        executions = ExecutionStore(self.store)
        found = (executions.load(execution_id) for execution_id in executions.ids(limit))
        return [snapshot(stored) for stored in found if stored is not None]

    def __enter__(self) -> IsolatedStore:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<IsolatedStore {self.url}>"


def _pending(waiting: bool) -> list[str]:
    """Why the store is not drained yet, one line per execution (empty: drained).

    Pending: running (a live or lapsed lease), due now, sent to a worker and not started, or
    waiting out a retry's backoff; with ``waiting``, parked executions too.
    """
    from py_reactor.storage import current_store

    inspector = Inspector(current_store())
    in_flight = inspector.in_flight()  # one MULTI/EXEC: a claim moves an id between the sets
    now_ms, running = in_flight.now_ms, in_flight.leased
    lines = [_line(inspector, execution_id, "running") for execution_id in running]
    for execution_id, score in in_flight.due:
        if execution_id in running:
            continue
        if score <= now_ms:
            lines.append(_line(inspector, execution_id, "due now"))
            continue
        waiting_on = inspector.waiting_on(execution_id)
        later = f"due in {(score - now_ms) / 1000:.1f} s"
        if waiting_on is None:  # sent to a worker (a Celery job), not started yet
            lines.append(_line(inspector, execution_id, f"sent, not started; sent again {later}"))
        elif waiting_on.get("primitive") is None:
            step = waiting_on.get("step")
            lines.append(_line(inspector, execution_id, f"retry of {step!r} {later}"))
        elif waiting:
            on = f"{waiting_on.get('primitive')} {waiting_on.get('key')!r}"
            lines.append(_line(inspector, execution_id, f"parked on {on}, {later}"))
    return lines


def _line(inspector: Inspector, execution_id: str, state: str) -> str:
    (head,) = inspector.heads([execution_id])
    name = str(head.reactor or "?").rpartition(":")[2]
    return f"  {execution_id} {name}: {head.status or '?'}, {state}"


def drain(timeout: float = 30.0, *, waiting: bool = False) -> None:
    """Wait until the background work in the store is done, as far as it can go by itself.

    Drained: no execution is pending, running or due now, and none is waiting out a retry's
    backoff. Executions parked on a busy key (a lock, semaphore, period, ordered lock or rate
    limit) count as settled, so a test can look at them; with ``waiting=True`` drain waits
    for them too (a release of their key, or their backstop timer, brings them back). With
    ``worker="threads"`` (the default) the thread worker is started if it is not running.

    Raises:
        TimeoutError: not drained within ``timeout`` seconds; the message lists what is left.
    """

    workers.ensure_worker()
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        left = _pending(waiting)
        if not left:
            return
        if time.monotonic() >= deadline:
            serving = (
                "Is a worker serving them? The reactor_worker fixture runs the thread worker; "
                "with worker='celery', Celery workers must run on this store. "
                if get_config().worker == "celery"
                else ""
            )
            raise TimeoutError(
                f"drain(): after {timeout:g} s, {len(left)} execution(s) are not settled:\n"
                + "\n".join(left)
                + f"\n{serving}Wait longer with drain(timeout=...), or look at them with "
                "py_reactor.find(id)"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def settle(timeout: float = SETTLE_TIMEOUT) -> None:
    """Wait (up to ``timeout`` seconds) until no execution is running, quietly."""
    from py_reactor.storage import current_store

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not Inspector(current_store()).running_count():
                return
        except StoreUnavailableError:
            return
        time.sleep(0.02)


def stop_worker() -> None:
    """Stop this process's thread worker and wait for its dispatcher thread to end, so that
    nothing asks the store for work after the settings change back."""

    workers.stop(wait=True)


class ReactorWorker:
    """This process's thread worker, running background work on the test's store."""

    def start(self) -> ReactorWorker:
        """Use the thread worker (``configure(worker="threads")``) and start it now."""

        configure(worker="threads")
        workers.start()
        return self

    def drain(self, timeout: float = 30.0, *, waiting: bool = False) -> None:
        """Wait until the background work is done as far as it can go (see :func:`drain`)."""
        __tracebackhide__ = True
        drain(timeout, waiting=waiting)

    def sweep(self) -> tuple[list[str], list[str]]:
        """One recovery pass now: ``(due ids dispatched, ids recovered from lapsed leases)``."""

        return workers.sweep()

    def stop(self) -> None:
        """Wait for running executions, then stop the worker."""
        settle()
        stop_worker()

    def __repr__(self) -> str:
        return "<ReactorWorker threads>"


class LockHolder:
    """Takes locks for a test, as another process would: ``with hold_lock("acct:1") as hold:``.

    Each hold has an owner of its own (``hold.owner``, ``"test:<test name>:<random>"``), so a
    run of any reactor finds the key busy. Holds still held when the test ends are released.
    """

    def __init__(self, name: str = "test") -> None:
        self.name = name
        self.holds: list[LockHold] = []
        self._guard = threading.Lock()

    def new_owner(self) -> str:
        """A fresh owner id naming the test."""
        return f"test:{self.name}:{uuid.uuid4().hex[:8]}"

    @contextlib.contextmanager
    def __call__(
        self, key: str, *, ttl: float = 60, wait: float = 0, owner: str | None = None
    ) -> Iterator[LockHold]:
        """Hold lock ``key`` for the block (auto-extended while held).

        Args:
            ttl: seconds the hold lives without being extended.
            wait: seconds to wait if the lock is busy (default 0: raise at once).
            owner: the owner id (default a fresh one, see :meth:`new_owner`).

        Raises:
            LockAcquisitionError: the lock is held by someone else (after ``wait``).

        Inside the block, ``hold.release()`` releases it early (waking executions parked on
        the key); the end of the block then has nothing left to release.
        """
        hold = self.acquire(key, ttl=ttl, wait=wait, owner=owner)
        try:
            yield hold
        finally:
            hold.release()

    def acquire(
        self, key: str, *, ttl: float = 60, wait: float = 0, owner: str | None = None
    ) -> LockHold:
        """Take lock ``key`` until ``hold.release()`` (or the end of the test)."""

        hold = Lock(key, ttl=ttl, wait=wait, owner=owner or self.new_owner()).acquire()
        with self._guard:
            self.holds.append(hold)
        return hold

    def release_all(self) -> None:
        """Release every hold still held (the end of the test)."""
        with self._guard:
            holds, self.holds = self.holds, []
        for hold in reversed(holds):
            with contextlib.suppress(Exception):  # the store may be gone: the ttl frees it
                hold.release()

    def __repr__(self) -> str:
        held = sum(not h.released for h in self.holds)
        return f"<LockHolder {self.name!r} holding {held}>"
