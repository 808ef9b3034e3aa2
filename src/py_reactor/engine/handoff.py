"""The seam through which the engine hands an async unit to a worker and learns how it ended
(and stores a pause, and reserves an interrupt's correlation id).

The engine never imports the runtime or a store: whoever drives a run passes the backend in
(``execute(..., units=...)``); ``py_reactor.runtime.units.StoreUnits`` is the one the runtime
gives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from py_reactor.errors import DispatchError

if TYPE_CHECKING:
    from py_reactor.dsl.reactor import Reactor
    from py_reactor.engine.context import Context
    from py_reactor.engine.results import Outcome

__all__ = ["NO_UNITS", "UnitBackend"]


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

    def finish(self, execution_id: str, timeout: float | None) -> Outcome:
        """Block until ``execution_id`` ends (``timeout`` None: however long it takes); its
        terminal outcome, rebuilt from the store.

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """

    def reserve(
        self, reactor: str, correlation_id: str, execution_id: str, deadline: float | None
    ) -> str | None:
        """Reserve ``correlation_id`` of ``reactor`` for the paused run ``execution_id`` (an
        interrupt); None when it is now this run's, else the id of the paused run that has it.
        """


class _NoUnits:
    """The backend of a run nobody gave one (the engine driven directly): it can run every
    step but async units, stored pauses and waits on a dispatched run."""

    def _refuse(self) -> DispatchError:
        return DispatchError(
            "this run was started without py_reactor's runtime (the engine driven directly): "
            "async units, interrupts and background hand-offs need it; run the reactor with "
            "MyReactor.run(...)"
        )

    def dispatch(self, reactor: type[Reactor], context: Context) -> None:
        raise self._refuse()

    def wait(self, execution_id: str, timeout: float) -> Outcome | None:
        raise self._refuse()

    def finish(self, execution_id: str, timeout: float | None) -> Outcome:
        raise self._refuse()

    def reserve(
        self, reactor: str, correlation_id: str, execution_id: str, deadline: float | None
    ) -> str | None:
        raise self._refuse()


#: What a run without a runtime backend uses: refuses whatever needs the store.
NO_UNITS: UnitBackend = _NoUnits()
