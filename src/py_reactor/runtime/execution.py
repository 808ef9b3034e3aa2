"""What a stored execution looks like to users: ``find(id)`` and the outcome ``wait()`` rebuilds.

Both read the stored record only; neither needs the reactor class. An outcome is stored as JSON
(never pickled); its error comes back as an instance of the original exception class when that
class can be imported and built from the message (as Celery rebuilds task exceptions), else as
the message text; ``exception_class`` always names it.

A record that cannot be read (its context, outcome or trace is not what py_reactor writes, its
status is not a ``Status``) is never shown as an empty one: ``find`` sets ``Execution.problem``
to a sentence saying what is wrong, and ``wait`` raises ``CorruptRecordError`` at once instead
of waiting for an end it could not read (unless a worker is still to claim the record, which
fails it readably). An unknown id is ``ExecutionNotFoundError``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import reprlib
import time
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_jsonable_python

from py_reactor.aio import sleep
from py_reactor.engine.context import Context
from py_reactor.engine.results import (
    CancelledResult,
    FailureResult,
    HaltedResult,
    Outcome,
    SuccessResult,
)
from py_reactor.engine.serializer import loads_context
from py_reactor.errors import (
    CorruptRecordError,
    ExecutionNotFoundError,
    ReactorError,
    SerializationError,
)
from py_reactor.states import Status, TraceKind
from py_reactor.storage import executions as stored_executions
from py_reactor.storage.executions import ExecutionStore, StoredExecution

__all__ = [
    "TERMINAL",
    "Execution",
    "checked_id",
    "damaged",
    "ended",
    "find",
    "not_found",
    "outcome_from_dict",
    "outcome_to_dict",
    "problem_of",
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
        problem: None when the stored record reads well; else a sentence naming the record
            and what of it cannot be read (then what could not be read is left empty or None:
            look here before trusting an empty ``trace`` or a missing ``outcome``).
        namespace: the application it belongs to (by default its reactor module's top-level
            package): only workers serving that namespace run it.
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
    problem: str | None = None
    namespace: str = ""


def checked_id(execution_id: object, where: str) -> str:
    """``execution_id`` when it is a str: an id is never looked up as anything else.

    Raises:
        TypeError: it is not a str; the message names ``where`` (``"cancel"``) and, for an
            outcome or ``Execution`` passed by mistake, the id it carries.
    """
    if isinstance(execution_id, str):
        return execution_id
    carried = getattr(execution_id, "execution_id", None)
    hint = (
        f"; this {type(execution_id).__name__} carries one: pass its .execution_id ({carried!r})"
        if isinstance(carried, str)
        else ""
    )
    raise TypeError(
        f"{where}() takes the execution id (argument execution_id) as a str, got "
        f"{type(execution_id).__name__} {reprlib.repr(execution_id)}{hint}"
    )


def not_found(executions: ExecutionStore, execution_id: str) -> ExecutionNotFoundError:
    """The error for an id ``executions`` does not hold, naming the store it looked in."""
    store = executions.store
    description = str(getattr(store, "description", "") or repr(store))
    where = description if description.startswith("the ") else f"the Redis at {description}"
    return ExecutionNotFoundError(
        f"no execution {execution_id!r} is stored in {where}; check the id, and that "
        "configure(redis_url=...) names the store it was run on",
        execution_id=execution_id,
    )


def damaged(stored: StoredExecution, problem: str, doing: str) -> CorruptRecordError:
    """The error for a record that cannot be read, ``problem`` being :func:`problem_of`'s
    sentence and ``doing`` what could not be done (``"waited for"``, ``"undone"``)."""
    return CorruptRecordError(
        f"{problem}; so it cannot be {doing}, and waiting will not change that: fix or remove "
        "the record in the store (find(id) shows what could be read)",
        execution_id=stored.id,
        problem=problem,
        reactor=stored.reactor.rpartition(":")[2],
    )


def find(execution_id: str) -> Execution | None:
    """The stored execution ``execution_id``, or None if the store does not know it.

    A record that cannot be read comes back all the same, with ``.problem`` saying why.

    Raises:
        TypeError: ``execution_id`` is not a str.
    """
    checked_id(execution_id, "find")
    stored = stored_executions().load(execution_id)
    return None if stored is None else snapshot(stored)


def problem_of(stored: StoredExecution) -> str | None:
    """What of ``stored`` cannot be read, as one sentence naming the record; None when it
    reads well (the dashboard shows it beside the record, as ``find(id).problem``).

    The outcome is checked, not rebuilt: rebuilding imports the module its exception class
    names, and the dashboard never imports a module the store names."""
    return _read(stored, rebuild=False).problem


def snapshot(stored: StoredExecution) -> Execution:
    """An :class:`Execution` from a stored record; what cannot be read is left empty and said
    in ``problem``."""
    read = _read(stored)
    context, outcome = read.context, read.outcome
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
        problem=read.problem,
        namespace=stored.namespace,
    )


def wait(execution_id: str, *, timeout: float | None = None) -> Outcome:
    """Block until ``execution_id`` ends; its outcome, rebuilt from the store.

    A record that cannot be read is waited on only while a worker will claim it (pending,
    waiting, running), which fails it with the cause as its error; ended, paused or with an
    unknown status it is raised at once.

    Raises:
        TimeoutError: it did not end within ``timeout`` seconds.
        ExecutionNotFoundError: the store does not know ``execution_id`` (a ``LookupError``).
        CorruptRecordError: its stored record cannot be read and nothing will write it again.
        TypeError, ValueError: ``execution_id`` is not a str, ``timeout`` not a number >= 0.
    """
    checked_id(execution_id, "wait")
    _check_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.005
    executions = stored_executions()
    seen = _Seen()
    while True:
        stored, outcome = _ended(executions, execution_id, seen)
        if outcome is not None:
            return outcome
        if deadline is not None and time.monotonic() >= deadline:
            damage = "" if seen.problem is None else f" ({seen.problem}: a worker fails it)"
            raise TimeoutError(
                f"execution {execution_id} ({stored.reactor}) is still {stored.status} after "
                f"{timeout:g} s{damage}; wait longer, or look at "
                f"find({execution_id!r}).waiting_on"
            )
        sleep(pause)
        pause = min(pause * 2, 0.05)


def finish(execution_id: str, timeout: float | None) -> Outcome:
    """:func:`wait`, as the ``wait()`` of a dispatched or paused outcome calls it."""
    return wait(execution_id, timeout=timeout)


def ended(execution_id: str) -> Outcome | None:
    """The outcome of ``execution_id`` if it has ended (rebuilt from the store), else None.

    Raises:
        ExecutionNotFoundError: the store does not know ``execution_id`` (a ``LookupError``).
        CorruptRecordError: its stored record cannot be read.
    """
    checked_id(execution_id, "ended")
    return _ended(stored_executions(), execution_id, _Seen())[1]


#: Statuses whose record a worker (or the runner, or an undo) writes again: one damaged in
#: them is claimed and failed, readable, by the next worker (``runtime.drive``), so ``wait``
#: waits for that end. Damage anywhere else (an end, a pause, an unknown status) is final.
_REWRITTEN = frozenset({Status.PENDING, Status.WAITING, Status.RUNNING, Status.ROLLING_BACK})


class _Seen:
    """What a waiter read last: the context text found readable (a record polled while it
    runs is parsed again only when its context changed), and the damage a worker has yet to
    turn into a failure (told on a timeout)."""

    __slots__ = ("context", "problem")

    def __init__(self) -> None:
        self.context: str | None = None
        self.problem: str | None = None


def _ended(
    executions: ExecutionStore, execution_id: str, seen: _Seen
) -> tuple[StoredExecution, Outcome | None]:
    stored = executions.load(execution_id)
    if stored is None:
        raise not_found(executions, execution_id)
    terminal = stored.status in TERMINAL
    if stored.problem is None and not terminal and stored.context == seen.context:
        return stored, None  # read well before, nothing new to read
    read = _read(stored)
    seen.problem = read.problem
    if read.problem is not None:
        if stored.status in _REWRITTEN:
            seen.context = None
            return stored, None
        raise damaged(stored, read.problem, "waited for")
    seen.context = stored.context
    return stored, read.outcome if terminal else None


def _check_timeout(timeout: object) -> None:
    """A wait's ``timeout``: None (for ever) or a finite number of seconds >= 0."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"wait() takes timeout as seconds (a number) or None, got {type(timeout).__name__}"
        )
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"wait() takes timeout >= 0 seconds (or None), got {timeout!r}")


class _Read:
    """What one record reads as: its context and outcome (None when absent or unreadable) and
    the sentence saying what could not be read (None when all of it reads)."""

    __slots__ = ("context", "outcome", "problem")

    def __init__(self, context: Context | None, outcome: Outcome | None, problem: str | None):
        self.context = context
        self.outcome = outcome
        self.problem = problem


def _read(stored: StoredExecution, *, rebuild: bool = True) -> _Read:
    """``stored`` read; ``rebuild``: rebuild its outcome too (importing the module its
    exception class names, to raise that class again), else only check the outcome's shape."""
    problems = [stored.problem] if stored.problem else []
    context = None
    if stored.context:  # an empty one is the store's problem already
        try:
            context = loads_context(stored.context)
        except SerializationError as exc:
            problems.append(f"its context cannot be read ({exc})")
    if context is not None:
        problems += _trace_problems(context, "its trace")
    outcome = None
    if stored.outcome is not None:
        wrong = _outcome_problem(stored.outcome, "its outcome")
        if wrong is not None:
            problems.append(wrong)
        elif context is not None and rebuild:
            try:
                outcome = outcome_from_dict(stored.outcome, context)
            except (TypeError, ValueError, AttributeError, KeyError) as exc:  # pragma: no cover
                problems.append(f"its outcome cannot be rebuilt ({type(exc).__name__}: {exc})")
    elif not problems and stored.status in TERMINAL and stored.status != Status.CANCELLED:
        # (a cancel writes its outcome just after the status: "cancelled" alone is transient)
        problems.append(f"it is {stored.status} but no outcome is stored")
    return _Read(context, outcome, _sentence(stored, problems) if problems else None)


def _sentence(stored: StoredExecution, problems: list[str]) -> str:
    return (
        f"the stored record of execution {stored.id} ({stored.reactor}) cannot be read: "
        + "; ".join(problems)
    )


#: Trace kinds and ends, as strings (a stored value is compared before it is trusted).
_TRACE_KINDS = frozenset(kind.value for kind in TraceKind)
_ENDS = frozenset(status.value for status in TERMINAL)
#: Fields of a stored outcome and the JSON kinds each may hold (None is always allowed). A
#: halt's ``reason`` is not among them: it is the user's value, stored as given.
_OUTCOME_FIELDS: dict[str, tuple[type, ...]] = {
    "error": (str,),
    "exception_class": (str,),
    "step_name": (str,),
    "reactor_name": (str,),
    "backtrace": (str,),
    "rollback_failures": (list,),
    "validation_errors": (list,),
    "step_arguments": (dict,),
    "error_fields": (dict,),
    "child": (dict,),
    "attempts": (int,),
    "retryable": (bool,),
}


def _outcome_problem(data: dict[str, Any], what: str) -> str | None:
    """What makes ``data`` no outcome :func:`outcome_to_dict` writes; None when it is one."""
    status = data.get("status")
    if not isinstance(status, str) or status not in _ENDS:
        return (
            f"{what} has status {reprlib.repr(status)}, not an end py_reactor writes "
            f"({', '.join(sorted(_ENDS))})"
        )
    for name, kinds in _OUTCOME_FIELDS.items():
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return f"{what}'s {name} is {reprlib.repr(value)}, not a {kinds[0].__name__}"
    child = data.get("child")
    return None if child is None else _outcome_problem(child, f"{what}'s child")


def _trace_problems(context: Context, what: str) -> list[str]:
    """What of ``context``'s trace (and its children's) is no trace entry py_reactor writes."""
    problems: list[str] = []
    for number, entry in enumerate(context.trace, start=1):
        kind = entry.get("type")
        if not isinstance(kind, str) or kind not in _TRACE_KINDS:
            problems.append(
                f"{what} entry {number} has type {reprlib.repr(kind)}, not a trace kind "
                "py_reactor writes"
            )
            continue
        step = entry.get("step")
        if step is not None and not isinstance(step, str):
            problems.append(f"{what} entry {number} names step {reprlib.repr(step)}, not text")
        for field in ("started_at", "finished_at"):
            value = entry.get(field)
            if value is not None and not _finite(value):
                problems.append(f"{what} entry {number} has {field} {reprlib.repr(value)}")
    for name, child in context.children.items():
        problems += _trace_problems(child, f"the trace of its child {name!r}")
    return problems


def _finite(value: object) -> bool:
    """A time as stored: a number (not a boolean), not NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
