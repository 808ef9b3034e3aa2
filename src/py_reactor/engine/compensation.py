"""Rollback: compensate the failing step (if its work started), then undo completed steps.

Undo runs newest first. A compensate or undo that returns a failure or raises does not stop the
others; it is recorded as a rollback failure and reported on the run's outcome, never dropped.
A step's compensate and undo re-take the step's lock and semaphore (same keys, from the same
arguments); if they cannot be taken within the rollback wait, the compensate/undo does not run
and the rollback failure says so (reason ``coordination_unavailable``).
A composed child reactor is undone by rolling back its own completed steps, recursively.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from py_reactor.coordination.scope import Scope
from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.signals import Failure
from py_reactor.engine._coordinate import rollback_scope
from py_reactor.engine.answers import StepFailure
from py_reactor.engine.bodies import call_hook
from py_reactor.engine.context import Status
from py_reactor.engine.kinds import defines, make_unit
from py_reactor.engine.results import RollbackFailure, nested_failure
from py_reactor.engine.run import Run
from py_reactor.errors import CoordinationError
from py_reactor.observability import events as ev
from py_reactor.states import TraceKind

__all__ = ["rollback", "undo_completed", "undo_elements"]


def rollback(
    run: Run, declarations: Mapping[str, StepDeclaration], failure: StepFailure | None
) -> list[RollbackFailure]:
    """Roll back ``run`` after ``failure``; return the failures of the rollback itself."""
    run.context.status = Status.ROLLING_BACK
    step = failure.step if failure else None
    try:
        run.emit(ev.RollbackStarted, step)
        if failure is not None:
            compensate_failed(run, declarations, failure)
    finally:
        if failure is not None:
            failure.release_holds()  # interrupted before compensate_failed could
    undo_completed(run, declarations)
    run.emit(ev.RollbackFinished, step, failures=len(run.rollback_failures))
    return run.rollback_failures


def undo_completed(run: Run, declarations: Mapping[str, StepDeclaration]) -> None:
    """Undo every completed step of ``run``, newest first.

    A step leaves ``completed`` (and its result leaves ``results``) only once its undo has
    run, so a rollback interrupted midway and resumed from the stored context undoes exactly
    the steps not yet undone.
    """
    context = run.context
    while context.completed:
        name = context.completed[-1]
        decl = declarations[name]
        if decl.kind is StepKind.REACTOR:
            undo_child(run, name, decl)
        elif decl.kind is StepKind.MAP:
            undo_elements(run, name, decl)
        elif defines(decl, "undo"):
            values = context.arguments.get(name, {})
            unit = make_unit(decl, name, values, run)
            _call(
                run,
                TraceKind.UNDO,
                name,
                partial(call_hook, unit.undo, context.results.get(name)),
                decl,
                values,
            )
        context.completed.pop()
        context.results.pop(name, None)


def undo_elements(run: Run, name: str, decl: StepDeclaration) -> None:
    """Undo the elements of map step ``name`` that completed, highest index first (each as a
    composed child is undone); an element is forgotten once undone, so a resumed rollback
    does not undo it twice."""
    prefix = f"{name}["
    indexes = sorted(
        (int(key[len(prefix) : -1]) for key in run.context.children if key.startswith(prefix)),
        reverse=True,
    )
    for index in indexes:
        key = f"{prefix}{index}]"
        child = run.context.children.get(key)
        if child is not None and child.status is Status.COMPLETED:
            undo_child(run, key, decl)
        run.context.children.pop(key, None)


def compensate_failed(
    run: Run, declarations: Mapping[str, StepDeclaration], failure: StepFailure
) -> None:
    """Compensate the step ``failure`` reports (if its work started and it has a compensate),
    then release the holds its work kept through the compensate."""
    failed = failure.step if failure.work_started else None
    try:
        if failed is not None and defines(declarations[failed], "compensate"):
            decl = declarations[failed]
            call: Callable[[], Any] = (
                partial(undo_elements, run, failed, decl)  # the elements done before the failure
                if decl.kind is StepKind.MAP
                else partial(call_hook, failure.unit.compensate, failure.compensation_error)
            )
            # Under the holds its work kept (extended first: the ttl must not run out during
            # the compensate); re-taken instead if there are none, or one was lost meanwhile.
            kept = failure.holds is not None and failure.holds.refresh()
            held = (failure.held or {}) if kept else None
            _call(run, TraceKind.COMPENSATE, failed, call, decl, failure.arguments or {}, held=held)
    finally:
        failure.release_holds()  # the failed step kept its keys through its compensate


def undo_child(run: Run, name: str, decl: StepDeclaration) -> None:
    """Undo a composed child (or an async reactor that was read): its completed steps, newest
    first, under the child's own reactor-level lock and semaphore, re-taken as a step's are."""
    child_context = run.context.children.get(name)
    if child_context is None:
        return
    child_cls = decl.target
    child_run = Run(child_cls.__py_reactor_name__, child_context, run.middleware, units=run.units)
    scope: Scope | None = None
    if child_context.completed and child_cls.coordination:
        try:
            scope = rollback_scope(child_run, None, child_cls.coordination, child_context.inputs)
            if scope is not None:
                scope.acquire()
        except CoordinationError as exc:
            key = exc.key or (None if scope is None else _first_key(scope))
            message = (
                f"undo of step {name!r} did not run: the reactor-level "
                f"{exc.primitive or 'coordination'} of {child_cls.__qualname__} could not be "
                f"re-taken within its rollback_wait (raise it to wait longer). {exc}"
            )
            run.record(
                TraceKind.UNDO, name, time.time(), ok=False, reason="coordination_unavailable",
                error=message, key=key,
            )  # fmt: skip
            run.rollback_failures.append(
                {"step": name, "kind": TraceKind.UNDO.value, "key": key,
                 "reason": "coordination_unavailable", "message": message}
            )  # fmt: skip
            return
    try:
        plan = child_cls.__py_reactor_plan__
        undo_completed(child_run, {n: p.declaration for n, p in plan.items()})
    finally:
        if scope is not None:
            scope.exit(succeeded=True, failed=False)
    run.rollback_failures.extend(nested_failure(name, f) for f in child_run.rollback_failures)


def _call(
    run: Run,
    kind: TraceKind,
    name: str,
    call: Callable[[], Any],
    decl: StepDeclaration,
    values: Mapping[str, Any],
    *,
    held: Mapping[str, str] | None = None,
) -> None:
    """Run one compensate/undo under the step's lock and semaphore; record how it went.

    ``held``: the keys the step still holds (its work just failed), so nothing is re-taken.
    """
    started = time.time()
    begin, done, failed = (
        (ev.CompensationStarted, ev.CompensationCompleted, ev.CompensationFailed)
        if kind is TraceKind.COMPENSATE
        else (ev.UndoStarted, ev.UndoCompleted, ev.UndoFailed)
    )
    run.emit(begin, name)
    reason: str | None = None
    error: Any = None
    key: str | None = None
    scope: Scope | None = None
    try:
        if held is not None:
            key = held.get("lock") or held.get("semaphore")
        elif decl.coordination:
            scope = rollback_scope(run, name, decl.coordination, values)
            if scope is not None:
                key = _first_key(scope)
                scope.acquire()
    except CoordinationError as exc:
        # Never run the rollback unprotected, and never drop it silently: report it.
        reason, error, scope = "coordination_unavailable", exc, None
        key = exc.key or key
    if reason is None:
        try:
            outcome = call()
        except Exception as exc:
            reason, error = "raised", exc
        else:
            if isinstance(outcome, Failure):
                reason, error = "returned_failure", outcome.error
        finally:
            if scope is not None:
                scope.exit(succeeded=True, failed=False)
    where = {} if key is None else {"key": key}
    if reason is None:
        run.record(kind, name, started, ok=True, **where)
        run.emit(done, name)
        return
    message = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    if reason == "coordination_unavailable":
        what = getattr(error, "primitive", None) or "coordination"
        message = (
            f"{kind} of step {name!r} did not run: its {what} could not be re-taken within the "
            f"step's rollback_wait (raise it to wait longer). {message}"
        )
    run.record(kind, name, started, ok=False, reason=reason, error=message, **where)
    run.emit(failed, name, error=error)
    run.rollback_failures.append(
        {"step": name, "kind": kind.value, "key": key, "reason": reason, "message": message}
    )


def _first_key(scope: Scope) -> str | None:
    """The key a rollback failure names: the lock's, else the semaphore's."""
    keys = scope.keys
    return keys.get("lock") or keys.get("semaphore")
