"""Outcomes: what ``Reactor.run`` and ``Step.invoke`` return.

``SuccessResult`` and ``HaltedResult`` have ``is_success`` True; ``FailureResult`` False. Every
outcome has ``value``, ``error`` and ``context`` so callers can read them without type checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from py_reactor.aio import call
from py_reactor.engine.context import Context
from py_reactor.engine.state import RollbackFailure
from py_reactor.states import Status

#: How a dispatched or paused run's ``wait()`` reaches the store: ``(execution id, timeout)``
#: to the terminal outcome (given by the runtime that stored the run).
AwaitEnd = Callable[[str, float | None], "Outcome"]

__all__ = [
    "CancelledResult",
    "DispatchedResult",
    "FailureResult",
    "HaltedResult",
    "Outcome",
    "ParkedResult",
    "PausedResult",
    "RollbackFailure",
    "SuccessResult",
    "nested_failure",
]


def nested_failure(step: str, failure: RollbackFailure) -> RollbackFailure:
    """``failure`` of a composed child, renamed ``<step>.<child step>`` for the parent."""
    return RollbackFailure(
        step=f"{step}.{failure['step']}",
        kind=failure["kind"],
        key=failure["key"],
        reason=failure["reason"],
        message=failure["message"],
    )


class Outcome:
    """Base of every outcome."""

    __slots__ = ("context",)
    is_success: bool = False
    status: str = ""

    def __init__(self, context: Context) -> None:
        self.context = context

    @property
    def value(self) -> Any:
        """The run's value (None unless it succeeded)."""
        return None

    @property
    def error(self) -> Any:
        """The run's error (None unless it failed)."""
        return None

    @property
    def execution_id(self) -> str:
        """The id of the execution this outcome ends."""
        return self.context.execution_id

    @property
    def results(self) -> Mapping[str, Any]:
        """Every finished step's value, by step name (read-only)."""
        return MappingProxyType(self.context.results)

    @property
    def trace(self) -> list[dict[str, Any]]:
        """What happened, in order: one entry per run, skip, retry, failure, compensate, undo."""
        return self.context.trace

    def wait(self, timeout: float | None = None) -> Outcome:
        """The terminal outcome: this one (a run that ended, or failed before its hand-off);
        a ``DispatchedResult`` waits for its worker. So ``Reactor.run(...).wait()`` reads the
        same whether or not the run was dispatched."""
        return self

    async def await_outcome(self, timeout: float | None = None) -> Outcome:
        """:meth:`wait` for an event loop: awaits the end (the store is read and waited on
        with asyncio, the loop never blocks).

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        return await call(self.wait, timeout)


class SuccessResult(Outcome):
    """Every step ran (or was skipped); ``value`` is the ``returns`` step's value."""

    __slots__ = ("_value",)
    is_success = True
    status: str = Status.COMPLETED.value

    def __init__(self, context: Context, value: Any) -> None:
        super().__init__(context)
        self._value = value

    @property
    def value(self) -> Any:
        return self._value

    def __repr__(self) -> str:
        return f"<SuccessResult {_name(self.context)} value={self._value!r}>"


class HaltedResult(Outcome):
    """A step returned ``Halt``: the run stopped cleanly, keeping its progress, no rollback."""

    __slots__ = ("reason", "step_name")
    is_success = True
    status: str = Status.HALTED.value

    def __init__(self, context: Context, *, reason: str, step_name: str | None) -> None:
        super().__init__(context)
        self.reason = reason
        self.step_name = step_name

    def __repr__(self) -> str:
        return (
            f"<HaltedResult {_name(self.context)} step={self.step_name!r} reason={self.reason!r}>"
        )


class ParkedResult(Outcome):
    """The run parked in a worker (status ``"waiting"``); the worker persists and re-dispatches
    it. Users see it as an :class:`~py_reactor.workers.Execution` with ``waiting_on``."""

    __slots__ = ("parked",)
    status: str = Status.WAITING.value

    def __init__(self, context: Context, parked: Any) -> None:
        super().__init__(context)
        self.parked = parked

    def __repr__(self) -> str:
        return f"<ParkedResult {_name(self.context)} {self.parked!r}>"


class PausedResult(Outcome):
    """The run stopped at an interrupt step and is stored ``"paused"``; ``Reactor.resume``
    continues it with a payload (``Reactor.resume(out.execution_id, payload)`` or by
    ``correlation_id``). Reactor-level holds were given back; the resumed run takes them again.

    Attributes:
        step_name: the interrupt step (a dotted path for one inside a composed child).
        correlation_id: what ``resume(correlation_id=...)`` finds this run by, or None.
        deadline: wall-clock time at which its timeout fails the step, or None.
    """

    __slots__ = ("_await_end", "correlation_id", "deadline", "step_name")
    is_success = False
    status: str = Status.PAUSED.value

    def __init__(
        self,
        context: Context,
        *,
        finish: AwaitEnd,
        step_name: str,
        correlation_id: str | None = None,
        deadline: float | None = None,
    ) -> None:
        super().__init__(context)
        self._await_end = finish
        self.step_name = step_name
        self.correlation_id = correlation_id
        self.deadline = deadline

    def wait(self, timeout: float | None = None) -> Outcome:
        """Block until the run ends (once resumed, wherever that happens); its terminal
        outcome, rebuilt from the store.

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        return self._await_end(self.execution_id, timeout)

    def __repr__(self) -> str:
        cid = "" if self.correlation_id is None else f" correlation_id={self.correlation_id!r}"
        return f"<PausedResult {_name(self.context)} step={self.step_name!r}{cid}>"


class DispatchedResult(Outcome):
    """The run was handed to a worker; ``wait()`` returns its terminal outcome.

    Attributes:
        execution_id: the dispatched execution, for ``find`` and ``wait``.
        results: the values of the steps that ran in the caller before the hand-off.
    """

    __slots__ = ("_await_end",)
    status = "dispatched"

    def __init__(self, context: Context, *, finish: AwaitEnd) -> None:
        super().__init__(context)
        self._await_end = finish

    def wait(self, timeout: float | None = None) -> Outcome:
        """Block until the execution ends and return its outcome (rebuilt from the store).

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        return self._await_end(self.execution_id, timeout)

    def __repr__(self) -> str:
        return f"<DispatchedResult {_name(self.context)} id={self.execution_id}>"


class CancelledResult(Outcome):
    """The run was stopped from outside (``Reactor.cancel``, or ``Reactor.undo`` once its
    rollback ran); ``reason`` says why, ``rollback_failures`` what an undo could not undo."""

    __slots__ = ("reason", "rollback_failures")
    is_success = False
    status: str = Status.CANCELLED.value

    def __init__(
        self,
        context: Context,
        *,
        reason: str,
        rollback_failures: list[RollbackFailure] | None = None,
    ) -> None:
        super().__init__(context)
        self.reason = reason
        self.rollback_failures: list[RollbackFailure] = list(rollback_failures or [])

    @property
    def error(self) -> Any:
        return f"execution {self.execution_id} was cancelled: {self.reason}"

    def __repr__(self) -> str:
        return f"<CancelledResult {_name(self.context)} reason={self.reason!r}>"


class FailureResult(Outcome):
    """The run failed; completed steps were rolled back.

    Attributes:
        error: the exception when the failure came from one (including validation and
            resolution errors), otherwise the ``Failure``'s error.
        step_name: the step that failed (None when the reactor's own inputs were invalid).
        reactor_name: the reactor's class name.
        exception_class: qualified name of the exception class, or None.
        step_arguments: the arguments the failing step received, when they were resolved.
        inputs: the reactor's inputs.
        retryable: whether trying the same work again might succeed.
        rollback_failures: every compensate/undo that did not succeed, never dropped.
        validation_errors: per-field errors when inputs were invalid, else an empty list.
        backtrace: the formatted traceback of the exception (bounded), or None.
        attempts: how many attempts the failing step made.
        child: when the failing step is a composed child reactor or an async unit, that
            run's own failure outcome (``child.step_name`` is the inner step that failed);
            else None.
    """

    __slots__ = (
        "_error",
        "attempts",
        "backtrace",
        "child",
        "exception_class",
        "inputs",
        "reactor_name",
        "retryable",
        "rollback_failures",
        "step_arguments",
        "step_name",
        "validation_errors",
    )
    is_success = False
    status: str = Status.FAILED.value

    def __init__(
        self,
        context: Context,
        *,
        error: Any,
        step_name: str | None,
        reactor_name: str,
        exception_class: str | None = None,
        step_arguments: Mapping[str, Any] | None = None,
        inputs: Mapping[str, Any] | None = None,
        retryable: bool = False,
        rollback_failures: list[RollbackFailure] | None = None,
        validation_errors: list[dict[str, Any]] | None = None,
        backtrace: str | None = None,
        attempts: int = 0,
        child: FailureResult | None = None,
    ) -> None:
        super().__init__(context)
        self._error = error
        self.step_name = step_name
        self.reactor_name = reactor_name
        self.exception_class = exception_class
        self.step_arguments = dict(step_arguments) if step_arguments is not None else None
        self.inputs = dict(inputs or {})
        self.retryable = retryable
        self.rollback_failures: list[RollbackFailure] = list(rollback_failures or [])
        self.validation_errors = list(validation_errors or [])
        self.backtrace = backtrace
        self.attempts = attempts
        self.child = child

    @property
    def error(self) -> Any:
        return self._error

    @property
    def message(self) -> str:
        """A one-line account: where it failed and why, naming the place once.

        An error whose text already says where (``"reactor R, step 'pay': ..."`` from
        coordination, ``"invalid inputs for R: ..."`` from validation) is not prefixed twice.
        """
        where = f"step {self.step_name!r} of {self.reactor_name}" if self.step_name else None
        text = _without_location(str(self._error), self.reactor_name, self.step_name)
        text = f"{where or self.reactor_name} failed: {text}"
        if self.rollback_failures:
            text += f" ({len(self.rollback_failures)} rollback failure(s))"
        return text

    def __repr__(self) -> str:
        return (
            f"<FailureResult {self.reactor_name} step={self.step_name!r} error={self._error!r} "
            f"rollback_failures={len(self.rollback_failures)}>"
        )


def _without_location(text: str, reactor: str, step: str | None) -> str:
    """``text`` minus the reactor/step location it starts with or names in its first clause."""
    where = f"step {step!r} of {reactor}" if step else reactor
    prefixes = [f"reactor {reactor}, step {step!r}: ", f"{where}: "] if step else []
    prefixes += [f"reactor {reactor}: ", f"{reactor}: "]
    for prefix in prefixes:
        if text.startswith(prefix):
            return text[len(prefix) :]
    head, colon, rest = text.partition(": ")
    if colon:
        located = re.sub(rf"\s+(?:for|of|in|on)\s+{re.escape(where)}$", "", head)
        if located != head:
            return f"{located}: {rest}"
    return text


def _name(context: Context) -> str:
    """The reactor's class name from a context's ``module:qualname``."""
    return context.reactor.rpartition(":")[2]
