"""Background execution: dispatch to a worker, park instead of waiting, recover the dead.

``configure(worker="threads")`` (the default) runs background work on a thread pool in the
process that dispatches it, started on first dispatch or by :func:`start`;
``configure(worker="asyncio")`` runs it as tasks on an event loop (:func:`astart` in an app's
lifespan, :func:`astop` at its end); ``configure(worker="celery")`` sends it to Celery workers
(``py_reactor.workers.celery``).
Everything an execution needs lives in the store, so a process restarted on the same store
finishes what a killed one left (:func:`sweep` runs one recovery pass by hand).

Importing this package starts nothing: the thread worker starts on the first dispatch.
"""

from __future__ import annotations

from py_reactor.api import cancel, find, resume, retry, undo, wait
from py_reactor.config import get_config
from py_reactor.runtime.execution import TERMINAL, Execution
from py_reactor.transport import tasks, threads

__all__ = [
    "TERMINAL",
    "Execution",
    "astart",
    "astop",
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


def start() -> None:
    """Start this process's thread worker now (it also starts on the first dispatch)."""
    threads.ensure_worker()


async def astart() -> None:
    """Start the asyncio worker on the running event loop (an app's lifespan), if it is not
    running there. With ``configure(worker="asyncio")`` it runs the background executions of
    the reactors this process imported (their namespaces), ``worker_concurrency`` at once."""
    await tasks.astart()


async def astop(*, timeout: float | None = 30) -> None:
    """Stop the running loop's asyncio worker: nothing new starts; the executions running get
    ``timeout`` seconds (None: for ever) to end. Those still running then are cancelled and
    left as if their worker had died, with what they hold given back at once: once their
    lease lapses, recovery runs them again from their last checkpoint. Then close
    py_reactor's connections on this loop."""
    await tasks.astop(timeout=timeout)


def ensure_worker() -> None:
    """The thread worker of this process, started if it is not running (with
    ``worker="celery"`` there is none: Celery workers serve)."""
    threads.ensure_worker()


def sweep() -> tuple[list[str], list[str]]:
    """One recovery pass: dispatch what is due (parks whose timer fired, executions whose
    runner's lease lapsed) to this process's thread worker, or with ``worker="celery"`` send
    their jobs to Celery. Returns ``(due ids, recovered ids)``."""
    if get_config().worker == "celery":
        from py_reactor.transport.celery import Dispatcher  # an optional extra: celery

        return Dispatcher().sweep()
    return threads.sweep()


def stop(*, wait: bool = False) -> None:
    """Stop this process's thread worker (tests; a new dispatch starts a new one); with
    ``wait``, return once its dispatcher thread has ended, so that nothing asks the store for
    work after the settings change."""
    threads.stop(wait=wait)
