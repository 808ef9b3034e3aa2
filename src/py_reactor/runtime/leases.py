"""Lease renewal for the executions this process runs, on one thread per process.

A runner renews its execution's liveness lease while it runs; the recovery loop re-dispatches
an execution whose lease lapsed (its runner died). A Celery task runs in a pool process (a
prefork child, or a thread of the worker), so the renewing thread starts lazily in whichever
process runs executions, and a forked child starts with none.
"""

from __future__ import annotations

import logging
import os
import threading

from py_reactor.config import get_config
from py_reactor.storage import executions as stored_executions

__all__ = ["track"]

logger = logging.getLogger("py_reactor")


class _Keeper:
    def __init__(self) -> None:
        self._running: dict[str, int] = {}  # execution id -> epoch
        self._guard = threading.Lock()
        self._wake = threading.Event()
        self._pid = -1

    def track(self, execution_id: str, epoch: int | None) -> None:
        """Renew ``execution_id``'s lease at ``epoch`` from now on; ``None``: stop."""
        with self._guard:
            if epoch is None:
                self._running.pop(execution_id, None)
                return
            self._running[execution_id] = epoch
            if self._pid != os.getpid():  # first use in this process (or a forked child)
                self._pid = os.getpid()
                threading.Thread(target=self._loop, name="py_reactor-leases", daemon=True).start()

    def _loop(self) -> None:
        pid = os.getpid()
        while pid == os.getpid():
            lease = get_config().execution_lease
            self._wake.wait(max(0.05, min(lease / 3, 5.0)))
            with self._guard:
                running = list(self._running.items())
            if not running:
                continue
            try:
                executions = stored_executions()
                for execution_id, epoch in running:
                    executions.renew(execution_id, epoch, lease)
            except Exception as exc:  # the store is down: the next turn tries again
                logger.warning("py_reactor: renewing execution leases failed (%s)", exc)

    def after_fork(self) -> None:
        self._running = {}
        self._guard = threading.Lock()
        self._wake = threading.Event()
        self._pid = -1


_keeper = _Keeper()
os.register_at_fork(after_in_child=_keeper.after_fork)


def track(execution_id: str, epoch: int | None) -> None:
    """Keep ``execution_id``'s lease alive (its claim's ``epoch``) until called with ``None``."""
    _keeper.track(execution_id, epoch)
