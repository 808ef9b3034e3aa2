"""Where a run's end is written: the one write ``drive()`` makes once the engine has answered.

- :class:`StoredJournal`: a stored execution that a runner claimed (``epoch``): finished,
  parked or paused, written with a compare-and-set on the epoch (a stale runner writes nothing);
- :class:`CallerJournal`: a run started in the caller, stored only when it must be: a pause
  (for a resume from any process) or a hand-off (dispatched to a worker). A run nested in a step
  body is part of the execution running that step and writes nothing of its own.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from py_reactor.dsl.reactor import Reactor
from py_reactor.engine.async_units import AWAITED
from py_reactor.engine.context import Context
from py_reactor.engine.results import (
    DispatchedResult,
    FailureResult,
    Outcome,
    ParkedResult,
    PausedResult,
)
from py_reactor.engine.run import describe_exception
from py_reactor.engine.serializer import dumps_context
from py_reactor.errors import ReactorError, SerializationError
from py_reactor.runtime.execution import outcome_to_dict
from py_reactor.runtime.pauses import store_pause
from py_reactor.runtime.transport import Transport
from py_reactor.runtime.units import dispatch
from py_reactor.states import Status
from py_reactor.storage.executions import ExecutionStore

__all__ = ["CallerJournal", "Journal", "StoredJournal", "aborted_outcome", "run_failure"]


class Journal(Protocol):
    """How ``drive()`` writes the end of a run."""

    def commit(self, cls: type[Reactor], context: Context, outcome: Outcome) -> tuple[Outcome, str]:
        """Write how the run ended; the outcome to return (a failure if it could not be
        handed on) and what became of the execution."""

    def abort(self, cls: type[Reactor], context: Context, exc: BaseException) -> None:
        """The run was cut off (KeyboardInterrupt, SystemExit) before it answered."""


class StoredJournal:
    """A claimed stored execution: one write under the runner's ``epoch``."""

    __slots__ = ("epoch", "executions")

    def __init__(self, executions: ExecutionStore, epoch: int) -> None:
        self.executions = executions
        self.epoch = epoch

    def commit(self, cls: type[Reactor], context: Context, outcome: Outcome) -> tuple[Outcome, str]:
        """Parked (due later, woken by the key's release), paused (until a resume or its
        timeout) or terminal; ``"stale"`` when another runner owns the execution now."""
        executions, epoch, execution_id = self.executions, self.epoch, context.execution_id
        try:
            text = dumps_context(context)
        except SerializationError as exc:
            blank = Context(reactor=context.reactor, inputs={}, execution_id=execution_id)
            text = dumps_context(blank)
            outcome = run_failure(context, exc, context.reactor)
        if isinstance(outcome, PausedResult):
            written = store_pause(outcome, epoch=epoch, executions=executions)
            return outcome, "paused" if written else "stale"
        if isinstance(outcome, ParkedResult):
            stop = outcome.parked
            waiting_on = {
                "step": stop.step,
                "primitive": stop.primitive,
                "key": stop.key,
                "attempt": stop.attempt,
                "until": time.time() + (stop.delay or 0),
            }
            keyed = stop.primitive is not None and stop.key is not None  # else the timer wakes
            written = executions.park(
                execution_id, epoch, text, waiting_on=waiting_on, due_in=stop.delay,
                primitive=stop.primitive, key=stop.key, limit=stop.limit, bucket=stop.bucket,
                turn=stop.turn,
                count=keyed and stop.primitive not in ("ordered_lock", AWAITED),  # as caps count
            )  # fmt: skip
            return outcome, "parked" if written else "stale"
        status = context.status
        written = executions.checkpoint(
            execution_id, epoch, text, status, outcome=outcome_to_dict(outcome)
        )
        return outcome, status if written else "stale"

    def abort(self, cls: type[Reactor], context: Context, exc: BaseException) -> None:
        """Stored ``aborted``: no rollback ran (undo it later)."""
        self.commit(cls, context, aborted_outcome(cls, context, exc))


class CallerJournal:
    """A run started in the caller: stored when it pauses or hands off, else nothing."""

    __slots__ = ("nested", "transport")

    def __init__(self, transport: Transport, *, nested: bool = False) -> None:
        self.transport = transport
        self.nested = nested

    def commit(self, cls: type[Reactor], context: Context, outcome: Outcome) -> tuple[Outcome, str]:
        """A pause is stored for a resume from any process; a hand-off is stored and sent to a
        worker (refused before anything is enqueued: the run's failure)."""
        if self.nested:  # the enclosing execution stores what it must
            return outcome, "in place"
        if isinstance(outcome, PausedResult):
            store_pause(outcome, transport=self.transport)
            return outcome, "paused"
        if isinstance(outcome, DispatchedResult):
            try:
                dispatch(cls, context, self.transport)
            except ReactorError as exc:  # nothing was enqueued; what it holds lapses by its ttl
                failed = run_failure(context, exc, cls.__py_reactor_name__, inputs=context.inputs)
                return failed, "failed"
            return outcome, "dispatched"
        return outcome, "in place"

    def abort(self, cls: type[Reactor], context: Context, exc: BaseException) -> None:
        """Nothing was stored; nothing is."""


def aborted_outcome(cls: type[Reactor], context: Context, exc: BaseException) -> FailureResult:
    """The outcome stored for a run interrupted in a worker (no rollback ran: undo it later)."""
    return run_failure(
        context, exc, cls.__py_reactor_name__, inputs=context.inputs, status=Status.ABORTED
    )


def run_failure(
    context: Context,
    exc: BaseException,
    reactor_name: str,
    *,
    inputs: dict[str, Any] | None = None,
    status: Status = Status.FAILED,
) -> FailureResult:
    """The outcome of a run that failed (or was cut off) outside any step, ``context`` marked
    ``status``; the exception is named as a run in place names it."""
    context.status = status
    return FailureResult(
        context,
        error=exc,
        step_name=None,
        reactor_name=reactor_name,
        exception_class=describe_exception(exc)[0],
        inputs=inputs,
    )
