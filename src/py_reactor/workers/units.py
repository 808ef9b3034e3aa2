"""The engine's async-unit backend: a unit is dispatched as any background execution is, and
its reader learns how it ended from the stored record (``engine.handoff``)."""

from __future__ import annotations

from py_reactor.dsl.reactor import Reactor
from py_reactor.engine.context import Context
from py_reactor.engine.results import FailureResult, Outcome, PausedResult
from py_reactor.workers.execution import ended
from py_reactor.workers.execution import wait as wait_for

__all__ = ["StoreUnits"]


class StoreUnits:
    """Units through the store: stored and made due by ``dispatch``, read back by ``wait``."""

    def dispatch(self, reactor: type[Reactor], context: Context) -> None:
        from py_reactor.workers.dispatch import dispatch

        dispatch(reactor, context)

    def wait(self, execution_id: str, timeout: float) -> Outcome | None:
        try:
            if timeout > 0:
                return wait_for(execution_id, timeout=timeout)
            return ended(execution_id)
        except TimeoutError:
            return None
        except LookupError as exc:
            return _gone(execution_id, exc)

    def store_pause(self, outcome: PausedResult) -> None:
        from py_reactor.workers.interrupts import store_pause

        store_pause(outcome)

    def reserve(
        self, reactor: str, correlation_id: str, execution_id: str, deadline: float | None
    ) -> str | None:
        from py_reactor.storage import current_store
        from py_reactor.storage.executions import ExecutionStore

        return ExecutionStore(current_store()).reserve(
            reactor, correlation_id, execution_id, deadline
        )


def _gone(execution_id: str, exc: LookupError) -> FailureResult:
    """A unit whose record is gone (deleted from the store): its reader fails, saying so."""
    return FailureResult(
        Context(reactor="?", inputs={}, execution_id=execution_id),
        error=f"the async unit's execution {execution_id} is no longer stored ({exc})",
        step_name=None,
        reactor_name="?",
    )
