"""Interrupt steps as the engine runs them: pause the run, or take the payload of a resume.

The first time a run reaches an interrupt it works out the correlation id (reserving it for
this execution while it is paused) and the deadline, writes them in the root context
(``root.interrupts``, by step path) and pauses: the executor answers ``PausedResult`` and
whoever runs it stores the run ``"paused"``. ``Reactor.resume`` puts the validated payload in
``root.resumed`` and runs it again; reaching the interrupt then completes the step with the
payload. Reaching it again after the deadline (a worker's recovery loop dispatches a paused run
whose timeout lapsed) fails the step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from py_reactor.dsl.interrupt import options_of
from py_reactor.dsl.reactor import StepPlan
from py_reactor.engine.answers import Completed, Paused, StepFailure
from py_reactor.engine.run import Run, error_text
from py_reactor.engine.state import InterruptPause
from py_reactor.errors import InterruptError, InterruptTimeoutError
from py_reactor.observability import events as ev
from py_reactor.states import TraceKind

__all__ = ["reach_interrupt"]


def reach_interrupt(run: Run, plan: StepPlan) -> Any:
    """The run reached the interrupt step ``plan``: a ``Completed`` (a resume's payload), a
    :class:`Paused`, or the step's failure (its timeout lapsed, or the correlation id is taken
    or cannot be computed)."""
    name, root, context = plan.name, run.root, run.context
    path = run.prefix + name
    started = time.time()
    resumed, pauses = root.resumed, root.interrupts
    if path in resumed:
        payload = resumed.pop(path)
        pauses.pop(path, None)
        context.results[name] = payload
        context.arguments[name] = {}
        run.record(TraceKind.RESUMED, name, started, result=payload)
        run.emit(ev.StepResumed, path, payload=payload)
        run.emit(ev.StepCompleted, name, attempt=1, value=payload)
        return Completed(payload)
    info = pauses.get(path)
    if info is None:
        try:
            correlation = _correlation_id(run, plan)
        except InterruptError as exc:
            return _failed(run, name, exc, started)
        deadline = None
        timeout = options_of(plan.declaration).timeout
        if timeout is not None:
            deadline = started + timeout
        if correlation is not None:
            other = run.units.reserve(root.reactor, correlation, root.execution_id, deadline)
            if other is not None:
                error = InterruptError(
                    f"reactor {run.reactor_name}, step {name!r}: the correlation id "
                    f"{correlation!r} is taken by execution {other}, which is paused at an "
                    "interrupt of the same reactor; a correlation id finds one paused run: "
                    "resume or cancel that one first, or make the correlation_id function "
                    "tell the two runs apart",
                    correlation_id=correlation,
                    execution_id=other,
                    reactor=run.reactor_name,
                    step=name,
                )
                return _failed(run, name, error, started)
        info = InterruptPause(correlation_id=correlation, deadline=deadline, at=started)
        pauses[path] = info
    elif info.deadline is not None and time.time() >= info.deadline:
        pauses.pop(path, None)
        root.paused_at = None
        timeout = options_of(plan.declaration).timeout
        error = InterruptTimeoutError(
            f"reactor {run.reactor_name}, step {name!r}: nobody resumed the run within the "
            f"interrupt's timeout ({timeout:g} s); resume it sooner, or raise timeout=",
            correlation_id=info.correlation_id,
            execution_id=root.execution_id,
            reactor=run.reactor_name,
            step=name,
        )
        return _failed(run, name, error, started)
    root.paused_at = path
    now = time.time()
    root.trace.append(
        {
            "type": TraceKind.PAUSED.value,
            "step": path,
            "started_at": now,
            "finished_at": now,
            "correlation_id": info.correlation_id,
            "deadline": info.deadline,
        }
    )
    run.emit(
        ev.StepPaused,
        path,
        correlation_id=info.correlation_id,
        deadline=info.deadline or 0.0,
    )
    return Paused(path, info.correlation_id, info.deadline)


def _correlation_id(run: Run, plan: StepPlan) -> str | None:
    """The correlation id the interrupt names for this run's inputs, or None.

    Raises:
        InterruptError: the function raised, or gave an empty id.
    """
    spec = options_of(plan.declaration).correlation_id
    if spec is None or isinstance(spec, str):
        return spec
    where = f"reactor {run.reactor_name}, step {plan.name!r}"
    inputs: Mapping[str, Any] = MappingProxyType(dict(run.context.inputs))
    try:
        value = spec(inputs)
    except Exception as exc:
        raise InterruptError(
            f"{where}: the correlation_id function raised {type(exc).__name__}: {exc} (it "
            f"receives the reactor's inputs: {', '.join(map(repr, sorted(inputs))) or 'none'})",
            reactor=run.reactor_name,
            step=plan.name,
        ) from exc
    if value is None or value == "" or isinstance(value, bool) or not isinstance(value, str | int):
        raise InterruptError(
            f"{where}: the correlation_id function returned {value!r}; it must return a "
            "non-empty str (or an int)",
            reactor=run.reactor_name,
            step=plan.name,
        )
    return str(value)


def _failed(run: Run, name: str, error: InterruptError, started: float) -> StepFailure:
    run.record(TraceKind.FAILED, name, started, attempt=0, error=error_text(error))
    run.emit(ev.StepFailed, name, attempt=0, error=error)
    return StepFailure(name, error, retryable=False, work_started=False)
