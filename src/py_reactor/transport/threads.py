"""The thread worker: background executions on a thread pool of the dispatching process.

One dispatcher thread blocks on the ready list (a dispatch, or the release of a key an
execution parked on, pushes to it) and hands ids to the pool; about twice a second it also runs
the recovery pass (what is due by its timer, what a dead runner's lapsed lease left). The
leases of the executions this process runs are renewed by ``runtime.leases``, as in a Celery
worker. State lives in the store, so another process with the same store picks up what this
one leaves behind.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from py_reactor.config import get_config
from py_reactor.dsl.reactor import Reactor
from py_reactor.runtime import leases
from py_reactor.runtime.drive import recovery_pass, run_execution, worker_name
from py_reactor.runtime.pinning import this_script
from py_reactor.runtime.units import store_new
from py_reactor.storage import executions as stored_executions
from py_reactor.transport.loop import SWEEP_EVERY, serve

if TYPE_CHECKING:
    from py_reactor.engine.context import Context

__all__ = ["THREADS", "ThreadTransport", "ThreadWorker", "ensure_worker", "stop", "sweep"]

logger = logging.getLogger("py_reactor")


class ThreadWorker:
    """Runs background executions on ``threads`` threads of this process."""

    def __init__(self, threads: int) -> None:
        self.name = worker_name()
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="py_reactor-worker")
        self._queued: set[str] = set()  # ids submitted and not finished: never twice at once
        self._guard = threading.Lock()
        self._stopped = threading.Event()
        self._pid = os.getpid()
        self._thread = threading.Thread(
            target=self._loop, name="py_reactor-dispatcher", daemon=True
        )
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether this worker still serves (in this very process)."""
        return self._pid == os.getpid() and not self._stopped.is_set()

    def submit(self, execution_id: str) -> None:
        """Run ``execution_id`` on the pool unless it is queued or running here already."""
        with self._guard:
            if execution_id in self._queued:
                return
            self._queued.add(execution_id)
        try:
            self._pool.submit(self._run, execution_id)
        except RuntimeError:  # shut down (the interpreter is exiting): the due set keeps it
            with self._guard:
                self._queued.discard(execution_id)

    def sweep(self) -> tuple[list[str], list[str]]:
        """One recovery pass: submit what is due; ``(due ids, ids recovered from a lapsed
        lease)``."""
        due, lapsed = recovery_pass(stored_executions())
        for execution_id in due:
            self.submit(execution_id)
        return due, lapsed

    def stop(self, *, wait: bool = False) -> None:
        """Stop taking work (running executions finish); with ``wait``, return once the
        dispatcher thread has ended (it asks the store for nothing more)."""
        self._stopped.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if wait and self._thread is not threading.current_thread():
            self._thread.join(SWEEP_EVERY * 6)

    def _run(self, execution_id: str) -> None:
        try:
            run_execution(execution_id, self.name, on_claim=leases.track, transport=THREADS)
        except Exception:
            logger.exception("py_reactor: running execution %s failed", execution_id)
        finally:
            with self._guard:
                self._queued.discard(execution_id)

    def _loop(self) -> None:
        serve(self._stopped, self.submit, self.sweep, "the thread worker")


class ThreadTransport:
    """Executions stored here are run by this process's thread worker (started on demand)."""

    def dispatch(self, reactor: type[Reactor], context: Context) -> None:
        store_new(
            reactor, context, pinned=this_script() if reactor.__module__ == "__main__" else ""
        )
        ensure_worker()

    def serve_here(self) -> None:
        ensure_worker()


#: The one thread transport (it holds no state: the worker is this module's).
THREADS = ThreadTransport()

_lock = threading.Lock()
_worker: ThreadWorker | None = None


def ensure_worker() -> None:
    """The thread worker of this process, started if it is not running (with
    ``worker="celery"`` there is none: Celery workers serve)."""
    global _worker
    if get_config().worker != "threads":
        return
    worker = _worker
    if worker is not None and worker.alive:
        return
    with _lock:
        worker = _worker
        if worker is not None and worker.alive:
            return
        _worker = ThreadWorker(get_config().worker_threads)


def sweep() -> tuple[list[str], list[str]]:
    """One recovery pass of this process's thread worker (started if need be)."""
    ensure_worker()
    worker = _worker
    assert worker is not None
    return worker.sweep()


def stop(*, wait: bool = False) -> None:
    """Stop this process's thread worker (a new dispatch starts a new one); with ``wait``,
    return once its dispatcher thread has ended."""
    global _worker
    with _lock:
        worker, _worker = _worker, None
    if worker is not None:
        worker.stop(wait=wait)
