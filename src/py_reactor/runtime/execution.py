"""What a stored execution looks like to users: ``find(id)`` and the outcome ``wait()`` rebuilds.

Both read the stored record only; neither needs the reactor class. An outcome is stored as JSON
(never pickled); its error comes back as an instance of the original exception class when that
class can be imported and built from the message (as Celery rebuilds task exceptions), else as
the message text; ``exception_class`` always names it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import time
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_jsonable_python

from py_reactor.engine.context import Context
from py_reactor.engine.results import (
    CancelledResult,
    FailureResult,
    HaltedResult,
    Outcome,
    SuccessResult,
)
from py_reactor.engine.serializer import loads_context
from py_reactor.errors import ReactorError, SerializationError
from py_reactor.states import Status
from py_reactor.storage import executions as stored_executions
from py_reactor.storage.executions import ExecutionStore, StoredExecution

__all__ = [
    "TERMINAL",
    "Execution",
    "ended",
    "find",
    "outcome_from_dict",
    "outcome_to_dict",
    "wait",
]

#: Statuses an execution never leaves.
TERMINAL = frozenset(
    {Status.COMPLETED, Status.FAILED, Status.HALTED, Status.ABORTED, Status.CANCELLED}
)


@dataclass(frozen=True, slots=True)
class Execution:
    """A snapshot of one stored execution.

    Attributes:
        execution_id: its id; ``reactor`` its class as ``module:qualname``.
        status: ``"pending"``, ``"running"``, ``"waiting"``, ``"paused"`` (at an interrupt),
            ``"completed"``, ``"failed"``, ``"halted"``, ``"aborted"`` or ``"cancelled"``.
        inputs, results, trace: as in its context (empty when the record cannot be read).
        holds: what it holds now, one mapping per hold record (primitive, key, step, ...).
        waiting_on: while parked, ``{"step", "primitive", "key", "attempt", "until"}``.
        outcome: the terminal outcome (rebuilt), None until it ended.
        parks: how many times it parked on contention, in all (the cap counts per step).
        created_at, updated_at: server-clock seconds.
        retry_of: the execution this one retries (``Reactor.retry``), else None.
        retried_by: the execution that retried this one, else None.
    """

    execution_id: str
    reactor: str
    status: str
    inputs: dict[str, Any]
    results: dict[str, Any]
    trace: list[dict[str, Any]]
    holds: list[dict[str, Any]]
    waiting_on: dict[str, Any] | None
    outcome: Outcome | None
    parks: int
    created_at: float
    updated_at: float
    retry_of: str | None = None
    retried_by: str | None = None


def find(execution_id: str) -> Execution | None:
    """The stored execution ``execution_id``, or None if the store does not know it."""
    stored = stored_executions().load(execution_id)
    return None if stored is None else snapshot(stored)


def snapshot(stored: StoredExecution) -> Execution:
    """An :class:`Execution` from a stored record (tolerating a context that does not parse)."""
    context = _context(stored)
    outcome = None
    if stored.outcome is not None and context is not None:
        outcome = outcome_from_dict(stored.outcome, context)
    return Execution(
        execution_id=stored.id,
        reactor=stored.reactor,
        status=stored.status,
        inputs=dict(context.inputs) if context else {},
        results=dict(context.results) if context else {},
        trace=list(context.trace) if context else [],
        holds=context.holds.to_list() if context else [],
        waiting_on=stored.waiting_on,
        outcome=outcome,
        parks=stored.parks,
        created_at=stored.created_at,
        updated_at=stored.updated_at,
        retry_of=(context.retry_of if context else None),
        retried_by=stored.retried_by,
    )


def wait(execution_id: str, *, timeout: float | None = None) -> Outcome:
    """Block until ``execution_id`` ends; its outcome, rebuilt from the store.

    Raises:
        TimeoutError: it did not end within ``timeout`` seconds.
        LookupError: the store does not know ``execution_id``.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.005
    executions = stored_executions()
    while True:
        stored, outcome = _ended(executions, execution_id)
        if outcome is not None:
            return outcome
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(
                f"execution {execution_id} ({stored.reactor}) is still {stored.status} after "
                f"{timeout:g} s; wait longer, or look at find({execution_id!r}).waiting_on"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def finish(execution_id: str, timeout: float | None) -> Outcome:
    """:func:`wait`, as the ``wait()`` of a dispatched or paused outcome calls it."""
    return wait(execution_id, timeout=timeout)


def ended(execution_id: str) -> Outcome | None:
    """The outcome of ``execution_id`` if it has ended (rebuilt from the store), else None.

    Raises:
        LookupError: the store does not know ``execution_id``.
    """
    return _ended(stored_executions(), execution_id)[1]


def _ended(executions: ExecutionStore, execution_id: str) -> tuple[StoredExecution, Outcome | None]:
    stored = executions.load(execution_id)
    if stored is None:
        raise LookupError(f"no execution {execution_id!r} is stored")
    if stored.status not in TERMINAL or stored.outcome is None:
        return stored, None
    context = _context(stored)
    if context is None:
        context = Context(reactor=stored.reactor, inputs={}, execution_id=stored.id)
    return stored, outcome_from_dict(stored.outcome, context)


def outcome_to_dict(outcome: Outcome) -> dict[str, Any]:
    """The JSON-ready form of a terminal outcome."""
    data: dict[str, Any] = {"status": outcome.status}
    if isinstance(outcome, SuccessResult):
        data["value"] = _jsonable(outcome.value)
    elif isinstance(outcome, HaltedResult):
        data.update(reason=outcome.reason, step_name=outcome.step_name)
    elif isinstance(outcome, CancelledResult):
        data.update(
            reason=outcome.reason,
            rollback_failures=_jsonable(outcome.rollback_failures),
            error=str(outcome.error),
        )
    elif isinstance(outcome, FailureResult):
        error = outcome.error
        data.update(
            error=str(error),
            error_fields=_error_fields(error),
            exception_class=outcome.exception_class,
            step_name=outcome.step_name,
            reactor_name=outcome.reactor_name,
            retryable=outcome.retryable,
            rollback_failures=_jsonable(outcome.rollback_failures),
            validation_errors=_jsonable(outcome.validation_errors),
            attempts=outcome.attempts,
            backtrace=outcome.backtrace,
            step_arguments=_jsonable(outcome.step_arguments),
        )
        if isinstance(outcome.child, FailureResult):
            data["child"] = outcome_to_dict(outcome.child)
    return data


def outcome_from_dict(data: dict[str, Any], context: Context) -> Outcome:
    """Rebuild the outcome :func:`outcome_to_dict` stored, around ``context``."""
    status = data.get("status")
    if status == Status.COMPLETED:
        return SuccessResult(context, data.get("value"))
    if status == Status.HALTED:
        return HaltedResult(
            context, reason=str(data.get("reason")), step_name=data.get("step_name")
        )
    if status == Status.CANCELLED:
        return CancelledResult(
            context,
            reason=str(data.get("reason") or "cancelled"),
            rollback_failures=list(data.get("rollback_failures") or []),
        )
    return FailureResult(
        context,
        error=_error(
            data.get("exception_class"), str(data.get("error", "")), data.get("error_fields")
        ),
        step_name=data.get("step_name"),
        reactor_name=str(data.get("reactor_name") or context.reactor.rpartition(":")[2]),
        exception_class=data.get("exception_class"),
        step_arguments=data.get("step_arguments"),
        inputs=context.inputs,
        retryable=bool(data.get("retryable", False)),
        rollback_failures=list(data.get("rollback_failures") or []),
        validation_errors=list(data.get("validation_errors") or []),
        backtrace=data.get("backtrace"),
        attempts=int(data.get("attempts") or 0),
        child=_child(data, context),
    )


def _child(data: dict[str, Any], context: Context) -> FailureResult | None:
    """The stored failure of the child (composed or async) that failed the run, if any."""
    child = data.get("child")
    if not isinstance(child, dict):
        return None
    step = data.get("step_name")
    inner = context.children.get(step) if isinstance(step, str) else None
    if inner is None:
        inner = Context(reactor=context.reactor, inputs={}, execution_id=context.execution_id)
    rebuilt = outcome_from_dict(child, inner)
    return rebuilt if isinstance(rebuilt, FailureResult) else None


def _error_fields(error: Any) -> dict[str, Any]:
    """What a py_reactor error carries besides its message (``primitive``, ``key``,
    ``reactor``, ``step``, ``retry_after``, ``errors``, ...), JSON-safe, so that the rebuilt
    error is the one the run raised, not only its text."""
    if not isinstance(error, ReactorError):
        return {}
    fields = {
        name: value
        for name, value in vars(error).items()
        if not name.startswith("_") and name != "message"
    }
    return dict(_jsonable(fields))


def _error(exception_class: str | None, message: str, fields: Any = None) -> Any:
    """An instance of ``exception_class`` carrying ``message`` (and, for a py_reactor error,
    the ``fields`` it was stored with), else the message text."""
    if not exception_class:
        return message
    module_name, _, name = exception_class.rpartition(".")
    known = fields if isinstance(fields, dict) else {}
    try:
        module = importlib.import_module(module_name or "builtins")
        cls = getattr(module, name)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            return message
        if not issubclass(cls, ReactorError):
            return cls(message)
        accepted = inspect.signature(cls).parameters
        given = {
            key: value
            for key, value in known.items()
            if key in accepted and accepted[key].kind is inspect.Parameter.KEYWORD_ONLY
        }
        error = cls(message, **given)
        for key, value in known.items():
            if key not in given:
                setattr(error, key, value)  # set after the constructor (a park count, ...)
        return error
    except Exception:
        return message


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(to_jsonable_python(value, fallback=repr)))


def _context(stored: StoredExecution) -> Context | None:
    try:
        return loads_context(stored.context)
    except SerializationError:
        return None
