"""One step of a walk and what the walk does with its answer, for every walk (sequential,
parallel branches): run the step whatever its kind, then go on, end the run, or roll back."""

from __future__ import annotations

from collections.abc import Callable

from py_reactor.dsl.declaration import StepKind
from py_reactor.dsl.reactor import Reactor, StepPlan
from py_reactor.engine.answers import Halted, Parked, Paused, StepFailure
from py_reactor.engine.async_units import dispatch_unit
from py_reactor.engine.context import Context, Status
from py_reactor.engine.interrupt import reach_interrupt
from py_reactor.engine.results import (
    FailureResult,
    HaltedResult,
    Outcome,
    ParkedResult,
    PausedResult,
)
from py_reactor.engine.run import Run, describe_exception
from py_reactor.engine.serializer import dumps_context
from py_reactor.engine.step_runner import run_step
from py_reactor.errors import SerializationError, StoreUnavailableError
from py_reactor.observability import events as ev

__all__ = ["after_step", "check_storable", "fail", "failure_result", "parked", "run_one"]


def run_one(run: Run, cls: type[Reactor], plan: StepPlan) -> object:
    """Run the step ``plan`` of ``cls`` once, whatever its kind: dispatch an async unit,
    reach an interrupt (pause, or take the payload of a resume), or run the step."""
    decl = plan.declaration
    if decl.asynchronous:
        return dispatch_unit(run, cls, plan)
    if decl.kind is StepKind.INTERRUPT:
        return reach_interrupt(run, plan)
    return run_step(run, plan)


def after_step(
    run: Run, name: str, result: object, checkpoint: Callable[[Context], None] | None
) -> Outcome | StepFailure | None:
    """What the walk does after step ``name`` answered ``result``: None to go on; an outcome to
    end the run with (parked, halted); a failure to roll back for."""
    if isinstance(result, Parked):
        return parked(run, result)
    if isinstance(result, Paused):
        run.context.status = Status.PAUSED
        return PausedResult(
            run.context,
            finish=run.units.finish,
            step_name=result.step,
            correlation_id=result.correlation_id,
            deadline=result.deadline,
        )
    if isinstance(result, StepFailure):
        return result
    if isinstance(result, Halted):
        run.context.status = Status.HALTED
        run.emit(ev.ReactorHalted, name, reason=result.reason)
        return HaltedResult(run.context, reason=result.reason, step_name=name)
    if checkpoint is not None:  # a dispatched unit too: its id is stored before going on
        try:
            return check_storable(run, name, checkpoint)
        except StoreUnavailableError:  # the step is done, only not stored: suspend, undo nothing
            suspended = run.waiter.outage(run, name)
            if suspended is None:
                raise
            return parked(run, suspended)
    return None


def check_storable(
    run: Run, step: str | None, checkpoint: Callable[[Context], None] | None = None
) -> StepFailure | None:
    """Store the context (``checkpoint``; without one, only check that it can be stored); a
    failure of ``step`` if its result cannot be written as JSON, which a background run needs.

    The step's work succeeded, so it stays completed and is undone by the rollback.
    """
    try:
        if checkpoint is None:
            dumps_context(run.context)
        else:
            checkpoint(run.context)
    except SerializationError as exc:
        return StepFailure(step, exc, retryable=False, work_started=False)
    return None


def parked(run: Run, answer: Parked) -> ParkedResult:
    """End the run here as parked: the runtime stores it and dispatches it again."""
    run.context.status = Status.WAITING
    return ParkedResult(run.context, answer)


def fail(run: Run, failure: StepFailure) -> FailureResult:
    """End a reactor run as failed (after any rollback) and tell middleware."""
    outcome = failure_result(run, failure)
    run.emit(ev.ReactorFailed, failure.step, error=failure.error)
    return outcome


def failure_result(run: Run, failure: StepFailure) -> FailureResult:
    """Mark the context failed and build the outcome that reports ``failure``."""
    run.context.status = Status.FAILED
    exception_class, backtrace = describe_exception(failure.error)
    return FailureResult(
        run.context,
        error=failure.error,
        step_name=failure.step,
        reactor_name=run.reactor_name,
        exception_class=exception_class,
        step_arguments=failure.arguments,
        inputs=run.context.inputs,
        retryable=failure.retryable,
        rollback_failures=run.rollback_failures,
        validation_errors=failure.validation_errors,
        backtrace=backtrace,
        attempts=failure.attempts,
        child=failure.child,
    )
