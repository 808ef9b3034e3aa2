"""Async units as the engine runs them: dispatch one (after the hand-off deadlock guard), and
wait for one whose result a step reads.

A unit is an execution of its own (its own id, which is also the owner of what it holds), so
the coordination it declares is taken where its work runs. The dispatching run records the
unit's id in its context (``context.units``) and goes on. A step that reads the unit's
``Result`` (or waits for it) waits for that execution to end: in the caller for up to
``async_wait_timeout``; in a worker for a short grace, then by parking (woken when the unit
ends), for up to ``async_park_timeout`` in all. A unit that was read is then tracked like a
completed step (undone by the run's rollback); one nobody reads never affects the run.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from py_reactor.config import get_config
from py_reactor.coordination.holds import HELD, HoldRecord
from py_reactor.coordination.scope import compute_key
from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.reactor import Reactor, StepPlan
from py_reactor.dsl.registry import class_path, lookup
from py_reactor.dsl.sources import Input, Result, Value
from py_reactor.engine.answers import Halted, Parked, StepFailure
from py_reactor.engine.context import Context
from py_reactor.engine.refusals import contended, refused
from py_reactor.engine.resolve import read_source, resolve_arguments
from py_reactor.engine.run import Run, error_text
from py_reactor.engine.state import UnitOrigin, UnitRef, UnitWait
from py_reactor.engine.waiter import backstop, park
from py_reactor.errors import (
    ArgumentResolutionError,
    AsyncUnitTimeoutError,
    CoordinationError,
    HandoffRefusedError,
    InputValidationError,
    ReactorError,
)
from py_reactor.observability import events as ev
from py_reactor.states import Status, TraceKind

if TYPE_CHECKING:
    from py_reactor.engine.results import Outcome

__all__ = [
    "AWAITED",
    "Sent",
    "await_inputs",
    "await_units",
    "dispatch_unit",
    "holder_of",
]

logger = logging.getLogger("py_reactor")

#: What a reader parks on (the key is the unit's execution id; its end wakes the reader).
AWAITED = "async_unit"
#: A reader in a worker waits this long for a unit before it parks.
GRACE = 0.2


@dataclasses.dataclass(slots=True)
class Sent:
    """The unit was dispatched (now or before a park): the run goes on without it."""

    execution_id: str


def unit_id(context: Context, step: str) -> str:
    """The unit's execution id: the same for the same run and step, so a run that dispatches
    again after a crash (before its checkpoint) finds the unit stored and sends nothing."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"py_reactor:{context.execution_id}:{step}").hex


# -- dispatch ------------------------------------------------------------------------------------


def dispatch_unit(run: Run, cls: type[Reactor], plan: StepPlan) -> Any:
    """Dispatch the async unit ``plan`` of ``cls``: a :class:`Sent`, or the step's failure
    (bad arguments, a refusing guard, a store that cannot take it): nothing was enqueued then.
    """
    name, decl, context = plan.name, plan.declaration, run.context
    started = time.time()
    units = context.units
    if name in units:  # dispatched before this run parked: never twice
        return Sent(units[name].id)
    deferred: dict[str, str] = {}
    for arg, source in plan.arguments:
        if (
            isinstance(source, Result)
            and source.step in units
            and source.step not in context.results
        ):
            ended = run.units.wait(units[source.step].id, 0)
            if ended is None:
                deferred[arg] = units[source.step].id
                continue
            settled = take(run, source.step, ended)
            if settled is not None:
                return settled
    known = plan
    if deferred:
        kept = tuple(a for a in plan.arguments if a[0] not in deferred)
        known = dataclasses.replace(plan, arguments=kept)
    try:
        values = resolve_arguments(known, context, run.reactor_name)
    except ArgumentResolutionError as exc:
        return refused(run, name, exc, None, started)
    if deferred:
        logger.info(
            "py_reactor: reactor %s, step %r (execution %s): dispatch guard skipped: argument(s) "
            "%s wait on another async unit's result, so the unit's keys cannot be known yet",
            run.reactor_name,
            name,
            context.execution_id,
            ", ".join(sorted(deferred)),
        )
    else:
        try:
            values = decl.contract.validate(values, reactor=run.reactor_name, step=name)
        except InputValidationError as exc:
            return refused(run, name, exc, values, started, validation_errors=exc.errors)
        try:
            _guard(run, name, decl, values)
        except CoordinationError as exc:
            return contended(run, name, values, exc, 0, started, None, None)
    unit_cls = cls.__py_reactor_units__[name]
    unit = Context(
        reactor=class_path(unit_cls),
        inputs=dict(values),
        execution_id=unit_id(context, name),
        parent_id=context.execution_id,
        deferred=deferred,
        unit_of=UnitOrigin(reactor=class_path(cls), step=name, execution=context.execution_id),
    )
    try:
        run.units.dispatch(unit_cls, unit)
    except ReactorError as exc:  # not stored, not sent: the run fails here
        return refused(run, name, exc, values, started)
    units[name] = UnitRef(
        id=unit.execution_id, kind="reactor" if decl.kind is StepKind.REACTOR else "step"
    )
    run.record(
        TraceKind.DISPATCHED, name, started, execution_id=unit.execution_id, arguments=values
    )
    run.emit(ev.UnitDispatched, name, unit_execution_id=unit.execution_id)
    return Sent(unit.execution_id)


def _guard(run: Run, name: str, decl: StepDeclaration, values: dict[str, Any]) -> None:
    """Refuse the dispatch if the unit declares an exclusive lock (or a limit-1 semaphore) on a
    key this execution holds: the unit, under an owner of its own, would wait for the key, and
    the execution (once it reads the unit) for the unit.

    Raises:
        HandoffRefusedError: the collision, naming the key, the holder and the remedy.
        CoordinationKeyError: a key function of the unit raised, or returned nothing.
    """
    wanted = _exclusive_keys(run, name, decl, values)  # computed even if nothing is held yet:
    held = {(r.primitive, r.key): r for r in run.context.holds if r.state == HELD}  # a bad key
    for primitive, key, declared_by in wanted:  # fails here, before enqueue, not in the worker
        record = held.get((primitive, key))
        if record is None:
            continue
        holder = holder_of(record)
        remedy = (
            "make the step synchronous (step(...) instead of async_step(...)) if it belongs "
            "inside the critical section"
            if decl.kind is not StepKind.REACTOR
            else "make it a composed child (compose(...) instead of async_reactor(...)) if it "
            "belongs inside the critical section"
        )
        message = (
            f"reactor {run.reactor_name}, step {name!r}: refused to dispatch the async unit: "
            f"{declared_by} declares a {primitive} on {key!r}, which {holder} already holds "
            f"(owner {record.owner}). The unit runs as its own execution, under an owner of its "
            f"own, so it would wait for that key while this execution waits for the unit. "
            f"Take the {primitive} inside the unit only (drop it where it is held now), or "
            f"{remedy}. Nothing was enqueued"
        )
        raise HandoffRefusedError(
            message,
            primitive=primitive,
            key=key,
            holder=holder,
            reactor=run.reactor_name,
            step=name,
        )


def holder_of(record: HoldRecord) -> str:
    """Who of this execution holds ``record``, as a hand-off refusal names it."""
    if record.step is None:
        return f"the reactor-level {record.primitive} of this execution"
    return f"step {record.step!r} of this execution"


def _exclusive_keys(
    run: Run, name: str, decl: StepDeclaration, values: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """``(primitive, key, who declares it)`` of each exclusive hold the unit will take first:
    the step's lock / limit-1 semaphore; for a child reactor, its reactor-level ones and those
    of its steps whose arguments come from its inputs alone (others are known only later)."""
    where = f"reactor {run.reactor_name}, step {name!r}"
    if decl.kind is not StepKind.REACTOR:
        return [
            (p, compute_key(d, values, where), f"the step {name!r}")
            for p, d in decl.coordination.items()
            if _exclusive(p, d)
        ]
    child: type[Reactor] = decl.target
    found = [
        (p, compute_key(d, values, where), f"the reactor {child.__qualname__}")
        for p, d in child.coordination.items()
        if _exclusive(p, d)
    ]
    for inner, plan in child.__py_reactor_plan__.items():
        declared = plan.declaration.coordination
        if not any(_exclusive(p, d) for p, d in declared.items()):
            continue
        args = _from_inputs(plan, values, child.__py_reactor_name__)
        if args is None:
            continue
        found.extend(
            (p, compute_key(d, args, f"{where} (its step {inner!r})"), f"its step {inner!r}")
            for p, d in declared.items()
            if _exclusive(p, d)
        )
    return found


def _exclusive(primitive: str, declaration: Any) -> bool:
    return primitive == "lock" or (
        primitive == "semaphore" and getattr(declaration, "limit", 0) == 1
    )


def _from_inputs(plan: StepPlan, inputs: dict[str, Any], reactor: str) -> dict[str, Any] | None:
    """The validated arguments of a child's step when they come from its inputs and constants
    only; None when one reads a result (not known before the child runs) or does not validate."""
    args: dict[str, Any] = {}
    for arg, source in plan.arguments:
        if isinstance(source, Value):
            args[arg] = source.value
        elif isinstance(source, Input) and source.name in inputs:
            try:
                args[arg] = read_source(source, inputs[source.name], arg, plan.name, reactor)
            except ArgumentResolutionError:
                return None
        else:
            return None
    try:
        validated: dict[str, Any] = plan.declaration.contract.validate(args, reactor=reactor)
    except InputValidationError:
        return None
    return validated


# -- reading a unit's result -------------------------------------------------------------------


def await_units(run: Run, names: tuple[str, ...], reader: str | None) -> Any:
    """Wait for each dispatched unit of ``names`` that has no result yet; None when all
    ended well (their values are in the context), else what the reader's step becomes: a
    :class:`Parked` (in a worker), its failure, or the unit's halt.

    ``reader``: the step that reads them (None: the reactor's ``returns``).
    """
    units = run.context.units
    if not units:
        return None
    for name in names:
        if name in run.context.results or name not in units:
            continue
        outcome = _wait(run, name, units[name].id, reader or name, reader is not None)
        if not _is_outcome(outcome):
            return outcome
        settled = take(run, name, outcome)
        if settled is not None:
            return settled
    return None


def take(run: Run, name: str, outcome: Outcome) -> Any:
    """Take the ended unit ``name``'s outcome into the run: None when it succeeded (its value
    is now the step's result, and the unit is tracked for undo), else the failure or halt the
    reading step becomes."""
    context = run.context
    entry = context.units[name]
    started = time.time()
    if outcome.status == Status.COMPLETED:
        unit = outcome.context
        context.results[name] = outcome.value
        if entry.kind == "reactor":
            context.arguments[name] = dict(unit.inputs)
            context.children[name] = unit  # its completed steps are undone with this run
        else:
            context.arguments[name] = dict(unit.arguments.get(name, unit.inputs))
        context.completed.append(name)
        run.record(TraceKind.RUN, name, started, execution_id=entry.id, result=outcome.value)
        return None
    if outcome.status == Status.HALTED:
        reason = str(getattr(outcome, "reason", "halted"))
        run.record(TraceKind.HALTED, name, started, execution_id=entry.id, reason=reason)
        return Halted(reason)
    error = outcome.error
    run.record(
        TraceKind.FAILED,
        name,
        started,
        execution_id=entry.id,
        error=error_text(error),
        asynchronous=True,
    )
    run.emit(ev.StepFailed, name, attempt=getattr(outcome, "attempts", 0), error=error)
    return StepFailure(
        name,
        error,
        retryable=False,
        work_started=False,  # it compensated itself, in its own job
        arguments=context.arguments.get(name),
        attempts=getattr(outcome, "attempts", 0),
        child=outcome,
    )


def await_inputs(run: Run) -> Any:
    """Fill in the inputs of a unit that read other units' results (``deferred``): None when
    all are known, else a :class:`Parked` (in a worker) or the run's failure."""
    context = run.context
    deferred = context.deferred
    origin = context.unit_of
    for arg, execution_id in sorted(deferred.items()):
        outcome = _wait(run, f"input {arg!r}", execution_id, None, False)
        if not _is_outcome(outcome):
            return outcome
        source, step = _source_of(origin, arg)
        if outcome.status != Status.COMPLETED or source is None:
            why = (
                f"the unit it reads ended {outcome.status}: {error_text(outcome.error)}"
                if outcome.status != Status.COMPLETED
                else f"{origin.reactor if origin else None} no longer wires it to a Result"
            )
            error = ArgumentResolutionError(
                f"reactor {run.reactor_name}: input {arg!r} of this async unit reads the result "
                f"of execution {execution_id}, and {why}",
                reactor=run.reactor_name,
            )
            return StepFailure(None, error, retryable=False, work_started=False)
        try:
            context.inputs[arg] = read_source(source, outcome.value, arg, step, run.reactor_name)
        except ArgumentResolutionError as exc:
            return StepFailure(None, exc, retryable=False, work_started=False)
        del deferred[arg]
    return None


def _source_of(origin: UnitOrigin | None, arg: str) -> tuple[Any, str]:
    """The ``Result`` source the dispatching reactor wired ``arg`` of this unit to."""
    step = origin.step if origin is not None else ""
    declaring = lookup(origin.reactor) if origin is not None else None
    if declaring is None or not issubclass(declaring, Reactor):
        return None, step
    plan = declaring.__py_reactor_plan__.get(step)
    sources = dict(plan.arguments) if plan is not None else {}
    source = sources.get(arg)
    return (source if isinstance(source, Result) else None), step


def _wait(
    run: Run,
    name: str,
    execution_id: str,
    label: str | None,
    step_level: bool,
    *,
    report: bool = True,
) -> Any:
    """The ended unit's outcome, or what to do instead: park (worker) or fail (timed out).

    ``report``: trace and announce a timeout here (False: the caller's step runner reports the
    failure itself, as a map step's does)."""
    config = get_config()
    waiter = run.waiter
    if not waiter.parks:  # the caller waits for the unit's end, up to async_wait_timeout
        outcome = run.units.wait(execution_id, config.async_wait_timeout)
        if outcome is None:
            return _timed_out(
                run, name, execution_id, label, config.async_wait_timeout, "wait", report
            )
        return outcome
    waits = run.context.unit_waits
    outcome = run.units.wait(execution_id, GRACE)
    if outcome is not None:
        waits.pop(name, None)
        return outcome
    waited = waits.setdefault(name, UnitWait(since=time.time(), parks=0))
    left = waited.since + config.async_park_timeout - time.time()
    if left <= 0:
        return _timed_out(run, name, execution_id, label, config.async_park_timeout, "park", report)
    parks = waited.parks
    waits[name] = UnitWait(since=waited.since, parks=parks + 1)
    path = (waiter.prefix.rstrip(".") or None) if label is None else waiter.prefix + label
    return park(
        run, path, AWAITED, execution_id, parks + 1, min(left, backstop(None)),
        step_level=step_level,
    )  # fmt: skip


def _timed_out(
    run: Run,
    name: str,
    execution_id: str,
    label: str | None,
    seconds: float,
    how: str,
    report: bool = True,
) -> StepFailure:
    step = label
    waited = "waited" if how == "wait" else "stayed parked"
    option = f"async_{how}_timeout"
    where = f"reactor {run.reactor_name}" + ("" if step is None else f", step {step!r}")
    error = AsyncUnitTimeoutError(
        f"{where}: {waited} {seconds:g} s for the async unit {name!r} (execution "
        f"{execution_id}) and it has not ended; raise configure({option}=...), or look at "
        f"find({execution_id!r}) to see where it is (it goes on running)",
        unit=name,
        execution_id=execution_id,
        reactor=run.reactor_name,
        step=step,
    )
    if report:
        run.record(
            TraceKind.FAILED, step, time.time(), error=error_text(error), execution_id=execution_id
        )
        run.emit(ev.StepFailed, step, attempt=0, error=error)
    return StepFailure(step, error, retryable=False, work_started=False)


def _is_outcome(value: Any) -> bool:
    return not isinstance(value, Parked | StepFailure)
