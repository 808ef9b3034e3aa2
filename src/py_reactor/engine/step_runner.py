"""One step, start to finish: resolve → validate → guard → coordinate → run (with retries).

Failures before the step's work starts (unresolvable arguments, invalid inputs, a refusing
guard, a coordination key error or contention) are reported with ``work_started=False`` so
that rollback does not compensate them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from py_reactor.coordination.gates import Busy
from py_reactor.coordination.scope import Admission
from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.reactor import StepPlan
from py_reactor.dsl.retries import RetryPolicy
from py_reactor.dsl.signals import Failure, Halt, Skipped, Success
from py_reactor.engine._coordinate import StepGate
from py_reactor.engine.answers import (
    Completed,
    Halted,
    Parked,
    Paused,
    SkippedStep,
    StepAnswer,
    StepFailure,
)
from py_reactor.engine.async_units import await_units
from py_reactor.engine.bodies import call_hook
from py_reactor.engine.kinds import defines, make_unit
from py_reactor.engine.refusals import NOTHING, contended, refused, said_no
from py_reactor.engine.resolve import resolve_arguments
from py_reactor.engine.results import (
    FailureResult,
    HaltedResult,
    Outcome,
    PausedResult,
    SuccessResult,
)
from py_reactor.engine.run import Run, error_text
from py_reactor.errors import (
    ArgumentResolutionError,
    CoordinationError,
    InputValidationError,
    StaleExecution,
    StoreUnavailableError,
)
from py_reactor.observability import events as ev
from py_reactor.states import TraceKind

__all__ = ["run_resolved", "run_step"]


def run_step(run: Run, plan: StepPlan) -> StepAnswer:
    """Wait for the async units the step reads, resolve its arguments, then run the step."""
    if plan.units:
        waiting = await_units(run, plan.units, plan.name)
        if waiting is not None:
            return waiting  # type: ignore[no-any-return]
    started = time.time()
    try:
        args = resolve_arguments(plan, run.context, run.reactor_name)
    except ArgumentResolutionError as exc:
        return refused(run, plan.name, exc, None, started)
    return run_resolved(run, plan.name, plan.declaration, args, started=started)


def run_resolved(
    run: Run,
    name: str,
    decl: StepDeclaration,
    args: dict[str, Any],
    *,
    started: float | None = None,
    retry: bool = True,
) -> StepAnswer:
    """Validate ``args``, check the guard, then run the step inside its coordination.

    Coordination is taken after validation and the guard (a refused step takes nothing),
    around each attempt's work, and released in reverse whatever the attempt returned.
    """
    if started is None:
        started = time.time()
    try:
        # A map step's arguments are its elements and the child's inputs: each element's
        # inputs are validated by the child's own run.
        values = (
            args
            if decl.kind is StepKind.MAP
            else decl.contract.validate(args, reactor=run.reactor_name, step=name)
        )
    except InputValidationError as exc:
        return refused(run, name, exc, args, started, validation_errors=exc.errors)
    unit = make_unit(decl, name, values, run)

    if defines(decl, "guard"):
        verdict = _guard(unit)
        if verdict is not None:
            return _settle_early(run, name, verdict, values, started)

    policy = decl.retry_policy if retry else None
    declared = decl.coordination
    if not declared:  # the common case: one check, no coordination cost
        return _attempts(run, name, values, unit, policy, None, started, NOTHING)
    try:
        gate = StepGate(run, name, declared, values)
    except CoordinationError as exc:  # a key function failed: nothing was taken
        return contended(run, name, values, exc, 0, started, unit, None)
    where = {"coordination": dict(gate.keys)}
    try:
        admission: Admission | Busy | CoordinationError = gate.open()
    except CoordinationError as exc:  # the store is unreachable
        admission = exc
    if not isinstance(admission, Admission):  # not our turn yet, or the store: park or fail
        parked, error = said_no(run, name, admission)
        if parked is not None:
            return parked
        return contended(run, name, values, error, 0, started, unit, None, where)
    result: StepAnswer | None = None
    aborted = stale = False
    try:
        if admission is not Admission.PROCEED:
            result = _skip(run, name, values, Skipped(reason=admission.value), started, where)
        else:
            result = _attempts(run, name, values, unit, policy, gate, started, where)
        return result
    except BaseException as exc:
        aborted = not isinstance(exc, Exception)  # KeyboardInterrupt, SystemExit
        stale = isinstance(exc, StaleExecution)  # a nested run's checkpoint found it claimed
        raise
    finally:
        if isinstance(result, StepFailure) and result.holds is not None:
            pass  # the turn goes with the other holds, once rollback has compensated
        elif stale:  # the runner that claimed the execution carries the turn and the claim
            gate.hand_over()
        elif isinstance(result, Parked) or aborted:
            # A parked step keeps its ordered position for when it comes back; an abnormal
            # exit leaves it in line for the poison pill or a recovery, never passed on as if
            # the work had finished.
            gate.detach()
        else:
            gate.close(failed=result is None or isinstance(result, StepFailure))


def _attempts(
    run: Run,
    name: str,
    values: dict[str, Any],
    unit: Any,
    policy: RetryPolicy | None,
    gate: StepGate | None,
    started: float,
    where: Mapping[str, Any],
) -> StepAnswer:
    """Run the step's work until it succeeds, stops, or fails for good.

    ``where`` (the step's coordination keys, if any) goes into its trace entries.
    """
    last: Failure | None = None  # the last attempt's failure: what compensate receives
    attempt = run.context.attempts.pop(name, 0)  # a retry that waited in a worker goes on
    while True:
        attempt += 1
        if gate is None:
            run.emit(ev.StepStarted, name, attempt=attempt)
            signal = _outage_suspends(run, name, attempt, _work(unit))
        else:
            try:
                taken: Admission | Busy | CoordinationError = gate.enter()
            except CoordinationError as exc:  # the store is unreachable
                taken = exc
            if not isinstance(taken, Admission):  # busy, or the store: park or fail
                parked, error = said_no(run, name, taken)
                if parked is not None:
                    run.context.attempts[name] = attempt - 1  # a park is not an attempt
                    return parked
                return contended(run, name, values, error, attempt - 1, started, unit, last, where)
            run.waiter.entered(run, name)
            if taken is not Admission.PROCEED:
                gate.exit(succeeded=False)  # the period re-check said no after lock/semaphore
                return _skip(run, name, values, Skipped(reason=taken.value), started, where)
            run.emit(ev.StepStarted, name, attempt=attempt)
            try:
                signal = _outage_suspends(run, name, attempt, _work(unit))
            except BaseException as exc:
                gate.interrupted(exc)
                raise
            if not (isinstance(signal, Failure) and not _retrying(signal, attempt, policy)):
                gate.exit(succeeded=isinstance(signal, Success))
            # else: a final failure keeps its holds until rollback has run its compensate
        if isinstance(signal, Parked | Paused):  # a composed child parked, or paused
            return signal
        if isinstance(signal, Success):
            return _complete(run, name, values, signal.value, attempt, started, where)
        if isinstance(signal, Skipped):
            return _skip(run, name, values, signal, started, where)
        if isinstance(signal, Halt):
            return _halt(run, name, signal.reason, started)
        failure = last = signal
        if policy is not None and _retrying(failure, attempt, policy):
            delay = policy.delay(attempt)
            run.record(
                TraceKind.RETRY,
                name,
                started,
                attempt=attempt,
                error=error_text(failure.error),
                delay=delay,
            )
            run.emit(ev.StepRetried, name, attempt=attempt, delay=delay, error=failure.error)
            parked = run.waiter.backoff(run, name, attempt, delay)
            if parked is not None:  # a worker never sleeps: it comes back later
                return parked
            started = time.time()
            continue
        try:
            run.record(
                TraceKind.FAILED,
                name,
                started,
                attempt=attempt,
                arguments=values,
                error=error_text(failure.error),
                **where,
            )
            run.emit(ev.StepFailed, name, attempt=attempt, error=failure.error)
        except BaseException:  # interrupted before rollback could take over the holds
            if gate is not None:
                gate.release_failed()
            raise
        return StepFailure(
            step=name,
            error=failure.error,
            retryable=failure.retryable,
            work_started=True,
            arguments=values,
            attempts=attempt,
            unit=unit,
            holds=gate,
            held=None if gate is None else gate.keys,
            child=getattr(unit, "child", None),
        )


def _retrying(failure: Failure, attempt: int, policy: RetryPolicy | None) -> bool:
    """Whether ``failure`` of attempt ``attempt`` leads to another attempt."""
    return failure.retryable and policy is not None and attempt < policy.max_attempts


def _work(unit: Any) -> Success | Failure | Halt | Skipped | Parked | Paused:
    """Run the unit's work once; an exception becomes a (retryable) failure. A composed child
    that parked in a worker answers ``Parked``: the whole execution parks."""
    try:
        return _as_signal(call_hook(unit.run))
    except Exception as exc:
        return Failure(exc)


def _outage_suspends(
    run: Run, name: str, attempt: int, signal: Success | Failure | Halt | Skipped | Parked | Paused
) -> Success | Failure | Halt | Skipped | Parked | Paused:
    """In a worker, the work failing because the store is unreachable (a store call of its
    own) suspends the run instead of failing the step: the attempt runs again once the store
    is back (it did not count), and nothing is rolled back meanwhile. Any other signal is
    returned as it is."""
    if isinstance(signal, Failure) and isinstance(signal.error, StoreUnavailableError):
        parked = run.waiter.outage(run, name)
        if parked is not None:
            run.context.attempts[name] = attempt - 1
            return parked
    return signal


def _as_signal(raw: Any) -> Success | Failure | Halt | Skipped | Parked | Paused:
    """What a body's return value means. The outcome of a nested ``invoke`` or ``run`` counts
    as that outcome: ``return Other.invoke(...)`` fails this step if the invocation failed
    (a contention there included: an ordinary failure of this step, never a park)."""
    if isinstance(raw, Success | Failure | Halt | Skipped | Parked | Paused):
        return raw
    if not isinstance(raw, Outcome):  # the common case: a plain value
        return Success(raw)
    if isinstance(raw, FailureResult):
        return Failure(raw.error, retryable=raw.retryable)
    if isinstance(raw, HaltedResult):
        return Halt(raw.reason)
    if isinstance(raw, SuccessResult):
        return Success(raw.value)
    if isinstance(raw, PausedResult):
        return Failure(
            f"a run started inside this step paused at its interrupt {raw.step_name!r} "
            f"(execution {raw.execution_id}); a step cannot wait for a resume: declare the "
            "child with compose(...) so that the whole run pauses",
            retryable=False,
        )
    return Success(raw)


def _guard(unit: Any) -> Failure | Skipped | Halt | None:
    """None to proceed; otherwise the signal that settles the step without running it."""
    try:
        verdict = call_hook(unit.guard)
    except Exception as exc:
        return Failure(exc, retryable=False)
    if verdict is None or verdict is True or isinstance(verdict, Success):
        return None
    if isinstance(verdict, Failure | Skipped | Halt):
        return verdict
    if verdict is False:
        return Failure(f"guard of {type(unit).__qualname__} refused to run", retryable=False)
    return Failure(
        TypeError(
            f"guard of {type(unit).__qualname__} returned {verdict!r}; a guard returns None, "
            "True/False, Success, Failure, Skipped or Halt"
        ),
        retryable=False,
    )


def _settle_early(
    run: Run, name: str, verdict: Failure | Skipped | Halt, values: dict[str, Any], started: float
) -> StepAnswer:
    if isinstance(verdict, Skipped):
        return _skip(run, name, values, verdict, started)
    if isinstance(verdict, Halt):
        return _halt(run, name, verdict.reason, started)
    run.record(
        TraceKind.FAILED,
        name,
        started,
        attempt=0,
        arguments=values,
        error=error_text(verdict.error),
        refused_by="guard",
    )
    run.emit(ev.StepFailed, name, attempt=0, error=verdict.error)
    # A refusal is not transient within this run: trying the same arguments again is refused again.
    return StepFailure(name, verdict.error, retryable=False, work_started=False, arguments=values)


def _complete(
    run: Run,
    name: str,
    values: dict[str, Any],
    value: Any,
    attempt: int,
    started: float,
    where: Mapping[str, Any] = NOTHING,
) -> Completed:
    context = run.context
    context.results[name] = value
    context.arguments[name] = values
    context.completed.append(name)
    run.record(
        TraceKind.RUN, name, started, attempt=attempt, arguments=values, result=value, **where
    )
    run.emit(ev.StepCompleted, name, attempt=attempt, value=value)
    return Completed(value)


def _skip(
    run: Run,
    name: str,
    values: dict[str, Any],
    signal: Skipped,
    started: float,
    where: Mapping[str, Any] = NOTHING,
) -> SkippedStep:
    run.context.results[name] = signal.value
    run.context.arguments[name] = values
    run.record(TraceKind.SKIPPED, name, started, reason=signal.reason, result=signal.value, **where)
    run.emit(ev.StepSkipped, name, reason=signal.reason)
    return SkippedStep(signal.value, signal.reason)


def _halt(run: Run, name: str, reason: str, started: float) -> Halted:
    run.record(TraceKind.HALTED, name, started, reason=reason)
    return Halted(reason)
