"""OpenTelemetry spans for reactors, steps, rollback, dispatch and parks, built from events.

``configure(middleware=[OpenTelemetryMiddleware()])`` (the ``otel`` extra) turns
the lifecycle events of every execution into spans on the application's tracer provider::

    reactor Checkout                      (an execution's run in this process)
    ├── step Checkout.reserve             (one per attempt; lock keys and fencing tokens)
    ├── step Checkout.charge              (failed: the exception recorded)
    ├── rollback Checkout
    │   ├── compensate Checkout.charge
    │   └── undo Checkout.reserve
    └── dispatch Checkout.notify          (an async unit handed to a worker)

A run handed to a worker continues the caller's trace: the dispatch span's context is stored
with the execution (``context.carried``), and the worker's ``reactor`` span is its child, in
another thread or another process alike. A park ends the worker's span (``park`` span,
``py_reactor.parked``); the run that resumes it is a new ``reactor`` span in the same trace,
linked to the park, with ``py_reactor.waited_ms``.

Events arrive in order per execution, so each execution keeps a stack of open spans (keyed by
its id; composed children and async units have ids of their own). A step's span is current
while its body runs, so spans the step's own code starts nest under it. Only the
opentelemetry-api is used; the application brings the SDK and its exporters.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextvars import Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "py_reactor.observability.otel needs OpenTelemetry, which is not installed: "
        f'pip install -e ".[otel]" in your py_reactor checkout ({exc})'
    ) from exc

from py_reactor.config import get_config
from py_reactor.errors import CoordinationError, StaleExecution
from py_reactor.observability import events as ev
from py_reactor.observability.middleware import Middleware
from py_reactor.observability.propagation import HandoffHooks, qualname_of, wake_of
from py_reactor.states import Status as ExecutionStatus  # Status is OpenTelemetry's here
from py_reactor.version import __version__

if TYPE_CHECKING:
    from py_reactor.engine.context import Context

__all__ = ["PARK_LINK_KEY", "TRACE_CONTEXT_KEY", "OpenTelemetryMiddleware"]

#: ``context.carried`` of a dispatched execution: the W3C trace context of its dispatch span.
TRACE_CONTEXT_KEY = "otel.trace_context"
#: ``context.carried`` of a parked execution: the trace context of its last park span.
PARK_LINK_KEY = "otel.trace_park"

_sequence = itertools.count()


@dataclass(eq=False, slots=True)
class _Frame:
    """One open span of one execution."""

    span: Span
    kind: str  # reactor | step | rollback | compensate | undo | dispatch
    execution_id: str
    step: str | None
    thread: int
    token: Token[otel_context.Context] | None  # while the span is current in ``thread``
    seq: int = field(default_factory=lambda: next(_sequence))
    started: bool = True  # a step span opened by its coordination waits for StepStarted
    awaiting_start: bool = False  # a worker run's reactor span, before any ReactorStarted
    holds: int = 0  # reactor-level locks and slots taken and not yet released
    closing: bool = False  # the run ended; the span ends once those are released
    ended: bool = False


@dataclass(eq=False, slots=True)
class _WorkerRun:
    """One worker run of a stored execution in this thread."""

    frame: _Frame
    park: Span | None = None


class OpenTelemetryMiddleware(Middleware, HandoffHooks):
    """Emits OpenTelemetry spans for reactor runs, steps, rollback, dispatch and parks.

    Args:
        tracer_provider: where the spans go; None: the global provider
            (``opentelemetry.trace.set_tracer_provider``).

    Add it to ``configure(middleware=[...])`` in the caller and in every worker process, so that
    both ends of a hand-off report. The trace context travels with the execution through the
    global propagator (W3C ``traceparent`` unless the application set another).

    .. versionadded:: 0.1
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("py_reactor", __version__, tracer_provider=tracer_provider)
        self._lock = threading.RLock()
        self._stacks: dict[str, list[_Frame]] = {}
        self._threads: dict[int, list[_Frame]] = {}
        self._runs: dict[int, list[_WorkerRun]] = {}
        self._closing: dict[int, list[_Frame]] = {}

    # -- spans -------------------------------------------------------------------------------

    def _open(
        self,
        execution_id: str,
        kind: str,
        name: str,
        step: str | None,
        attributes: Mapping[str, Any],
        *,
        parent: otel_context.Context | None = None,
        span_kind: SpanKind = SpanKind.INTERNAL,
        links: Sequence[Link] | None = None,
        current: bool = True,
        started: bool = True,
    ) -> _Frame:
        """Start a span inside the execution's innermost open one (else inside ``parent``,
        else the current context) and push it; ``current``: make it current in this thread."""
        thread = threading.get_ident()
        with self._lock:
            stale = list(self._closing.get(thread, ()))
        for frame in stale:  # its run ended and a release never came (a store error, logged)
            self._end(frame)
        with self._lock:
            stack = self._stacks.setdefault(execution_id, [])
            if stack:
                parent = trace.set_span_in_context(stack[-1].span)
            span = self._tracer.start_span(
                name,
                context=parent,
                kind=span_kind,
                attributes=_clean(attributes),
                links=links,
            )
            token = otel_context.attach(trace.set_span_in_context(span)) if current else None
            frame = _Frame(span, kind, execution_id, step, thread, token, started=started)
            stack.append(frame)
            self._threads.setdefault(thread, []).append(frame)
        return frame

    def _end(self, frame: _Frame) -> None:
        """End ``frame`` and, first, every span opened inside it (later in its execution, or
        later in this thread: a composed child's), innermost first."""
        ending: list[_Frame] = []
        with self._lock:
            self._collect(frame, ending)
        here = threading.get_ident()
        for done in ending:  # outside the lock: an exporter may be slow
            if done.token is not None and done.thread == here:
                otel_context.detach(done.token)
            done.span.end()

    def _collect(self, frame: _Frame, ending: list[_Frame]) -> None:
        """Unregister ``frame`` and what is inside it, appending them innermost first."""
        if frame.ended:
            return
        inner = [f for f in self._stacks.get(frame.execution_id, ()) if f.seq > frame.seq]
        if frame.thread == threading.get_ident() and not frame.closing:
            inner += [f for f in self._threads.get(frame.thread, ()) if f.seq > frame.seq]
        for other in sorted(set(inner), key=lambda f: f.seq, reverse=True):
            self._collect(other, ending)
        frame.ended = True
        _forget(self._stacks, frame.execution_id, frame)
        _forget(self._threads, frame.thread, frame)
        _forget(self._closing, frame.thread, frame)
        ending.append(frame)

    def _finish(self, frame: _Frame) -> None:
        """End a run's ``reactor`` span at the run's end; if reactor-level holds are still to be
        released (their release follows the end event), end what is inside it now and the span
        itself once the last release is reported."""
        if frame.holds <= 0:
            self._end(frame)
            return
        with self._lock:
            inner = [f for f in self._stacks.get(frame.execution_id, ()) if f.seq > frame.seq]
            inner += [f for f in self._threads.get(frame.thread, ()) if f.seq > frame.seq]
        for other in sorted(set(inner), key=lambda f: f.seq, reverse=True):
            self._end(other)
        with self._lock:
            frame.closing = True
            token, frame.token = frame.token, None
            _forget(self._threads, frame.thread, frame)
            self._closing.setdefault(frame.thread, []).append(frame)
        if token is not None and frame.thread == threading.get_ident():
            otel_context.detach(token)

    def _held(self, event: ev.Event, frame: _Frame) -> None:
        """Count a reactor-level acquisition on the run's ``reactor`` span."""
        if _reactor_level(event, frame):
            frame.holds += 1

    def _released(self, event: ev.Event, frame: _Frame) -> None:
        """Count a reactor-level release; the last one ends a span whose run has ended."""
        if not _reactor_level(event, frame):
            return
        frame.holds -= 1
        if frame.closing and frame.holds <= 0:
            self._end(frame)

    def _end_all(self, execution_id: str, **attributes: Any) -> None:
        """End every open span of ``execution_id``, setting ``attributes`` on each."""
        with self._lock:
            frames = list(self._stacks.get(execution_id, ()))
        for frame in frames:
            frame.span.set_attributes(_clean(attributes))
        if frames:
            self._end(frames[0])

    def _innermost(
        self, execution_id: str, kinds: tuple[str, ...], step: str | None
    ) -> _Frame | None:
        """The innermost open span of the execution of one of ``kinds`` for ``step``."""
        with self._lock:
            for frame in reversed(self._stacks.get(execution_id, ())):
                if frame.kind in kinds and _same_step(frame.step, step):
                    return frame
        return None

    def _reactor_frame(self, event: ev.Event) -> _Frame:
        """The execution's reactor span; opened now if this process has none (a run this
        middleware did not see start)."""
        found = self._innermost(event.execution_id, ("reactor",), None)
        if found is None:
            found = self._open(
                event.execution_id, "reactor", f"reactor {event.reactor}", None, _base(event)
            )
        return found

    def _step_frame(self, event: ev.Event, kinds: tuple[str, ...] = ("step",)) -> _Frame:
        """The open span of the event's step; opened now if there is none (a step refused
        before its work: no ``StepStarted``)."""
        found = self._innermost(event.execution_id, kinds, event.step)
        if found is None:
            found = self._open(
                event.execution_id,
                "step",
                f"step {event.reactor}.{event.step}",
                event.step,
                _base(event),
            )
        return found

    def _coordination_frame(self, event: ev.Event, *, opening: bool) -> _Frame | None:
        """Where a coordination event belongs: the span of its step (compensate and undo
        included), else the reactor's. An acquisition (``opening``) for a step with no open
        span opens the step's span: coordination is taken before ``StepStarted``."""
        execution = event.execution_id
        if event.step is None:
            return self._innermost(execution, ("reactor", "rollback"), None) or self._thread_top()
        found = self._innermost(execution, ("step", "compensate", "undo", "dispatch"), event.step)
        if found is not None:
            return found
        rolling_back = self._innermost(execution, ("rollback",), None) is not None
        if opening and not rolling_back:
            return self._open(
                execution,
                "step",
                f"step {event.reactor}.{event.step}",
                event.step,
                _base(event),
                started=False,
            )
        with self._lock:
            stack = self._stacks.get(execution)
            return stack[-1] if stack else self._thread_top()

    def _thread_top(self) -> _Frame | None:
        with self._lock:
            frames = self._threads.get(threading.get_ident())
            return frames[-1] if frames else None

    # -- reactor -----------------------------------------------------------------------------

    def on_reactor_started(self, event: ev.ReactorStarted) -> None:
        """Open the run's ``reactor`` span (a worker run's is open already)."""
        found = self._innermost(event.execution_id, ("reactor",), None)
        if found is not None and found.awaiting_start:
            found.awaiting_start = False
            return
        self._open(event.execution_id, "reactor", f"reactor {event.reactor}", None, _base(event))

    def on_reactor_completed(self, event: ev.ReactorCompleted) -> None:
        """End the ``reactor`` span."""
        self._finish(self._reactor_frame(event))

    def on_reactor_failed(self, event: ev.ReactorFailed) -> None:
        """End the ``reactor`` span as an error, the exception recorded."""
        frame = self._reactor_frame(event)
        if event.step is not None:
            frame.span.set_attribute("py_reactor.failed_step", event.step)
        _fail(frame.span, event.error)
        self._finish(frame)

    def on_reactor_halted(self, event: ev.ReactorHalted) -> None:
        """End the ``reactor`` span (and the halting step's) as halted."""
        if event.step is not None:
            step = self._innermost(event.execution_id, ("step",), event.step)
            if step is not None:
                step.span.set_attributes({"py_reactor.halted": True})
        frame = self._reactor_frame(event)
        frame.span.set_attributes(
            {"py_reactor.halted": True, "py_reactor.halt_reason": event.reason}
        )
        self._finish(frame)

    # -- steps -------------------------------------------------------------------------------

    def on_step_started(self, event: ev.StepStarted) -> None:
        """Open the attempt's ``step`` span (or adopt the one its coordination opened)."""
        found = self._innermost(event.execution_id, ("step",), event.step)
        if found is not None and not found.started:
            found.started = True
            found.span.set_attribute("py_reactor.attempt", event.attempt)
            return
        attributes = {**_base(event), "py_reactor.attempt": event.attempt}
        name = f"step {event.reactor}.{event.step}"
        self._open(event.execution_id, "step", name, event.step, attributes)

    def on_step_completed(self, event: ev.StepCompleted) -> None:
        """End the attempt's ``step`` span."""
        frame = self._step_frame(event)
        frame.span.set_attribute("py_reactor.attempt", event.attempt)
        self._end(frame)

    def on_step_skipped(self, event: ev.StepSkipped) -> None:
        """End the ``step`` span as skipped, with the reason."""
        frame = self._step_frame(event)
        frame.span.set_attributes(
            _clean({"py_reactor.skipped": True, "py_reactor.skip_reason": event.reason})
        )
        self._end(frame)

    def on_step_failed(self, event: ev.StepFailed) -> None:
        """End the ``step`` span (or an async unit's ``dispatch`` span) as an error."""
        frame = self._step_frame(event, ("step", "dispatch"))
        frame.span.set_attribute("py_reactor.attempt", event.attempt)
        _fail(frame.span, event.error)
        self._end(frame)

    def on_step_retried(self, event: ev.StepRetried) -> None:
        """End the failed attempt's ``step`` span as an error; the next attempt gets its own."""
        frame = self._step_frame(event)
        frame.span.set_attributes(
            {"py_reactor.attempt": event.attempt, "py_reactor.retry_delay_s": event.delay}
        )
        _fail(frame.span, event.error)
        self._end(frame)

    # -- rollback ----------------------------------------------------------------------------

    def on_rollback_started(self, event: ev.RollbackStarted) -> None:
        """Open the ``rollback`` span that holds the compensate and the undos."""
        self._open(event.execution_id, "rollback", f"rollback {event.reactor}", None, _base(event))

    def on_rollback_finished(self, event: ev.RollbackFinished) -> None:
        """End the ``rollback`` span; an error if a compensate or undo failed."""
        frame = self._innermost(event.execution_id, ("rollback",), None)
        if frame is None:
            return
        frame.span.set_attribute("py_reactor.rollback_failures", event.failures)
        if event.failures:
            message = f"{event.failures} compensate/undo call(s) failed"
            frame.span.set_status(Status(StatusCode.ERROR, message))
        self._end(frame)

    def on_compensation_started(self, event: ev.CompensationStarted) -> None:
        """Open the ``compensate`` span of the failed step."""
        name = f"compensate {event.reactor}.{event.step}"
        self._open(event.execution_id, "compensate", name, event.step, _base(event))

    def on_compensation_completed(self, event: ev.CompensationCompleted) -> None:
        """End the ``compensate`` span."""
        self._end(self._step_frame(event, ("compensate",)))

    def on_compensation_failed(self, event: ev.CompensationFailed) -> None:
        """End the ``compensate`` span as an error."""
        frame = self._step_frame(event, ("compensate",))
        _fail(frame.span, event.error)
        self._end(frame)

    def on_undo_started(self, event: ev.UndoStarted) -> None:
        """Open the ``undo`` span of a completed step."""
        name = f"undo {event.reactor}.{event.step}"
        self._open(event.execution_id, "undo", name, event.step, _base(event))

    def on_undo_completed(self, event: ev.UndoCompleted) -> None:
        """End the ``undo`` span."""
        self._end(self._step_frame(event, ("undo",)))

    def on_undo_failed(self, event: ev.UndoFailed) -> None:
        """End the ``undo`` span as an error."""
        frame = self._step_frame(event, ("undo",))
        _fail(frame.span, event.error)
        self._end(frame)

    # -- coordination ------------------------------------------------------------------------

    def on_lock_acquired(self, event: ev.LockAcquired) -> None:
        """The lock's key and fencing token on the span of the step (or reactor) holding it."""
        frame = self._coordination_frame(event, opening=True)
        if frame is not None:
            self._held(event, frame)
            frame.span.set_attributes(
                {
                    "py_reactor.lock.key": event.key,
                    "py_reactor.lock.fencing_token": event.fencing_token,
                }
            )
            frame.span.add_event(
                event.name, {"key": event.key, "fencing_token": event.fencing_token}
            )

    def on_lock_released(self, event: ev.LockReleased) -> None:
        """A span event; ``py_reactor.lock.lost`` when the hold had expired first."""
        frame = self._coordination_frame(event, opening=False)
        if frame is not None:
            if event.lost:
                frame.span.set_attribute("py_reactor.lock.lost", True)
            frame.span.add_event(event.name, {"key": event.key, "lost": event.lost})
            self._released(event, frame)

    def on_lock_acquisition_failed(self, event: ev.LockAcquisitionFailed) -> None:
        """A span event naming the busy key."""
        frame = self._coordination_frame(event, opening=True)
        if frame is not None:
            frame.span.add_event(event.name, {"key": event.key, "error": str(event.error)})

    def on_semaphore_acquired(self, event: ev.SemaphoreAcquired) -> None:
        """The semaphore's key on the span of the step (or reactor) holding a slot."""
        frame = self._coordination_frame(event, opening=True)
        if frame is not None:
            self._held(event, frame)
            frame.span.set_attribute("py_reactor.semaphore.key", event.key)
            frame.span.add_event(event.name, {"key": event.key})

    def on_semaphore_released(self, event: ev.SemaphoreReleased) -> None:
        """A span event; ``py_reactor.semaphore.lost`` when the lease had expired first."""
        frame = self._coordination_frame(event, opening=False)
        if frame is not None:
            if event.lost:
                frame.span.set_attribute("py_reactor.semaphore.lost", True)
            frame.span.add_event(event.name, {"key": event.key, "lost": event.lost})
            self._released(event, frame)

    def on_semaphore_acquisition_failed(self, event: ev.SemaphoreAcquisitionFailed) -> None:
        """A span event naming the full semaphore."""
        frame = self._coordination_frame(event, opening=True)
        if frame is not None:
            frame.span.add_event(event.name, {"key": event.key, "error": str(event.error)})

    def on_rate_limit_acquired(self, event: ev.RateLimitAcquired) -> None:
        """The rate limit's key on the span of the step (or reactor) it was charged to; a charge
        has no release, so it is not counted as a hold the reactor span waits for."""
        frame = self._coordination_frame(event, opening=True)
        if frame is not None:
            frame.span.set_attribute("py_reactor.rate_limit.key", event.key)
            frame.span.add_event(event.name, {"key": event.key})

    def on_rate_limit_acquisition_failed(self, event: ev.RateLimitAcquisitionFailed) -> None:
        """A span event naming the full rate limit."""
        self._refused(event, event.key, event.error)

    def on_period_acquired(self, event: ev.PeriodAcquired) -> None:
        """The period's key on the span of the step (or reactor) that claimed its bucket."""
        self._acquired(event, "period", event.key)

    def on_period_released(self, event: ev.PeriodReleased) -> None:
        """A span event; ``py_reactor.period.lost`` when the claim had lapsed first."""
        self._given_back(event, "period", event.key, event.lost)

    def on_period_acquisition_failed(self, event: ev.PeriodAcquisitionFailed) -> None:
        """A span event naming the period whose bucket another owner runs."""
        self._refused(event, event.key, event.error)

    def on_ordered_lock_acquired(self, event: ev.OrderedLockAcquired) -> None:
        """The ordered lock's key on the span of the step (or reactor) whose turn came."""
        self._acquired(event, "ordered_lock", event.key)

    def on_ordered_lock_released(self, event: ev.OrderedLockReleased) -> None:
        """A span event; ``py_reactor.ordered_lock.lost`` when the turn had been skipped."""
        self._given_back(event, "ordered_lock", event.key, event.lost)

    def on_ordered_lock_acquisition_failed(self, event: ev.OrderedLockAcquisitionFailed) -> None:
        """A span event naming the ordered lock whose turn did not come."""
        self._refused(event, event.key, event.error)

    def _acquired(self, event: ev.Event, primitive: str, key: str) -> None:
        """A hold taken: its key on the span holding it (counted on a reactor's span)."""
        frame = self._coordination_frame(event, opening=True)
        if frame is not None:
            self._held(event, frame)
            frame.span.set_attribute(f"py_reactor.{primitive}.key", key)
            frame.span.add_event(event.name, {"key": key})

    def _given_back(self, event: ev.Event, primitive: str, key: str, lost: bool) -> None:
        """A hold released: a span event, and ``py_reactor.<primitive>.lost`` if it lapsed."""
        frame = self._coordination_frame(event, opening=False)
        if frame is not None:
            if lost:
                frame.span.set_attribute(f"py_reactor.{primitive}.lost", True)
            frame.span.add_event(event.name, {"key": key, "lost": lost})
            self._released(event, frame)

    def _refused(self, event: ev.Event, key: str, error: Any) -> None:
        """A refused acquisition: a span event naming the key and the error."""
        frame = self._coordination_frame(event, opening=True)
        if frame is not None:
            frame.span.add_event(event.name, {"key": key, "error": str(error)})

    # -- parks and dispatch -----------------------------------------------------------------

    def on_step_parked(self, event: ev.StepParked) -> None:
        """A ``park`` span under the step's; the execution's spans end, marked parked."""
        self._parked(event, self._step_frame(event), event)

    def on_reactor_parked(self, event: ev.ReactorParked) -> None:
        """A ``park`` span under the reactor's; the execution's spans end, marked parked."""
        self._parked(event, None, event)

    def on_step_paused(self, event: ev.StepPaused) -> None:
        """The execution's spans end, marked paused (a resume starts new ones)."""
        self._end_all(
            event.execution_id,
            **{"py_reactor.paused": True, "py_reactor.paused.step": event.step or ""},
        )

    def _parked(
        self, event: ev.Event, where: _Frame | None, park: ev.StepParked | ev.ReactorParked
    ) -> None:
        if where is None:
            where = self._reactor_frame(event)
        name = "park " + event.reactor + ("" if event.step is None else f".{event.step}")
        span = self._tracer.start_span(
            name,
            context=trace.set_span_in_context(where.span),
            attributes=_clean(
                {
                    **_base(event),
                    "py_reactor.parked": True,
                    "py_reactor.coordination.primitive": park.primitive,
                    "py_reactor.coordination.key": park.key,
                    "py_reactor.park.attempt": park.attempt,
                    "py_reactor.park.until": park.until,
                }
            ),
        )
        span.end()
        with self._lock:
            runs = self._runs.get(threading.get_ident())
            if runs:
                runs[-1].park = span
        self._end_all(event.execution_id, **{"py_reactor.parked": True})

    def on_unit_dispatched(self, event: ev.UnitDispatched) -> None:
        """End the async unit's ``dispatch`` span, naming the unit's execution."""
        frame = self._innermost(event.execution_id, ("dispatch",), event.step)
        if frame is None:
            frame = self._open(
                event.execution_id,
                "dispatch",
                f"dispatch {event.reactor}.{event.step}",
                event.step,
                _base(event),
                span_kind=SpanKind.PRODUCER,
                current=False,
            )
        frame.span.set_attribute("py_reactor.unit.execution_id", event.unit_execution_id)
        self._end(frame)

    def on_dispatch(self, context: Context) -> None:
        """Open the ``dispatch`` span and store its trace context with the execution.

        A background run's dispatch ends the caller's spans of it (``py_reactor.dispatched``);
        an async unit's dispatch span ends with ``UnitDispatched`` (or the step's failure).
        """
        origin = context.unit_of
        target = qualname_of(context.reactor)
        attributes: dict[str, Any] = {
            "py_reactor.dispatch.execution_id": context.execution_id,
            "py_reactor.dispatch.reactor": target,
            "py_reactor.worker": get_config().worker,
        }
        if origin is not None:  # an async unit: the span belongs to its dispatcher
            owner, step = origin.execution, origin.step
            reactor = qualname_of(origin.reactor)
            attributes.update(
                {
                    "py_reactor.execution_id": owner,
                    "py_reactor.reactor": reactor,
                    "py_reactor.step": step,
                    "py_reactor.dispatch.kind": "unit",
                    "py_reactor.unit.execution_id": context.execution_id,
                }
            )
            frame = self._open(
                owner, "dispatch", f"dispatch {reactor}.{step}", step, attributes,
                span_kind=SpanKind.PRODUCER, current=False,
            )  # fmt: skip
        else:
            attributes.update(
                {
                    "py_reactor.execution_id": context.execution_id,
                    "py_reactor.reactor": target,
                    "py_reactor.dispatch.kind": "background",
                }
            )
            frame = self._open(
                context.execution_id, "dispatch", f"dispatch {target}", None, attributes,
                span_kind=SpanKind.PRODUCER, current=False,
            )  # fmt: skip
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(frame.span))
        context.carried[TRACE_CONTEXT_KEY] = carrier
        if origin is None:
            self._end(frame)
            self._end_all(context.execution_id, **{"py_reactor.dispatched": True})

    def on_worker_start(self, context: Context) -> None:
        """Open the worker run's ``reactor`` span, a child of the stored dispatch span."""
        execution_id = context.execution_id
        self._end_all(execution_id)  # left over from a run that never reported its end
        carrier = context.carried.get(TRACE_CONTEXT_KEY)
        parent = propagate.extract(carrier) if isinstance(carrier, dict) else None
        links: list[Link] = []
        park = context.carried.pop(PARK_LINK_KEY, None)
        if isinstance(park, dict):
            parked = trace.get_current_span(propagate.extract(park)).get_span_context()
            if parked.is_valid:
                links.append(Link(parked, {"py_reactor.link": "park"}))
        target = qualname_of(context.reactor)
        attributes: dict[str, Any] = {
            "py_reactor.execution_id": execution_id,
            "py_reactor.reactor": target,
            "py_reactor.resumed": context.status is ExecutionStatus.WAITING,
        }
        wake = wake_of(context)
        if wake is not None:
            attributes.update(
                {
                    "py_reactor.waited_ms": round(wake.waited * 1000),
                    "py_reactor.coordination.primitive": wake.primitive,
                    "py_reactor.coordination.key": wake.key,
                    "py_reactor.park.step": wake.step,
                    "py_reactor.park.attempt": wake.attempt,
                }
            )
        frame = self._open(
            execution_id, "reactor", f"reactor {target}", None, attributes,
            parent=parent, span_kind=SpanKind.CONSUMER, links=links,
        )  # fmt: skip
        frame.awaiting_start = True
        if wake is not None:
            frame.span.add_event("wake", _clean({"step": wake.step, "key": wake.key}))
        with self._lock:
            self._runs.setdefault(threading.get_ident(), []).append(_WorkerRun(frame))

    def on_worker_end(self, context: Context, error: BaseException | None) -> None:
        """End every span the worker run left open; a parked run links its next run to the
        park span, through the stored context."""
        with self._lock:
            runs = self._runs.get(threading.get_ident(), [])
            run = next(
                (r for r in reversed(runs) if r.frame.execution_id == context.execution_id), None
            )
            if run is None:
                return
            runs.remove(run)
            if not runs:
                self._runs.pop(threading.get_ident(), None)
        frame = run.frame
        if not frame.ended:
            if error is not None:
                if isinstance(error, StaleExecution):
                    frame.span.set_attribute("py_reactor.stale", True)
                else:
                    _fail(frame.span, error)
            if context.status is ExecutionStatus.WAITING:
                for open_frame in self._inside(frame):
                    open_frame.span.set_attribute("py_reactor.parked", True)
            self._end(frame)
        if run.park is not None and context.status is ExecutionStatus.WAITING:
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(run.park))
            context.carried[PARK_LINK_KEY] = carrier

    def _inside(self, frame: _Frame) -> Iterator[_Frame]:
        with self._lock:
            frames = [f for f in self._threads.get(frame.thread, ()) if f.seq >= frame.seq]
        yield from frames


def _forget(registry: dict[Any, list[_Frame]], key: object, frame: _Frame) -> None:
    """Take ``frame`` off ``registry[key]``, dropping the list once it is empty."""
    frames = registry.get(key)
    if frames is not None and frame in frames:
        frames.remove(frame)
        if not frames:
            del registry[key]


def _reactor_level(event: ev.Event, frame: _Frame) -> bool:
    """Whether a coordination event is about ``frame``'s own reactor-level hold."""
    return (
        event.step is None and frame.kind == "reactor" and frame.execution_id == event.execution_id
    )


def _base(event: ev.Event) -> dict[str, Any]:
    """The attributes every span of the event's execution carries."""
    attributes: dict[str, Any] = {
        "py_reactor.execution_id": event.execution_id,
        "py_reactor.reactor": event.reactor,
    }
    if event.step is not None:
        attributes["py_reactor.step"] = event.step
    return attributes


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` without None values (OpenTelemetry refuses them)."""
    return {k: v for k, v in attributes.items() if v is not None}


def _same_step(frame_step: str | None, step: str | None) -> bool:
    """Whether an event's ``step`` names the frame's: a park names a composed child's step by
    its dotted path from the root (``"kid.charge"``), the child's own events by ``"charge"``."""
    if frame_step == step:
        return True
    return step is not None and frame_step is not None and step.endswith("." + frame_step)


def _fail(span: Span, error: Any) -> None:
    """Mark ``span`` failed with ``error``: an exception is recorded, any other value is text."""
    if isinstance(error, BaseException):
        span.record_exception(error)
        description = f"{type(error).__name__}: {error}"
    else:
        description = str(error)
        span.set_attribute("py_reactor.error", description)
    if isinstance(error, CoordinationError):
        span.set_attributes(
            _clean(
                {
                    "py_reactor.coordination.primitive": error.primitive,
                    "py_reactor.coordination.key": error.key,
                }
            )
        )
    span.set_status(Status(StatusCode.ERROR, description))
