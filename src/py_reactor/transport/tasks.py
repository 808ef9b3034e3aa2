"""The asyncio worker: background executions as tasks on an event loop.

``configure(worker="asyncio")`` runs background work on the loop that started the worker (an
app's lifespan: ``await py_reactor.workers.astart()``; or ``py-reactor worker --pool asyncio``).
It is the thread worker with tasks for threads: the same dispatch loop (``transport.loop.serve``)
runs in a bridge, so blocking on the ready lists is an awaited BLPOP; each execution is
``runtime.drive.run_execution`` in a bridge of its own, so its waits are awaited, a park gives
the task back, and a release wakes it through the same ready list. At most ``concurrency``
executions run at once; the store is the queue.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

from py_reactor.aio import call, close_loop_resources, in_bridge
from py_reactor.config import get_config
from py_reactor.dsl.reactor import Reactor
from py_reactor.runtime import leases
from py_reactor.runtime.drive import WORKER_STOPS, recovery_pass, run_execution, worker_name
from py_reactor.runtime.pinning import this_script
from py_reactor.runtime.units import store_new
from py_reactor.storage import executions as stored_executions
from py_reactor.transport.loop import serve

if TYPE_CHECKING:
    from py_reactor.engine.context import Context

__all__ = ["TASKS", "AsyncWorker", "TaskTransport", "astart", "astop", "current_worker"]

logger = logging.getLogger("py_reactor")


class AsyncWorker:
    """Runs background executions as tasks of the running loop, ``concurrency`` at a time."""

    def __init__(self, concurrency: int) -> None:
        self.name = worker_name()
        self.concurrency = concurrency
        self.loop = asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(concurrency)
        self._queued: set[str] = set()  # ids taken and not finished: never twice at once
        self._running: set[asyncio.Task[None]] = set()
        self._stopped = threading.Event()
        self._dispatcher = self.loop.create_task(
            call(serve, self._stopped, self.submit, self.sweep, "the asyncio worker"),
            name="py_reactor-dispatcher",
        )

    @property
    def alive(self) -> bool:
        """Whether this worker still serves (its loop runs and it was not stopped)."""
        return not self._stopped.is_set() and not self.loop.is_closed()

    def submit(self, execution_id: str) -> None:
        """Run ``execution_id`` as a task unless it is queued or running here already."""
        if execution_id in self._queued or self._stopped.is_set():
            return
        self._queued.add(execution_id)
        task = self.loop.create_task(self._run(execution_id), name=f"py_reactor-{execution_id}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def sweep(self) -> tuple[list[str], list[str]]:
        """One recovery pass: submit what is due; ``(due ids, ids recovered from a lapsed
        lease)``. Called from the dispatch loop's bridge."""
        due, lapsed = recovery_pass(stored_executions())
        for execution_id in due:
            self.submit(execution_id)
        return due, lapsed

    async def _run(self, execution_id: str) -> None:
        try:
            async with self._slots:
                if self._stopped.is_set():
                    return  # the due set keeps it for the next worker
                await call(
                    run_execution,
                    execution_id,
                    self.name,
                    on_claim=leases.track,
                    transport=TASKS,
                )
        except Exception:
            logger.exception("py_reactor: running execution %s failed", execution_id)
        finally:
            self._queued.discard(execution_id)

    async def stop(self, *, timeout: float | None = 30) -> None:
        """Stop taking work and wait up to ``timeout`` seconds (None: for ever) for the running
        executions to end. Those still running then are cancelled and left as a worker that
        died leaves them, only with what they hold given back at once: nothing rolled back,
        nothing written, and once their lease lapses (``execution_lease``) recovery runs them
        again from their last checkpoint, here after a restart or in another worker. What has
        not started stays due for the next worker."""
        self._stopped.set()
        self._dispatcher.cancel()
        await asyncio.gather(self._dispatcher, return_exceptions=True)
        running = set(self._running)
        if running:
            _, late = await asyncio.wait(running, timeout=timeout)
            for task in late:
                task.cancel(WORKER_STOPS)  # left to recovery, not aborted (runtime.drive)
            await asyncio.gather(*late, return_exceptions=True)


class TaskTransport:
    """Executions stored here are run by the asyncio worker of the running loop (started on
    demand when the dispatch happens on a loop; otherwise by a worker started elsewhere)."""

    def dispatch(self, reactor: type[Reactor], context: Context) -> None:
        store_new(
            reactor, context, pinned=this_script() if reactor.__module__ == "__main__" else ""
        )
        self.serve_here()

    def serve_here(self) -> None:
        if in_bridge():
            _ensure_worker()


#: The one asyncio transport (it holds no state: the worker is this module's).
TASKS = TaskTransport()

_worker: AsyncWorker | None = None


def current_worker() -> AsyncWorker | None:
    """The asyncio worker of the running loop, if one serves."""
    worker = _worker
    if worker is None or not worker.alive or worker.loop is not asyncio.get_running_loop():
        return None
    return worker


def _ensure_worker() -> AsyncWorker:
    global _worker
    worker = current_worker()
    if worker is None:
        worker = _worker = AsyncWorker(get_config().worker_concurrency)
    return worker


async def astart() -> AsyncWorker:
    """Start the asyncio worker on the running loop (an app's lifespan), if it is not running;
    it serves the namespaces of the reactors this process imported, as the thread worker.

    Raises:
        RuntimeError: ``configure(worker="asyncio")`` was not called (dispatches would go
            elsewhere, and this worker would race the one they go to).
    """
    worker = get_config().worker
    if worker != "asyncio":
        raise RuntimeError(
            f"py_reactor.workers.astart() starts the asyncio worker, but configure(worker=...) "
            f"is {worker!r}: call configure(worker='asyncio') first (before the app dispatches)"
        )
    return _ensure_worker()


async def astop(*, timeout: float | None = 30) -> None:
    """Stop the running loop's asyncio worker (see :meth:`AsyncWorker.stop`), then close the
    connections py_reactor opened on this loop."""
    global _worker
    worker = current_worker()
    if worker is not None:
        _worker = None
        await worker.stop(timeout=timeout)
    await close_loop_resources()
