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

An unknown id is ``ExecutionNotFoundError`` (a ``LookupError``), a non-str id a ``TypeError``.
A record whose status is not a ``Status`` is ``CorruptRecordError`` for all three; one whose
context cannot be read too for ``undo`` and ``retry`` (they need it), while ``cancel`` stops
it all the same (the way to take a damaged run out of the workers' hands).
"""

from __future__ import annotations

import time
from typing import Any

from py_reactor.config import get_config
from py_reactor.dsl.reactor import Reactor
from py_reactor.engine.compensation import undo_completed
from py_reactor.engine.context import Context, running
from py_reactor.engine.release import release_ledger
from py_reactor.engine.results import CancelledResult, Outcome
from py_reactor.engine.run import Run
from py_reactor.engine.serializer import dumps_context, loads_context
from py_reactor.errors import ExecutionStateError, ReactorError, SerializationError
from py_reactor.runtime.drive import revive, start
from py_reactor.runtime.execution import (
    Execution,
    checked_id,
    damaged,
    not_found,
    outcome_to_dict,
    problem_of,
    snapshot,
)
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
#: Every status a stored record may hold.
STATUSES = frozenset(Status)
#: What ``retry`` accepts: a run that has ended, whichever way.
RETRYABLE = (Status.COMPLETED, Status.HALTED, Status.FAILED, Status.ABORTED, Status.CANCELLED)


def cancel(
    execution_id: str, reason: str | None = None, *, import_reactor: bool = True
) -> Execution:
    """Stop ``execution_id`` without rollback: status ``"cancelled"``, holds given back,
    results kept (``undo`` may follow).

    Its holds are given back through its reactor's declarations, the class imported if need
    be; with ``import_reactor=False`` (the dashboard) only a class this process imported
    already is used, and without one its holds lapse by their ttl.

    Raises:
        ExecutionNotFoundError: the store does not know ``execution_id`` (a ``LookupError``).
        ExecutionStateError: it is running (cancel it once it parks or ends), or has ended
            well or been cancelled already.
        CorruptRecordError: its stored status is not one py_reactor writes.
        TypeError: ``execution_id`` is not a str.
    """
    executions, stored = _load(execution_id, "cancel", "cancelled")
    cls: type[Reactor] | None = None
    first: Context | None
    try:
        cls, first = revive(stored, importing=import_reactor)
    except (LookupError, ReactorError):  # cancelled all the same; its holds lapse by their ttl
        first = _readable(stored.context)
    correlation = None if first is None else _index(first)
    epoch = _take(
        executions, stored, Status.CANCELLED, CANCELLABLE, "cancelled", correlation=correlation
    )
    text, context = _taken(executions, stored, first)
    why = reason or "cancelled"
    if context is None:  # a damaged context is kept as it is, for people to see (.problem)
        blank = Context(reactor=stored.reactor, inputs={}, execution_id=stored.id)
        _write(executions, stored.id, epoch, text, CancelledResult(blank, reason=why))
        return _found(executions, stored.id)
    if cls is not None:
        release_ledger(cls, context)
    context.status = Status.CANCELLED
    context.trace.append(_entry(TraceKind.CANCELLED, reason=why))
    outcome = CancelledResult(context, reason=why)
    _write(executions, stored.id, epoch, dumps_context(context), outcome)
    return _found(executions, stored.id)


def undo(execution_id: str) -> Execution:
    """Roll ``execution_id`` back (its completed steps undone, newest first, under their
    locks and semaphores as a rollback does; what it still holds given back, which wakes the
    executions parked on it), then mark it ``"cancelled"``.

    What could not be undone is in the outcome's ``rollback_failures`` (``find(id).outcome``).

    Raises:
        ExecutionNotFoundError: the store does not know ``execution_id`` (a ``LookupError``).
        ExecutionStateError: it is running, or was undone already.
        CorruptRecordError: its stored record cannot be read (status or context).
        ReactorNotImportableError: its reactor class cannot be imported here (a LookupError).
        TypeError: ``execution_id`` is not a str.
    """
    executions, stored = _load(execution_id, "undo", "undone")
    cls, context = _revive(stored, "undone")  # before the take: a class gone changes nothing
    epoch = _take(
        executions, stored, Status.ROLLING_BACK, UNDOABLE, "undone",
        correlation=_index(context), once="undone",
    )  # fmt: skip
    context = _taken(executions, stored, context)[1] or context
    run = Run(cls.__py_reactor_name__, context, get_config().middleware)
    with running(context):
        release_ledger(cls, context)  # an aborted run's failed step may still hold its keys
        plan = cls.__py_reactor_plan__
        undo_completed(run, {name: step.declaration for name, step in plan.items()})
    context.status = Status.CANCELLED
    context.trace.append(_entry(TraceKind.UNDONE, failures=len(run.rollback_failures)))
    outcome = CancelledResult(context, reason="undone", rollback_failures=run.rollback_failures)
    _write(executions, stored.id, epoch, dumps_context(context), outcome)
    return _found(executions, stored.id)


def retry(execution_id: str, transport: Transport) -> Outcome:
    """Start a new run of ``execution_id``'s reactor with its inputs; the new run's outcome
    (a ``DispatchedResult`` for a ``@background`` reactor). The new context's
    ``retry_of`` and the old record's ``retried_by`` link the two.

    Raises:
        ExecutionNotFoundError: the store does not know ``execution_id`` (a ``LookupError``).
        ExecutionStateError: it has not ended yet.
        CorruptRecordError: its stored record cannot be read (status or context).
        ReactorNotImportableError: its reactor class cannot be imported here (a LookupError).
        TypeError: ``execution_id`` is not a str.
    """
    executions, stored = _load(execution_id, "retry", "retried")
    if stored.status not in RETRYABLE:
        raise _refusal(stored, "retried", RETRYABLE)
    cls, context = _revive(stored, "retried")
    handoff = getattr(cls, "__py_reactor_handoff__", None)
    outcome = start(cls, context.inputs, transport=transport, handoff=handoff, retry_of=stored.id)
    executions.annotate(stored.id, retried_by=outcome.execution_id)
    return outcome


def _load(execution_id: str, where: str, verb: str) -> tuple[ExecutionStore, StoredExecution]:
    """The stored record of ``execution_id``, for operation ``where`` (``"undo"``), whose
    status is one py_reactor writes (no operation applies to another)."""
    checked_id(execution_id, where)
    executions = stored_executions()
    stored = executions.load(execution_id)
    if stored is None:
        raise not_found(executions, execution_id)
    if stored.status not in STATUSES:
        raise damaged(stored, problem_of(stored) or f"its status is {stored.status!r}", verb)
    return executions, stored


def _revive(stored: StoredExecution, verb: str) -> tuple[type[Reactor], Context]:
    """``revive``, with a context that cannot be read reported as the record's damage."""
    try:
        return revive(stored)
    except SerializationError:
        raise damaged(stored, problem_of(stored) or "its context cannot be read", verb) from None


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
    if epoch == -1:  # removed since it was loaded
        raise not_found(executions, stored.id)
    if epoch == 0:
        raise _refusal(stored, verb, allowed, previous)
    return epoch


def _taken(
    executions: ExecutionStore, stored: StoredExecution, first: Context | None
) -> tuple[str, Context | None]:
    """The context as stored when the take succeeded, as text and read: a worker may have run
    the execution further between the first load and the take (the take stops that, not what
    came before). ``first`` (the first load's) if it cannot be read now; None if neither
    could be read."""
    now = executions.load(stored.id)
    text = stored.context if now is None else now.context
    return text, _readable(text) or first


def _readable(text: str) -> Context | None:
    """The context ``text`` holds, or None when it cannot be read."""
    try:
        return loads_context(text)
    except SerializationError:
        return None


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
    text: str,
    outcome: CancelledResult,
) -> None:
    executions.checkpoint(
        execution_id, epoch, text, Status.CANCELLED, outcome=outcome_to_dict(outcome)
    )


def _found(executions: ExecutionStore, execution_id: str) -> Execution:
    stored = executions.load(execution_id)
    if stored is None:  # pragma: no cover - it was just written
        raise not_found(executions, execution_id)
    return snapshot(stored)


def _entry(kind: TraceKind, **details: Any) -> dict[str, Any]:
    now = time.time()
    return {"type": kind, "step": None, "started_at": now, "finished_at": now, **details}
