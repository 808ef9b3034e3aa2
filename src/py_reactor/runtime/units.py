"""The engine's async-unit backend: a unit is dispatched as any background execution is, and
its reader learns how it ended from the stored record (``engine.handoff``)."""

from __future__ import annotations

from typing import Any

from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.registry import class_path
from py_reactor.engine.context import Context, Status
from py_reactor.engine.results import FailureResult, Outcome
from py_reactor.engine.serializer import dumps_context
from py_reactor.errors import CorruptRecordError
from py_reactor.observability.propagation import dispatching
from py_reactor.runtime.execution import ended, finish
from py_reactor.runtime.execution import wait as wait_for
from py_reactor.runtime.namespaces import namespace_of
from py_reactor.runtime.transport import Transport
from py_reactor.storage import executions as stored_executions

__all__ = ["StoreUnits", "dispatch", "store_new"]


class StoreUnits:
    """Units through the store: stored and made due by ``dispatch`` (through ``transport``),
    read back by ``wait``."""

    __slots__ = ("transport",)

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def dispatch(self, reactor: type[Reactor], context: Context) -> None:
        dispatch(reactor, context, self.transport)

    def wait(self, execution_id: str, timeout: float) -> Outcome | None:
        try:
            if timeout > 0:
                return wait_for(execution_id, timeout=timeout)
            return ended(execution_id)
        except TimeoutError:
            return None
        except LookupError as exc:
            return _gone(execution_id, exc)
        except CorruptRecordError as exc:  # its end cannot be read: the reader fails, saying so
            return _unreadable(execution_id, exc)

    def finish(self, execution_id: str, timeout: float | None) -> Outcome:
        return finish(execution_id, timeout)

    def reserve(
        self, reactor: str, correlation_id: str, execution_id: str, deadline: float | None
    ) -> str | None:
        return stored_executions().reserve(reactor, correlation_id, execution_id, deadline)


def _gone(execution_id: str, exc: LookupError) -> FailureResult:
    """A unit whose record is gone (deleted from the store): its reader fails, saying so."""
    return FailureResult(
        Context(reactor="?", inputs={}, execution_id=execution_id),
        error=f"the async unit's execution {execution_id} is no longer stored ({exc})",
        step_name=None,
        reactor_name="?",
    )


def _unreadable(execution_id: str, exc: CorruptRecordError) -> FailureResult:
    """A unit whose stored record cannot be read: its reader fails with the record's problem
    (waiting on could never read how it ended)."""
    return FailureResult(
        Context(reactor="?", inputs={}, execution_id=execution_id),
        error=exc,
        step_name=None,
        reactor_name="?",
    )


def dispatch(cls: type[Reactor], context: Context, transport: Transport) -> None:
    """Store the execution (before anything is enqueued) and make it due now, through
    ``transport`` (the thread worker picks it up, or a Celery job is sent for it).

    Raises:
        SerializationError: an input or result is not JSON-representable.
        StoreUnavailableError: the store cannot be reached.
        DispatchError: the transport cannot take it (Celery without ``redis_url``, a
            ``__main__`` reactor sent to Celery).
    """
    dispatching(context)  # middleware may store data with it (the OpenTelemetry trace context)
    transport.dispatch(cls, context)


def store_new(reactor: type[Reactor], context: Context, **options: Any) -> bool:
    """Store ``context`` as a new pending execution of ``reactor`` (what a transport does
    before it enqueues anything); False if that id was stored before. ``options``: those of
    ``ExecutionStore.create`` (``pinned``, ``sent_by_caller``, ``queue``); it is stored in
    ``reactor``'s namespace.

    Raises:
        SerializationError: an input or result is not JSON-representable.
        StoreUnavailableError: the store cannot be reached.
    """
    text = dumps_context(context)
    created: bool = stored_executions().create(
        context.execution_id,
        class_path(reactor),
        text,
        Status.PENDING,
        namespace=namespace_of(reactor),
        **options,
    )
    return created
