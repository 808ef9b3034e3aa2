"""Assertions about a run: how it ended, which steps ran, retried, were skipped, parked.

Each takes what ``Reactor.run`` returned (a ``DispatchedResult`` is read from the store, so
drain the worker first), an :class:`~py_reactor.Execution` or an execution id, and raises an
``AssertionError`` that says what was expected, what was found, and shows the trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from py_reactor.engine.results import FailureResult, HaltedResult, Outcome
from py_reactor.errors import CONTENTION as CONTENTION_ERRORS
from py_reactor.states import Status, TraceKind
from py_reactor.testing._describe import (
    MISSING,
    Subject,
    Text,
    all_steps,
    describe_text,
    diff,
    entries,
    fail,
    matches,
    short,
    subject,
)

if TYPE_CHECKING:
    from py_reactor.runtime.execution import Execution

__all__ = [
    "assert_contended_at",
    "assert_failed_at",
    "assert_halted",
    "assert_parked_at",
    "assert_ran",
    "assert_retried",
    "assert_rollback_failure",
    "assert_skipped_at",
    "assert_succeeded",
    "assert_validation_error",
]

#: The rollback failure reasons a rollback records.
ROLLBACK_REASONS = ("returned_failure", "raised", "coordination_unavailable")
#: The names of the errors that mean a key was busy (not a bad key, not an unreachable store).
CONTENTION = tuple(error.__name__ for error in CONTENTION_ERRORS)


def _ended(found: Subject, helper: str) -> Outcome:
    """The terminal outcome, or a failure saying the run has not ended (drain first)."""
    __tracebackhide__ = True
    if found.outcome is not None:
        return found.outcome
    hint = (
        "; drain the worker first (reactor_worker.drain() or py_reactor.testing.drain())"
        if found.status in (Status.PENDING, Status.RUNNING, Status.WAITING)
        else ""
    )
    fail(found, f"{helper}: {found.label} has not ended: it is {found.status}{hint}")


def _failure_line(outcome: Outcome) -> str:
    if isinstance(outcome, FailureResult):
        where = f"at step {outcome.step_name!r}" if outcome.step_name else "outside any step"
        text = f"it failed {where}: {_error_text(outcome)}"
        if outcome.rollback_failures:
            text += f" ({len(outcome.rollback_failures)} rollback failure(s))"
        return text
    if isinstance(outcome, HaltedResult):
        where = f" at step {outcome.step_name!r}" if outcome.step_name else ""
        return f"it halted{where}: {outcome.reason!r}"
    return f"it ended {outcome.status!r}" + (
        f" with value {short(outcome.value)}" if outcome.is_success else ""
    )


def _error_text(outcome: FailureResult) -> str:
    error = outcome.error
    name = outcome.exception_class or (
        type(error).__qualname__ if isinstance(error, BaseException) else None
    )
    return f"{name.rpartition('.')[2]}: {error}" if name else str(error)


def assert_succeeded(outcome: object, value: Any = MISSING) -> Outcome:
    """Assert the run completed (every step ran or was skipped), and returned ``value`` if given.

    A halted run is not a success here: use :func:`assert_halted`.

    Returns:
        The terminal outcome.
    """
    __tracebackhide__ = True
    found = subject(outcome, "assert_succeeded")
    ended = _ended(found, "assert_succeeded")
    if ended.status != Status.COMPLETED:
        fail(found, f"expected {found.label} to succeed, but {_failure_line(ended)}")
    if value is not MISSING and not _equal(ended.value, value):
        fail(
            found, f"{found.label} succeeded, but returned another value", diff(value, ended.value)
        )
    return ended


def _equal(left: Any, right: Any) -> bool:
    try:
        return bool(left == right)
    except Exception:
        return False


def assert_failed_at(outcome: object, step: str | None, error: Any = MISSING) -> FailureResult:
    """Assert the run failed at ``step`` (None: outside any step: the reactor's own inputs or
    coordination), and with ``error`` if given.

    ``step`` may be dotted for a composed child's step: ``"payment.charge"``. ``error`` may be
    an exception class (the error is an instance, or was stored as one), an exception (same
    class and message), a str found in the error's text, or a compiled pattern searched in it.

    Returns:
        The failure outcome.
    """
    __tracebackhide__ = True
    found = subject(outcome, "assert_failed_at")
    ended = _ended(found, "assert_failed_at")
    if not isinstance(ended, FailureResult):
        fail(found, f"expected {found.label} to fail at step {step!r}, but {_failure_line(ended)}")
    paths = _failed_paths(ended)
    if step not in paths:
        where = "outside any step" if paths[-1] is None else f"at step {paths[-1]!r}"
        fail(
            found,
            f"expected {found.label} to fail at step {step!r}, but it failed {where}: "
            f"{_error_text(ended)}",
        )
    if error is not MISSING and not _error_matches(ended, error):
        fail(
            found,
            f"{found.label} failed at step {step!r}, but with another error",
            f"  expected: {_describe_error(error)}",
            f"  found:    {_error_text(ended)}",
        )
    return ended


def _failed_paths(outcome: FailureResult) -> list[str | None]:
    """The step that failed, then the dotted paths down composed children to the innermost:
    ``["payment", "payment.charge"]``; ``[None]`` for a failure outside any step."""
    paths: list[str | None] = [outcome.step_name]
    inner, path = outcome, outcome.step_name
    while path is not None and inner.child is not None and inner.child.step_name is not None:
        inner = inner.child
        path = f"{path}.{inner.step_name}"
        paths.append(path)
    return paths


def _error_matches(outcome: FailureResult, error: Any) -> bool:
    actual = outcome.error
    names = {outcome.exception_class or ""}
    if isinstance(actual, BaseException):
        cls = type(actual)
        names |= {cls.__qualname__, f"{cls.__module__}.{cls.__qualname__}"}
    if isinstance(error, type) and issubclass(error, BaseException):
        if isinstance(actual, error):
            return True
        return bool(names & {error.__qualname__, f"{error.__module__}.{error.__qualname__}"})
    if isinstance(error, BaseException):
        return _error_matches(outcome, type(error)) and str(actual) == str(error)
    if isinstance(error, str) or hasattr(error, "search"):
        return matches(actual, error)
    raise TypeError(
        f"error= takes an exception class, an exception, a str or a compiled pattern, "
        f"got {short(error)}"
    )


def _describe_error(error: Any) -> str:
    if isinstance(error, type):
        return f"an error of class {error.__qualname__}"
    if isinstance(error, BaseException):
        return f"{type(error).__qualname__}: {error}"
    return f"an error {describe_text(error)}"


def _names(found: Subject) -> str:
    steps = all_steps(found)
    return ", ".join(repr(s) for s in steps) if steps else "none"


def assert_ran(
    outcome_or_execution: object,
    step: str,
    *,
    after: str | Sequence[str] = MISSING,
    returning: Any = MISSING,
) -> dict[str, Any]:
    """Assert ``step`` ran to success, returning ``returning`` if given, and began only after
    every step in ``after`` had finished running.

    ``step`` may be dotted for a composed child's step (``"payment.charge"``).

    Returns:
        The step's ``"run"`` trace entry.
    """
    __tracebackhide__ = True
    found = subject(outcome_or_execution, "assert_ran")
    runs = entries(found, step, (TraceKind.RUN,))
    if not runs:
        other = entries(
            found, step, (TraceKind.FAILED, TraceKind.SKIPPED, TraceKind.RETRY, TraceKind.PARKED)
        )
        what = (
            f"its last entry is {other[-1].get('type')!r}"
            if other
            else f"the trace has no entry for it (steps in the trace: {_names(found)})"
        )
        fail(found, f"expected step {step!r} of {found.label} to have run, but {what}")
    ran = runs[-1]
    if returning is not MISSING and not _equal(ran.get("result"), returning):
        fail(
            found,
            f"step {step!r} ran, but returned another value",
            diff(returning, ran.get("result")),
        )
    if after is not MISSING:
        began = min(
            float(e.get("started_at", 0))
            for e in entries(found, step, (TraceKind.RUN, TraceKind.RETRY, TraceKind.FAILED))
        )
        for earlier in [after] if isinstance(after, str) else list(after):
            done = entries(found, earlier, (TraceKind.RUN,))
            if not done:
                fail(
                    found,
                    f"expected step {step!r} to run after {earlier!r}, but {earlier!r} never "
                    f"ran (steps in the trace: {_names(found)})",
                )
            finished = float(done[-1].get("finished_at", 0))
            if began < finished:
                fail(
                    found,
                    f"expected step {step!r} to run after {earlier!r}, but it began before "
                    f"{earlier!r} had finished",
                )
    return ran


def assert_retried(outcome_or_execution: object, step: str, times: int) -> list[dict[str, Any]]:
    """Assert ``step`` was retried exactly ``times`` times (attempts made: ``times + 1``).

    Returns:
        The step's ``"retry"`` trace entries.
    """
    __tracebackhide__ = True
    if isinstance(times, bool) or not isinstance(times, int) or times < 0:
        raise TypeError(f"assert_retried(times=...) takes a whole number >= 0, got {times!r}")
    found = subject(outcome_or_execution, "assert_retried")
    retries = entries(found, step, (TraceKind.RETRY,))
    if len(retries) != times:
        errors = "; ".join(f"attempt {e.get('attempt')}: {e.get('error')}" for e in retries)
        seen = f" ({errors})" if errors else ""
        if not retries and not entries(
            found, step, (TraceKind.RUN, TraceKind.FAILED, TraceKind.SKIPPED, TraceKind.PARKED)
        ):
            seen = f" (the trace has no entry for it; steps in the trace: {_names(found)})"
        fail(
            found,
            f"expected step {step!r} of {found.label} to be retried {times} time(s), "
            f"but it was retried {len(retries)} time(s){seen}",
        )
    return retries


def assert_validation_error(
    outcome: object, field: str, *, message: Text = MISSING, step: str | None = MISSING
) -> dict[str, Any]:
    """Assert the run failed because ``field`` was invalid (a dotted path for nested fields:
    ``"address.postcode"``), with a pydantic message containing ``message`` if given, at
    ``step`` if given (None: the reactor's own inputs).

    Returns:
        The field's error: ``{"field", "message", "type", "input"}``.
    """
    __tracebackhide__ = True
    found = subject(outcome, "assert_validation_error")
    ended = _ended(found, "assert_validation_error")
    if not isinstance(ended, FailureResult) or not ended.validation_errors:
        fail(
            found,
            f"expected {found.label} to fail validating field {field!r}, but "
            + (
                "it failed for another reason: " + _error_text(ended)
                if isinstance(ended, FailureResult)
                else _failure_line(ended)
            ),
        )
    if step is not MISSING and ended.step_name != step:
        fail(
            found,
            f"expected field {field!r} to be refused by "
            + ("the reactor's inputs" if step is None else f"step {step!r}")
            + ", but "
            + ("the reactor's inputs" if ended.step_name is None else f"step {ended.step_name!r}")
            + " refused its input",
        )
    fields = [e for e in ended.validation_errors if e.get("field") == field]
    listed = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in ended.validation_errors)
    if not fields:
        fail(
            found,
            f"expected field {field!r} of {found.label} to be invalid, but the invalid "
            f"field(s) are: {listed}",
        )
    if message is not MISSING and not any(matches(e.get("message"), message) for e in fields):
        fail(
            found,
            f"field {field!r} was invalid, but not with a message {describe_text(message)}: "
            f"{fields[0].get('message')!r}",
        )
    return fields[0]


def assert_halted(
    outcome: object, reason: Text = MISSING, *, step: str | None = MISSING
) -> HaltedResult:
    """Assert the run halted (a step returned ``Halt``, or a reactor-level period was done),
    with a reason containing ``reason`` if given, at ``step`` if given (None: the reactor's
    own coordination).

    Returns:
        The halted outcome.
    """
    __tracebackhide__ = True
    found = subject(outcome, "assert_halted")
    ended = _ended(found, "assert_halted")
    if not isinstance(ended, HaltedResult):
        fail(found, f"expected {found.label} to halt, but {_failure_line(ended)}")
    if reason is not MISSING and not matches(ended.reason, reason):
        fail(
            found,
            f"{found.label} halted, but not for a reason {describe_text(reason)}: {ended.reason!r}",
        )
    if step is not MISSING and ended.step_name != step:
        fail(
            found,
            f"expected {found.label} to halt at step {step!r}, it halted at {ended.step_name!r}",
        )
    return ended


def assert_skipped_at(
    outcome_or_execution: object, step: str, reason: Text | None = MISSING
) -> dict[str, Any]:
    """Assert ``step`` was skipped (it returned ``Skipped``, or its period was already done:
    reason ``"period"``, or a strict ordered lock short-circuited it: ``"ordered_lock"``),
    for a reason containing ``reason`` if given (None: skipped without a reason).

    Returns:
        The step's ``"skipped"`` trace entry.
    """
    __tracebackhide__ = True
    found = subject(outcome_or_execution, "assert_skipped_at")
    skips = entries(found, step, (TraceKind.SKIPPED,))
    if not skips:
        other = entries(
            found, step, (TraceKind.RUN, TraceKind.FAILED, TraceKind.RETRY, TraceKind.PARKED)
        )
        what = (
            f"its last entry is {other[-1].get('type')!r}"
            if other
            else f"the trace has no entry for it (steps in the trace: {_names(found)})"
        )
        fail(found, f"expected step {step!r} of {found.label} to be skipped, but {what}")
    skipped = skips[-1]
    said = skipped.get("reason")
    if reason is None and said is not None:
        fail(found, f"expected step {step!r} to be skipped without a reason, it says {said!r}")
    if reason is not None and reason is not MISSING and (said is None or not matches(said, reason)):
        fail(
            found,
            f"step {step!r} was skipped, but not for a reason {describe_text(reason)}: {said!r}",
        )
    return skipped


def assert_rollback_failure(
    outcome: object,
    *,
    step: str = MISSING,
    key: str | None = MISSING,
    reason: str = MISSING,
    kind: str = MISSING,
    message: Text = MISSING,
) -> dict[str, Any]:
    """Assert the run's rollback recorded a failure matching every option given.

    Args:
        step: the step whose compensate or undo failed (dotted for a composed child's).
        key: the coordination key it ran under (None: it had none).
        reason: ``"returned_failure"``, ``"raised"`` or ``"coordination_unavailable"`` (its
            lock or semaphore could not be taken again for the rollback).
        kind: ``"compensate"`` or ``"undo"``.
        message: text found in (or a pattern searched in) the failure's message.

    Returns:
        The matching rollback failure ``{step, kind, key, reason, message}``.
    """
    __tracebackhide__ = True
    if reason is not MISSING and reason not in ROLLBACK_REASONS:
        raise ValueError(
            f"assert_rollback_failure(reason=...) takes one of {', '.join(ROLLBACK_REASONS)}, "
            f"got {reason!r}; to match the failure's text use message="
        )
    found = subject(outcome, "assert_rollback_failure")
    ended = _ended(found, "assert_rollback_failure")
    failures = list(ended.rollback_failures) if isinstance(ended, FailureResult) else []
    wanted = {
        name: value
        for name, value in (("step", step), ("key", key), ("reason", reason), ("kind", kind))
        if value is not MISSING
    }
    for failure in failures:
        if all(failure.get(name) == value for name, value in wanted.items()) and (
            message is MISSING or matches(failure.get("message"), message)
        ):
            return dict(failure)
    asked = ", ".join(f"{name}={value!r}" for name, value in wanted.items())
    if message is not MISSING:
        asked += (", " if asked else "") + f"message {describe_text(message)}"
    listed = [
        f"    {f.get('kind')} of {f.get('step')!r}: key {f.get('key')!r}, reason "
        f"{f.get('reason')!r}: {f.get('message')}"
        for f in failures
    ]
    if not failures:
        head = "it recorded none" if isinstance(ended, FailureResult) else _failure_line(ended)
        fail(found, f"expected a rollback failure of {found.label} ({asked or 'any'}), but {head}")
    fail(
        found,
        f"expected a rollback failure of {found.label} with {asked}, but none matches; "
        "it recorded:",
        *listed,
    )


def assert_contended_at(
    outcome_or_execution: object,
    step: str | None,
    *,
    key: str = MISSING,
    primitive: str = MISSING,
) -> dict[str, Any]:
    """Assert ``step`` (None: the reactor's own coordination) met a busy key: it failed
    because a lock, semaphore, rate limit or ordered lock stayed busy for its ``wait`` (in
    the caller), or it parked on one (in a worker). ``key`` and ``primitive`` narrow it.

    Returns:
        ``{"step", "primitive", "key", "how"}`` of the first matching contention, ``how``
        being ``"failed"`` or ``"parked"``.
    """
    __tracebackhide__ = True
    found = subject(outcome_or_execution, "assert_contended_at")
    met = _contentions(found, step)
    matching = [
        c
        for c in met
        if (key is MISSING or c["key"] == key)
        and (primitive is MISSING or c["primitive"] == primitive)
    ]
    if matching:
        return matching[0]
    where = "the reactor's own coordination" if step is None else f"step {step!r}"
    narrowed = "".join(
        f" {name} {value!r}"
        for name, value in (("on", key), ("of primitive", primitive))
        if value is not MISSING
    )
    if met:
        seen = "; ".join(f"{c['how']} on {c['primitive']} {c['key']!r}" for c in met)
        fail(
            found,
            f"expected {where} of {found.label} to be contended{narrowed}, but it met: {seen}",
        )
    fail(
        found,
        f"expected {where} of {found.label} to be contended{narrowed}, but it met no busy key",
    )


def _contentions(found: Subject, step: str | None) -> list[dict[str, Any]]:
    met: list[dict[str, Any]] = []
    for entry in entries(found, step, (TraceKind.FAILED, TraceKind.PARKED)):
        if entry.get("type") == TraceKind.PARKED:
            if entry.get("primitive") in (None, "async_unit"):
                continue
            how = "parked"
        elif entry.get("refused_by") == "coordination" and str(entry.get("error", "")).startswith(
            tuple(f"{name}:" for name in CONTENTION)
        ):
            how = "failed"
        else:
            continue
        met.append(
            {"step": step, "primitive": entry.get("primitive"), "key": entry.get("key"), "how": how}
        )
    outcome = found.outcome
    if not met and isinstance(outcome, FailureResult) and outcome.step_name == step:
        name = (outcome.exception_class or "").rpartition(".")[2]
        if name in CONTENTION:  # a reactor-level contention leaves no step entry
            error = outcome.error
            met.append(
                {
                    "step": step,
                    "primitive": getattr(error, "primitive", None) or _primitive_of(name),
                    "key": getattr(error, "key", None),
                    "how": "failed",
                }
            )
    return met


def _primitive_of(error_name: str) -> str:
    return {
        "LockAcquisitionError": "lock",
        "SemaphoreAcquisitionError": "semaphore",
        "RateLimitExceededError": "rate_limit",
        "PeriodBusyError": "period",
        "OrderedLockWaitError": "ordered_lock",
    }[error_name]


def assert_parked_at(
    execution: object,
    step: str | None,
    *,
    key: str = MISSING,
    primitive: str = MISSING,
) -> Execution:
    """Assert the execution is parked now (status ``"waiting"``) at ``step`` (None: its
    reactor-level coordination; dotted for a composed child's step), waiting on ``key`` of
    ``primitive`` if given.

    ``execution``: a ``DispatchedResult`` or execution id (read from the store now), or an
    :class:`~py_reactor.Execution` snapshot (checked as it was taken).

    Returns:
        The execution.
    """
    __tracebackhide__ = True
    found = subject(execution, "assert_parked_at")
    if found.execution is None:
        fail(
            found,
            f"assert_parked_at: {found.label} ran in the caller, which never parks (it waits, "
            "then fails); only a run in a worker (@background) parks",
        )
    record = found.execution
    waiting = record.waiting_on or {}
    keyed = waiting.get("primitive") not in (None, "async_unit")  # not a backoff, not a unit
    parked = record.status == Status.WAITING and keyed
    where = "its reactor-level coordination" if step is None else f"step {step!r}"
    if not parked:
        now = record.status
        if record.status == Status.WAITING:
            now = (
                "waiting out a retry's backoff"
                if waiting.get("primitive") is None
                else f"waiting for async unit {waiting.get('key')}"
            )
        fail(found, f"expected {found.label} to be parked at {where}, but it is {now}")
    at = waiting.get("step")
    if at != step:
        fail(
            found,
            f"expected {found.label} to be parked at {where}, but it is parked at "
            + ("its reactor-level coordination" if at is None else f"step {at!r}"),
            f"  waiting on: {waiting}",
        )
    for name, value in (("key", key), ("primitive", primitive)):
        if value is not MISSING and waiting.get(name) != value:
            fail(
                found,
                f"{found.label} is parked at {where}, but on another {name}",
                f"  expected: {value!r}",
                f"  found:    {waiting.get(name)!r} ({waiting.get('primitive')} "
                f"{waiting.get('key')!r}, park {waiting.get('attempt')})",
            )
    return record


def assert_paused_at(execution: object, step: str) -> Execution:
    """Assert the execution is paused now (status ``"paused"``) at the interrupt ``step``: its
    stored trace ends with the ``{"type": "paused", "step": step}`` entry a pause writes.

    ``execution``: a ``DispatchedResult``/outcome or execution id (read from the store now), or
    an :class:`~py_reactor.Execution` snapshot (checked as it was taken).

    Returns:
        The execution.
    """
    __tracebackhide__ = True
    found = subject(execution, "assert_paused_at")
    record = found.execution
    if record is None:
        fail(found, f"assert_paused_at: {found.label} is not stored, so it cannot be paused")
    if record.status != Status.PAUSED:
        fail(
            found,
            f"expected {found.label} to be paused at step {step!r}, but it is {record.status}",
        )
    pauses = [e for e in record.trace if e.get("type") == TraceKind.PAUSED]
    at = pauses[-1].get("step") if pauses else None
    if at != step:
        where = "no step (its trace has no pause)" if at is None else f"step {at!r}"
        fail(
            found,
            f"expected {found.label} to be paused at step {step!r}, but it is paused at {where}",
        )
    return record
