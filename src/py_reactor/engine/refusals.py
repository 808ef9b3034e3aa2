"""A step refused before its work ran (or between attempts): trace it, tell middleware, and
answer the failure. Shared by every step kind, async units included."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from py_reactor.coordination.gates import Busy
from py_reactor.dsl.signals import Failure
from py_reactor.engine.answers import Parked, StepFailure
from py_reactor.engine.run import Run, error_text
from py_reactor.errors import CoordinationError
from py_reactor.observability import events as ev
from py_reactor.states import TraceKind

__all__ = ["NOTHING", "contended", "refused", "said_no"]

#: No coordination keys to report in a trace entry.
NOTHING: Mapping[str, Any] = MappingProxyType({})


def said_no(
    run: Run, step: str | None, why: Busy | CoordinationError
) -> tuple[Parked | None, CoordinationError]:
    """What the run's waiter makes of coordination saying no to ``step`` (None: the reactor's
    own) — busy (an answer), or raised (the store unreachable, a key function) — and the error
    the step fails with if it does not park."""
    if isinstance(why, Busy):
        return run.waiter.busy(run, step, why), why.error
    return run.waiter.refused(run, step, why), why


def contended(
    run: Run,
    name: str,
    values: dict[str, Any],
    exc: CoordinationError,
    attempts: int,
    started: float,
    unit: Any,
    last: Failure | None,
    where: Mapping[str, Any] = NOTHING,
) -> StepFailure:
    """The step's coordination said no (contention, a bad key, the store) before an attempt.

    This is the one park-or-fail decision of the step path. In this process the primitive
    has already waited its ``wait``, so the step fails, never retried, and the run rolls back
    as for any failure; a worker parks the execution here instead. ``attempts`` counts the
    attempts whose work did run: if there were any, the step is compensated, with ``last``
    (the last attempt's failure) as its error.
    """
    run.record(
        TraceKind.FAILED,
        name,
        started,
        attempt=attempts,
        arguments=values,
        error=error_text(exc),
        refused_by="coordination",
        primitive=exc.primitive,
        key=exc.key,
        **where,
    )
    run.emit(ev.StepFailed, name, attempt=attempts, error=exc)
    return StepFailure(
        name,
        exc,
        retryable=False,
        work_started=attempts > 0,
        arguments=values,
        attempts=attempts,
        unit=unit,
        work_error=None if last is None else last.error,
    )


def refused(
    run: Run,
    name: str,
    exc: Exception,
    args: dict[str, Any] | None,
    started: float,
    *,
    validation_errors: list[dict[str, Any]] | None = None,
) -> StepFailure:
    run.record(TraceKind.FAILED, name, started, attempt=0, arguments=args, error=error_text(exc))
    run.emit(ev.StepFailed, name, attempt=0, error=exc)
    return StepFailure(
        name,
        exc,
        retryable=False,
        work_started=False,
        arguments=args,
        validation_errors=list(validation_errors or []),
    )
