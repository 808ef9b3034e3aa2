"""Background execution: dispatch to a worker, park instead of waiting, recover the dead.

``configure(worker="threads")`` (the default) runs background work on a thread pool in the
process that dispatches it, started on first dispatch or by :func:`start`;
``configure(worker="celery")`` sends it to Celery workers (``py_reactor.workers.celery``).
Everything an execution needs lives in the store, so a process restarted on the same store
finishes what a killed one left (:func:`sweep` runs one recovery pass by hand).
"""

from __future__ import annotations

import threading
from typing import Any

from py_reactor.engine.handoff import install as _install_units
from py_reactor.workers.execution import TERMINAL, Execution, find, wait
from py_reactor.workers.units import StoreUnits

_install_units(StoreUnits())  # the engine dispatches async units through the store

__all__ = [
    "TERMINAL",
    "Execution",
    "cancel",
    "ensure_worker",
    "find",
    "resume",
    "retry",
    "start",
    "stop",
    "sweep",
    "undo",
    "wait",
]

_lock = threading.Lock()
_worker: object | None = None


def cancel(execution_id: str, reason: str | None = None) -> Execution:
    """Stop a stored run that waits, or failed, without rollback (``workers.operations``)."""
    from py_reactor.workers.operations import cancel as cancel_

    return cancel_(execution_id, reason)


def undo(execution_id: str) -> Execution:
    """Roll a finished or aborted stored run back, then cancel it (``workers.operations``)."""
    from py_reactor.workers.operations import undo as undo_

    return undo_(execution_id)


def retry(execution_id: str) -> Any:
    """Start a new run with the inputs of an ended one, linked to it (``workers.operations``)."""
    from py_reactor.workers.operations import retry as retry_

    return retry_(execution_id)


def resume(
    execution_id: str | None = None,
    payload: Any = None,
    *,
    correlation_id: str | None = None,
    reactor: Any = None,
) -> Any:
    """Resume a run paused at an interrupt with ``payload`` (``workers.interrupts``)."""
    from py_reactor.workers.interrupts import resume as resume_

    return resume_(execution_id, payload, correlation_id=correlation_id, reactor=reactor)


def start() -> None:
    """Start this process's thread worker now (it also starts on the first dispatch)."""
    ensure_worker()


def ensure_worker() -> None:
    """The thread worker of this process, started if it is not running (with
    ``worker="celery"`` there is none: Celery workers serve)."""
    global _worker
    from py_reactor.config import get_config
    from py_reactor.workers.threads import ThreadWorker

    if get_config().worker != "threads":
        return
    worker = _worker
    if isinstance(worker, ThreadWorker) and worker.alive:
        return
    with _lock:
        worker = _worker
        if isinstance(worker, ThreadWorker) and worker.alive:
            return
        _worker = ThreadWorker(get_config().worker_threads)


def sweep() -> tuple[list[str], list[str]]:
    """One recovery pass: dispatch what is due (parks whose timer fired, executions whose
    runner's lease lapsed) to this process's thread worker, or with ``worker="celery"`` send
    their jobs to Celery. Returns ``(due ids, recovered ids)``."""
    from py_reactor.config import get_config
    from py_reactor.workers.threads import ThreadWorker

    if get_config().worker == "celery":
        from py_reactor.workers.celery import Dispatcher

        return Dispatcher().sweep()
    ensure_worker()
    worker = _worker
    assert isinstance(worker, ThreadWorker)
    return worker.sweep()


def stop(*, wait: bool = False) -> None:
    """Stop this process's thread worker (tests; a new dispatch starts a new one); with
    ``wait``, return once its dispatcher thread has ended, so that nothing asks the store for
    work after the settings change."""
    global _worker
    from py_reactor.workers.threads import ThreadWorker

    with _lock:
        worker, _worker = _worker, None
    if isinstance(worker, ThreadWorker):
        worker.stop(wait=wait)
