"""The step loop: walk a reactor's steps in order, driven entirely by the context.

``execute`` continues from wherever the context stopped (steps with a result are not run
again), so the same loop serves a fresh run, a nested child and, later, a resume in another
process.
"""

from __future__ import annotations

import time

from py_reactor.config import get_config
from py_reactor.coordination.gates import Busy
from py_reactor.coordination.scope import Admission, Scope
from py_reactor.dsl.reactor import Reactor
from py_reactor.engine._coordinate import emitter, held_by
from py_reactor.engine.answers import Parked, StepFailure
from py_reactor.engine.async_units import await_inputs
from py_reactor.engine.context import Context, Status, running
from py_reactor.engine.handoff import UnitBackend
from py_reactor.engine.refusals import said_no
from py_reactor.engine.results import (
    DispatchedResult,
    HaltedResult,
    Outcome,
    ParkedResult,
    PausedResult,
)
from py_reactor.engine.run import Run
from py_reactor.engine.stepping import fail, parked
from py_reactor.engine.waiter import BLOCKING, Waiter
from py_reactor.engine.walk import walk
from py_reactor.errors import CoordinationError, InputValidationError, StaleExecution
from py_reactor.observability import events as ev
from py_reactor.observability.middleware import Middleware
from py_reactor.states import TraceKind

__all__ = ["execute"]


def execute(
    cls: type[Reactor],
    context: Context,
    *,
    middleware: tuple[Middleware, ...] | None = None,
    validated: bool = False,
    waiter: Waiter = BLOCKING,
    handoff: str | None = None,
    root: Context | None = None,
    prefix: str = "",
    units: UnitBackend | None = None,
) -> Outcome:
    """Run ``cls`` from wherever ``context`` stopped until it completes, halts, fails or
    pauses at an interrupt.

    Args:
        waiter: what a Wait means here: :data:`BLOCKING` in the caller; a ``Parking`` waiter in
            a worker (contention parks, a ``ParkedResult``, instead of failing; retries wait in
            the parked set; the context is checkpointed after every step).
        handoff: in the caller, the step at which the run stops and is handed to a worker
            (a ``DispatchedResult``); what it holds by then stays held for the worker.
        root, prefix: for a nested run (a composed child, a map element), the execution's
            root context and this run's dotted path from it (``"child."``).

    Raises:
        KeyboardInterrupt, SystemExit: propagate untouched after marking the context
            ``aborted``; no rollback code runs.
    """
    run = Run(
        cls.__py_reactor_name__,
        context,
        get_config().middleware if middleware is None else middleware,
        waiter=waiter,
        handoff=handoff,
        root=root,
        prefix=prefix,
        units=units,
        nest=_nest,
    )
    if context.status is Status.PENDING or (
        not waiter.parks and context.status is not Status.PAUSED
    ):
        run.emit(ev.ReactorStarted)  # once per execution: not again when a worker resumes it
    if context.deferred:  # an async unit whose inputs read other units' results
        waiting = await_inputs(run)
        if isinstance(waiting, Parked):
            return parked(run, waiting)
        if isinstance(waiting, StepFailure):
            return fail(run, waiting)
        validated = False
        needs_validation = True  # inputs complete only now: check them before any step
    else:
        needs_validation = context.status is Status.PENDING and not validated
    if needs_validation:
        try:
            context.inputs = cls.__py_reactor_contract__.validate(
                context.inputs, reactor=run.reactor_name
            )
        except InputValidationError as exc:
            return fail(
                run,
                StepFailure(
                    None, exc, retryable=False, work_started=False, validation_errors=exc.errors
                ),
            )
    context.status = Status.RUNNING
    with running(context):  # holds belong to the root execution
        if not cls.coordination:
            return walk(cls, run)
        return _coordinated(cls, run)


def _coordinated(cls: type[Reactor], run: Run) -> Outcome:
    """Run the steps inside the reactor's declared coordination (taken in the fixed order).

    Holds taken before a park or a hand-off stay held (recorded in the ledger, no longer
    extended here) for the run that picks the execution up; it adopts them.
    """
    context = run.context
    try:
        scope = Scope(
            cls.coordination,
            context.inputs,
            reactor=run.reactor_name,
            ledger=context.holds,
            holder=context.holder(None),
            emit=emitter(run, None),
            wait=run.waiter.gate_wait(None),
            recovered=run.waiter.recovered,
            by=held_by(run, None),
        )
        admission: Admission | Busy | CoordinationError = scope.enter(parking=run.waiter.parks)
    except CoordinationError as exc:  # a key function failed, or the store is unreachable
        admission = exc
    except BaseException:  # interrupted while waiting for a key: no rollback, no work ran
        context.status = Status.ABORTED
        raise
    if not isinstance(admission, Admission):  # busy, or the store: park or fail
        suspended, error = said_no(run, None, admission)
        if suspended is not None:
            return parked(run, suspended)
        return fail(run, StepFailure(None, error, retryable=False, work_started=False))
    run.waiter.entered(run, None)
    if admission is not Admission.PROCEED:
        scope.exit(succeeded=False, failed=False)
        reason = admission.value
        context.status = Status.HALTED
        run.record(TraceKind.HALTED, None, time.time(), reason=reason)
        run.emit(ev.ReactorHalted, None, reason=reason)
        return HaltedResult(context, reason=reason, step_name=None)
    outcome: Outcome | None = None
    aborted = stale = False
    try:
        outcome = walk(cls, run)
        return outcome
    except BaseException as exc:
        aborted = not isinstance(exc, Exception)  # KeyboardInterrupt, SystemExit
        stale = isinstance(exc, StaleExecution)  # a checkpoint found it claimed by another
        raise
    finally:
        if isinstance(outcome, ParkedResult | DispatchedResult):
            scope.detach()
        elif stale:  # the runner that claimed the execution carries its turn and claim now
            scope.hand_over()
        elif isinstance(outcome, PausedResult):  # a pause may last days: block nobody meanwhile
            scope.park()  # all but an ordered position; the resumed run takes them again
        elif aborted:  # the ordered position stays in line for the poison pill or a recovery,
            scope.park()  # never passed on as if the run had finished; the rest is given back
        else:
            status = context.status
            scope.exit(
                succeeded=status is Status.COMPLETED,
                failed=status not in (Status.COMPLETED, Status.HALTED),
            )


def _nest(run: Run, cls: type[Reactor], context: Context, step: str, validated: bool) -> Outcome:
    """Run ``cls`` as ``step`` of ``run`` (a composed child, a map element ``"step[i]"``):
    parks inside it are named ``"<step>.<its step>"`` from the root."""
    return execute(
        cls,
        context,
        middleware=run.middleware,
        validated=validated,
        waiter=run.waiter.nested(step),
        root=run.root,
        prefix=f"{run.prefix}{step}.",
        units=run.units,
    )
