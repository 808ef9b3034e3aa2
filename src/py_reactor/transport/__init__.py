"""How executions reach workers: this process's thread pool, or Celery.

Transports only store-and-enqueue and serve (``drive`` runs what they take); the api layer
picks one from ``configure(worker=...)`` with :func:`current` and hands it to the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from py_reactor.config import get_config
from py_reactor.dsl.reactor import Reactor
from py_reactor.errors import DispatchError
from py_reactor.runtime.transport import Transport
from py_reactor.transport.tasks import TASKS
from py_reactor.transport.threads import THREADS

if TYPE_CHECKING:
    from py_reactor.engine.context import Context

__all__ = ["Transport", "current"]


class _CeleryMissing:
    """``worker="celery"`` where Celery is not installed: refuses before anything is stored."""

    def __init__(self, problem: ImportError) -> None:
        self.problem = problem

    def dispatch(self, reactor: type[Reactor], context: Context) -> None:
        raise DispatchError(
            f"{reactor.__qualname__} cannot be sent to Celery: configure(worker='celery') needs "
            'Celery installed (pip install -e ".[celery]" in your py_reactor checkout); '
            "importing it failed: "
            f"{self.problem}"
        )

    def serve_here(self) -> None:
        """Nothing serves here with ``worker="celery"``."""


def current() -> Transport:
    """The transport ``configure(worker=...)`` names now."""
    worker = get_config().worker
    if worker == "asyncio":
        return TASKS
    if worker != "celery":
        return THREADS
    try:
        from py_reactor.transport.celery import CELERY  # an optional extra: celery
    except ImportError as exc:
        return _CeleryMissing(exc)
    return CELERY
