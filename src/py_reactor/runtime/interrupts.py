"""Paused executions: store a run that paused at an interrupt, and resume it with a payload.

A paused run is a stored record with status ``"paused"`` (whoever ran it: the caller creates
the record, a worker writes it under its epoch). Its correlation id, if the interrupt names one,
finds it (``ExecutionStore.paused_by``), unique per reactor while it is paused. A timeout puts
it in the due set at its deadline; the claim script lets a worker take a paused run only once
that time has come, and the run then fails its interrupt step.

``resume`` validates the payload first (a bad one changes nothing), then takes the run out of
``paused`` with the same compare-and-set as the operations (a second resume finds it taken and
is refused), and runs it on: in this process (``resume="inline"``) or in a worker
(``"background"``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import pydantic

from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.interrupt import options_of
from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.registry import class_path
from py_reactor.engine.context import Context
from py_reactor.engine.results import DispatchedResult, Outcome
from py_reactor.engine.serializer import dumps_context
from py_reactor.engine.waiter import BLOCKING
from py_reactor.errors import InputValidationError, ResumeError, SerializationError
from py_reactor.runtime.drive import drive, revive
from py_reactor.runtime.execution import checked_id, damaged, finish, not_found, problem_of
from py_reactor.runtime.journal import StoredJournal
from py_reactor.runtime.transport import Transport
from py_reactor.states import Status
from py_reactor.storage import executions as stored_executions
from py_reactor.storage.executions import ExecutionStore, StoredExecution

__all__ = ["resume"]

#: Every status a stored record may hold.
_STATUSES = frozenset(Status)


def resume(
    execution_id: str | None = None,
    payload: Any = None,
    *,
    correlation_id: str | None = None,
    reactor: type[Reactor] | None = None,
    mode: str | None = None,
    transport: Transport,
) -> Outcome:
    """Resume the run paused at an interrupt, with ``payload``.

    ``mode``: ``"inline"`` or ``"background"`` instead of what the interrupt declares (the
    dashboard always hands the run to a worker: a web request does not run workflows).

    Find it by ``execution_id``, or by ``correlation_id`` (then ``reactor`` is required: a
    correlation id is unique per reactor). The payload is validated against the interrupt's
    model first: a bad one raises and the run stays paused. With ``resume="inline"`` the rest
    of the run happens here and its outcome is returned (another pause included); with
    ``"background"`` it goes on in a worker and a ``DispatchedResult`` is returned.

    Raises:
        ExecutionNotFoundError: no execution ``execution_id`` is stored (a ``LookupError``).
        ResumeError: no run paused with ``correlation_id``, the run is not paused at an
            interrupt (resumed already, cancelled, timed out), or it is a run of another
            reactor than ``reactor``.
        CorruptRecordError: its stored record cannot be read (status or context).
        InputValidationError: the payload does not fit the interrupt's model.
        TypeError: neither or both of ``execution_id`` and ``correlation_id``, or an id that
            is not a str.
        ReactorNotImportableError: the run's reactor class cannot be imported in this process
            (a ``LookupError``).
    """
    if (execution_id is None) == (correlation_id is None):
        raise TypeError(
            "resume() takes the execution id (resume(execution_id, payload)) or a correlation "
            "id (resume(correlation_id=..., payload=...)), one of the two"
        )
    executions = stored_executions()
    name = "" if reactor is None else reactor.__qualname__
    if execution_id is None:
        if reactor is None:
            raise TypeError(
                "resume(correlation_id=...) needs the reactor: a correlation id is unique per "
                "reactor; call it on the class (Refund.resume(correlation_id=..., payload=...))"
            )
        execution_id = executions.paused_by(class_path(reactor), str(correlation_id))
        if execution_id is None:
            raise ResumeError(
                f"no run of {name} is paused with correlation id {correlation_id!r} (never "
                "paused, or resumed, cancelled or timed out since)",
                reactor=name,
            )
    stored = _paused(executions, execution_id, reactor)
    try:
        cls, context = revive(stored)
    except SerializationError:
        why = problem_of(stored) or "its context cannot be read"
        raise damaged(stored, why, "resumed") from None
    path = str(context.paused_at or (stored.waiting_on or {}).get("step") or "")
    decl = _interrupt_at(cls, path)
    value = _validated(decl, payload, cls, path)
    info = context.interrupts.get(path)
    deadline = info.deadline if info is not None else None
    if deadline is not None and time.time() >= float(deadline):
        executions.due_now(stored.id)  # its timeout lapsed: a worker fails the step now
        transport.serve_here()
        raise _refusal(stored, "timed out: its interrupt step fails (a worker is on it)")
    where = mode or options_of(decl).resume
    status = Status.RUNNING if where == "inline" else Status.PENDING
    correlation = info.correlation_id if info is not None else None
    index = None if correlation is None else (stored.reactor, str(correlation))
    epoch, previous = executions.take(stored.id, status, (Status.PAUSED,), correlation=index)
    if epoch <= 0:
        raise _refusal(
            stored, "resumed already" if previous != Status.PAUSED else previous, previous
        )
    context.resumed[path] = value
    context.paused_at = None
    if where == "background":
        if not executions.checkpoint(stored.id, epoch, dumps_context(context), Status.PENDING):
            raise _refusal(stored, "taken by another resume meanwhile")
        executions.due_now(stored.id)
        transport.serve_here()
        return DispatchedResult(context, finish=finish)
    return _run_here(executions, cls, context, epoch, transport)


def _run_here(
    executions: ExecutionStore,
    cls: type[Reactor],
    context: Context,
    epoch: int,
    transport: Transport,
) -> Outcome:
    """Run the resumed execution on in this process (blocking where a worker would park), and
    store how it ended or paused again: Ctrl-C in a step stores it aborted and re-raises."""
    journal = StoredJournal(executions, epoch)
    outcome, _ = drive(cls, context, waiter=BLOCKING, journal=journal, transport=transport)
    assert outcome is not None  # in the caller, a store outage raises instead
    return outcome


def _paused(
    executions: ExecutionStore, execution_id: str, reactor: type[Reactor] | None
) -> StoredExecution:
    checked_id(execution_id, "resume")
    stored = executions.load(execution_id)
    if stored is None:
        raise not_found(executions, execution_id)
    if reactor is not None and reactor is not Reactor and stored.reactor != class_path(reactor):
        raise ResumeError(
            f"execution {execution_id} is a run of {stored.reactor}, not of "
            f"{class_path(reactor)}; resume it through its own class (or "
            "py_reactor.workers.resume(execution_id, payload))",
            status=stored.status,
            execution_id=execution_id,
            reactor=reactor.__qualname__,
        )
    if stored.status not in _STATUSES:
        raise damaged(stored, problem_of(stored) or f"its status is {stored.status!r}", "resumed")
    if stored.status != Status.PAUSED:
        raise _refusal(stored, stored.status)
    return stored


def _refusal(stored: StoredExecution, why: str, status: str | None = None) -> ResumeError:
    now = status or stored.status
    reactor = stored.reactor.rpartition(":")[2]
    hints: dict[str, str] = {  # by the stored status (a plain string, equal to its Status)
        Status.RUNNING: "it was resumed already and is running",
        Status.PENDING: "it was resumed already and waits for a worker",
        Status.WAITING: "it was resumed already and is parked on a busy key",
        Status.COMPLETED: "it was resumed already and has completed",
        Status.FAILED: "it has failed (a timeout of its interrupt, or after a resume)",
        Status.CANCELLED: "it was cancelled",
    }
    hint = hints.get(now, f"it is {now}")
    return ResumeError(
        f"execution {stored.id} of {reactor} cannot be resumed: {why if why != now else hint}; "
        "only a run paused at an interrupt can be (find(id).status says where it is)",
        status=now,
        execution_id=stored.id,
        reactor=reactor,
    )


def _interrupt_at(cls: type[Reactor], path: str) -> StepDeclaration:
    """The interrupt declaration at the dotted ``path`` from ``cls`` (through composed
    children and map elements: ``"child.review"``, ``"items[3].review"``).

    Raises:
        ResumeError: nothing pauses there (the class changed since the run paused).
    """
    owner: type[Reactor] = cls
    parts = path.split(".") if path else []
    for i, part in enumerate(parts):
        step = part.split("[", 1)[0]
        plan = owner.__py_reactor_plan__.get(step)
        if plan is None:
            break
        decl = plan.declaration
        if i == len(parts) - 1:
            if decl.kind is StepKind.INTERRUPT:
                return decl
            break
        if decl.kind not in (StepKind.REACTOR, StepKind.MAP):
            break
        owner = decl.target
    raise ResumeError(
        f"{cls.__qualname__} has no interrupt step at {path!r}, where the stored run paused "
        "(was the reactor changed since?)",
        reactor=cls.__qualname__,
    )


def _validated(decl: StepDeclaration, payload: Any, cls: type[Reactor], path: str) -> Any:
    """The payload as the interrupt's result: validated by its model, as a JSON object.

    Raises:
        InputValidationError: it does not fit (nothing was changed).
    """
    model = options_of(decl).payload
    where = f"{cls.__qualname__}, interrupt {path!r}"
    if model is None:
        if not isinstance(payload, Mapping):
            raise InputValidationError(
                f"invalid resume payload for {where}: expected a JSON object (a mapping), got "
                f"{type(payload).__name__}",
                errors=[{"field": None, "message": "expected a mapping", "type": "dict_type"}],
                reactor=cls.__qualname__,
                step=path,
            )
        try:
            return json.loads(json.dumps(dict(payload)))
        except (TypeError, ValueError) as exc:
            raise InputValidationError(
                f"invalid resume payload for {where}: it is not JSON ({exc})",
                errors=[{"field": None, "message": str(exc), "type": "json"}],
                reactor=cls.__qualname__,
                step=path,
            ) from None
    try:
        instance = payload if isinstance(payload, model) else model.model_validate(payload)
    except pydantic.ValidationError as exc:
        errors = [
            {
                "field": ".".join(str(p) for p in error["loc"]) or None,
                "message": error["msg"],
                "type": error["type"],
            }
            for error in exc.errors()
        ]
        listed = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        raise InputValidationError(
            f"invalid resume payload for {where} ({model.__qualname__}): {listed}",
            errors=errors,
            reactor=cls.__qualname__,
            step=path,
        ) from None
    dumped: dict[str, Any] = instance.model_dump(mode="json")
    return dumped
