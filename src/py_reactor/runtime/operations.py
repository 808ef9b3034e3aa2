"""Operations on stored executions, by id, from any process: cancel, undo, retry.

Each takes the execution out of the workers' hands first (a status change that bumps the epoch,
refused while a runner's lease is live), so a worker never runs what an operator is changing,
and a runner that claimed it before writes nothing more.

* ``cancel``: stop a run that waits (parked, pending, paused) or has failed or been aborted,
  with no rollback; what it still holds is given back; its results are kept (an undo may follow);
  status ``"cancelled"``.
* ``undo``: roll back any run that is not running (pending, parked, paused, failed, aborted,
  cancelled, finished), its completed steps undone newest first as a rollback does, what it still
  holds given back; then status ``"cancelled"``. A run is undone once.
* ``retry``: a new run of the same reactor with the same inputs, linked to the old one.
"""

from __future__ import annotations

import time
from typing import Any

from py_reactor.config import get_config
from py_reactor.engine.compensation import undo_completed
from py_reactor.engine.context import Context, running
from py_reactor.engine.release import release_ledger
from py_reactor.engine.results import CancelledResult, Outcome
from py_reactor.engine.run import Run
from py_reactor.engine.serializer import dumps_context, loads_context
from py_reactor.errors import ExecutionStateError, ReactorError, SerializationError
from py_reactor.runtime.drive import revive, start
from py_reactor.runtime.execution import Execution, outcome_to_dict, snapshot
from py_reactor.runtime.transport import Transport
from py_reactor.states import Status, TraceKind
from py_reactor.storage import executions as stored_executions
from py_reactor.storage.executions import ExecutionStore, StoredExecution

__all__ = ["cancel", "retry", "undo"]

#: What ``cancel`` accepts: a run not under way now, that has not ended well.
CANCELLABLE = (Status.PENDING, Status.WAITING, Status.PAUSED, Status.FAILED, Status.ABORTED)
#: What ``undo`` accepts: every run not under way now (one parked or pending may hold keys and
#: have completed steps; a cancelled one kept its results). An undone run is refused.
UNDOABLE = (
    Status.PENDING,
    Status.WAITING,
    Status.PAUSED,
    Status.FAILED,
    Status.ABORTED,
    Status.CANCELLED,
    Status.COMPLETED,
    Status.HALTED,
)
#: What ``retry`` accepts: a run that has ended, whichever way.
RETRYABLE = (Status.COMPLETED, Status.HALTED, Status.FAILED, Status.ABORTED, Status.CANCELLED)


def cancel(execution_id: str, reason: str | None = None) -> Execution:
    """Stop ``execution_id`` without rollback: status ``"cancelled"``, holds given back,
    results kept (``undo`` may follow).

    Raises:
        LookupError: the store does not know ``execution_id``.
        ExecutionStateError: it is running (cancel it once it parks or ends), or has ended
            well or been cancelled already.
    """
    executions, stored = _load(execution_id)
    try:
        cls, context = revive(stored)
    except (LookupError, ReactorError):  # cancelled all the same; its holds lapse by their ttl
        cls, context = None, Context(reactor=stored.reactor, inputs={}, execution_id=stored.id)
    epoch = _take(
        executions, stored, Status.CANCELLED, CANCELLABLE, "cancelled", correlation=_index(context)
    )
    context = _taken(executions, stored.id, context)
    why = reason or "cancelled"
    if cls is not None:
        release_ledger(cls, context)
    context.status = Status.CANCELLED
    context.trace.append(_entry(TraceKind.CANCELLED, reason=why))
    _write(executions, stored.id, epoch, context, CancelledResult(context, reason=why))
    return _found(executions, stored.id)


def undo(execution_id: str) -> Execution:
    """Roll ``execution_id`` back (its completed steps undone, newest first, under their
    locks and semaphores as a rollback does; what it still holds given back, which wakes the
    executions parked on it), then mark it ``"cancelled"``.

    What could not be undone is in the outcome's ``rollback_failures`` (``find(id).outcome``).

    Raises:
        LookupError: the store does not know ``execution_id``.
        ExecutionStateError: it is running, or was undone already.
        LookupError: its reactor class cannot be imported here.
    """
    executions, stored = _load(execution_id)
    cls, context = revive(stored)  # before taking it: a class that is gone changes nothing
    epoch = _take(
        executions, stored, Status.ROLLING_BACK, UNDOABLE, "undone",
        correlation=_index(context), once="undone",
    )  # fmt: skip
    context = _taken(executions, stored.id, context)
    run = Run(cls.__py_reactor_name__, context, get_config().middleware)
    with running(context):
        release_ledger(cls, context)  # an aborted run's failed step may still hold its keys
        plan = cls.__py_reactor_plan__
        undo_completed(run, {name: step.declaration for name, step in plan.items()})
    context.status = Status.CANCELLED
    context.trace.append(_entry(TraceKind.UNDONE, failures=len(run.rollback_failures)))
    outcome = CancelledResult(context, reason="undone", rollback_failures=run.rollback_failures)
    _write(executions, stored.id, epoch, context, outcome)
    return _found(executions, stored.id)


def retry(execution_id: str, transport: Transport) -> Outcome:
    """Start a new run of ``execution_id``'s reactor with its inputs; the new run's outcome
    (a ``DispatchedResult`` for a ``@background`` reactor). The new context's
    ``retry_of`` and the old record's ``retried_by`` link the two.

    Raises:
        LookupError: the store does not know ``execution_id``, or its class cannot be imported.
        ExecutionStateError: it has not ended yet.
    """
    executions, stored = _load(execution_id)
    if stored.status not in RETRYABLE:
        raise _refusal(stored, "retried", RETRYABLE)
    cls, context = revive(stored)
    handoff = getattr(cls, "__py_reactor_handoff__", None)
    outcome = start(cls, context.inputs, transport=transport, handoff=handoff, retry_of=stored.id)
    executions.annotate(stored.id, retried_by=outcome.execution_id)
    return outcome


def _load(execution_id: str) -> tuple[ExecutionStore, StoredExecution]:
    executions = stored_executions()
    stored = executions.load(execution_id)
    if stored is None:
        raise LookupError(f"no execution {execution_id!r} is stored")
    return executions, stored


def _take(
    executions: ExecutionStore,
    stored: StoredExecution,
    status: Status,
    allowed: tuple[Status, ...],
    verb: str,
    *,
    correlation: tuple[str, str] | None = None,
    once: str = "",
) -> int:
    epoch, previous = executions.take(
        stored.id, status, allowed, correlation=correlation, once=once
    )
    if epoch == -1:
        raise LookupError(f"no execution {stored.id!r} is stored")
    if epoch == 0:
        raise _refusal(stored, verb, allowed, previous)
    return epoch


def _taken(executions: ExecutionStore, execution_id: str, context: Context) -> Context:
    """The context as stored when the take succeeded: a worker may have run the execution
    further between the first load and the take (the take stops that, not what came before).
    ``context`` (the first load's) if it cannot be read now."""
    stored = executions.load(execution_id)
    if stored is None:  # pragma: no cover - it was just taken
        return context
    try:
        return loads_context(stored.context)
    except SerializationError:
        return context


def _index(context: Context) -> tuple[str, str] | None:
    """``(reactor, correlation id)`` a run paused at an interrupt holds (None when none)."""
    info = context.interrupts.get(context.paused_at or "")
    correlation = info.correlation_id if info is not None else None
    return None if correlation is None else (context.reactor, str(correlation))


def _refusal(
    stored: StoredExecution, verb: str, allowed: tuple[Status, ...], status: str | None = None
) -> ExecutionStateError:
    now = status or stored.status
    reactor = stored.reactor.rpartition(":")[2]
    hints: dict[str, str] = {  # by the stored status (a plain string, equal to its Status)
        Status.RUNNING: "wait until it parks or ends (find(id).status)",
        Status.WAITING: "cancel it first",
        Status.PENDING: "cancel it first",
        Status.CANCELLED: "it was undone already" if verb == "undone" else "it was stopped already",
    }
    hint = hints.get(now, f"only a run that is {', '.join(allowed)} can be {verb}")
    return ExecutionStateError(
        f"execution {stored.id} of {reactor} is {now}, so it cannot be {verb}: {hint}",
        status=now,
        reactor=reactor,
    )


def _write(
    executions: ExecutionStore,
    execution_id: str,
    epoch: int,
    context: Any,
    outcome: CancelledResult,
) -> None:
    executions.checkpoint(
        execution_id,
        epoch,
        dumps_context(context),
        Status.CANCELLED,
        outcome=outcome_to_dict(outcome),
    )


def _found(executions: ExecutionStore, execution_id: str) -> Execution:
    stored = executions.load(execution_id)
    if stored is None:  # pragma: no cover - it was just written
        raise LookupError(f"no execution {execution_id!r} is stored")
    return snapshot(stored)


def _entry(kind: TraceKind, **details: Any) -> dict[str, Any]:
    now = time.time()
    return {"type": kind, "step": None, "started_at": now, "finished_at": now, **details}
