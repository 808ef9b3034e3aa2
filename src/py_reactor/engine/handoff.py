"""The seam through which the engine hands an async unit to a worker and learns how it ended
(and reserves an interrupt's correlation id in the store).

The engine never imports a worker backend: ``py_reactor.workers`` installs the one backend
(store the unit's execution, make it due; read its stored outcome) when it is imported, which
``import py_reactor`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from py_reactor.errors import DispatchError

if TYPE_CHECKING:
    from py_reactor.dsl.reactor import Reactor
    from py_reactor.engine.context import Context
    from py_reactor.engine.results import Outcome, PausedResult

__all__ = ["UnitBackend", "install", "unit_backend"]


class UnitBackend(Protocol):
    """Dispatches executions of their own and reads their stored outcomes."""

    def dispatch(self, reactor: type[Reactor], context: Context) -> None:
        """Store ``context`` as a new execution of ``reactor`` (an id already stored is left
        as it is) and make it due for a worker.

        Raises:
            ReactorError: it could not be stored or sent (nothing was enqueued).
        """

    def wait(self, execution_id: str, timeout: float) -> Outcome | None:
        """The terminal outcome of ``execution_id`` (around its stored context), waiting up to
        ``timeout`` seconds (0: only look); None if it has not ended by then."""

    def store_pause(self, outcome: PausedResult) -> None:
        """Store a run that paused in the caller (created ``"paused"``), for a resume that may
        come from any process."""

    def reserve(
        self, reactor: str, correlation_id: str, execution_id: str, deadline: float | None
    ) -> str | None:
        """Reserve ``correlation_id`` of ``reactor`` for the paused run ``execution_id`` (an
        interrupt); None when it is now this run's, else the id of the paused run that has it.
        """


_backend: UnitBackend | None = None


def install(backend: UnitBackend) -> None:
    """Make ``backend`` the one the engine dispatches async units through."""
    global _backend
    _backend = backend


def unit_backend() -> UnitBackend:
    """The installed backend.

    Raises:
        DispatchError: none is installed (``py_reactor.workers`` was never imported).
    """
    if _backend is None:
        raise DispatchError(
            "async units need py_reactor's workers: import py_reactor (or py_reactor.workers) "
            "before running a reactor that declares async_step or async_reactor"
        )
    return _backend
