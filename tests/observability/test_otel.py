"""OpenTelemetry spans from real runs on the real store, collected with the SDK's in-memory
exporter: reactor, step, rollback, compensate, undo, dispatch and park spans, their coordination
attributes, and the trace context a run carries into the thread worker.

Every span is looked up by the execution it belongs to (other tests' executions may still be
finishing on the worker); every park is observed through the stored record, not assumed.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from py_reactor import (
    Failure,
    Lock,
    Reactor,
    Result,
    Step,
    async_step,
    background,
    compose,
    configure,
    find,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
)
from py_reactor.engine.serializer import loads_context
from py_reactor.observability import OpenTelemetryMiddleware
from py_reactor.observability.otel import TRACE_CONTEXT_KEY
from py_reactor.storage import current_store
from py_reactor.storage.executions import ExecutionStore
from tests._wait import status, until

#: test key -> what a step body does (called with the step's name).
HOOKS: dict[str, Callable[[str], Any]] = {}


def hook(key: str, name: str) -> None:
    action = HOOKS.get(key)
    if action is not None:
        action(name)


class CardDeclinedError(Exception):
    """What the failing charge raises."""


class UndoBrokeError(Exception):
    """What the failing undo raises."""


# -- reactors (module level: the worker imports them by module:qualname) ---------------------


class Locked(Reactor):
    """Two steps, each under a step-level lock of its own."""

    key: str

    @step
    @with_lock(lambda a: a["key"], ttl=10)
    def reserve(key: str) -> str:
        hook(key, "reserve")
        return "reserved"

    @step(wait_for=["reserve"])
    @with_lock(lambda a: f"{a['key']}:charge", ttl=10)
    def charge(key: str) -> str:
        hook(key, "charge")
        return "charged"

    returns = "charge"


class Refund(Reactor):
    """``reserve`` and ``note`` complete, ``charge`` (locked) raises: compensate, then undo of
    ``note`` (which raises) and of ``reserve``."""

    key: str

    @step
    def reserve(key: str) -> str:
        return "reserved"

    @reserve.undo
    def _unreserve(result: str, key: str) -> None:
        hook(key, "undo reserve")

    @step(wait_for=["reserve"])
    def note(key: str) -> str:
        return "noted"

    @note.undo
    def _unnote(result: str, key: str) -> None:
        raise UndoBrokeError("the note cannot be removed")

    @step(wait_for=["note"])
    @with_lock(lambda a: a["key"], ttl=10)
    def charge(key: str) -> str:
        raise CardDeclinedError("card declined")

    @charge.compensate
    def _refund(error: Any, key: str) -> None:
        hook(key, "compensate charge")


class Kid(Reactor):
    """A child with a step-level lock on ``key:kid``."""

    key: str

    @step
    @with_lock(lambda a: f"{a['key']}:kid", ttl=10)
    def charge(key: str) -> str:
        return "kid charged"

    returns = "charge"


@with_lock(lambda i: i["key"], ttl=10)
class Parent(Reactor):
    """The lock on ``key`` around the whole run; composes ``Kid``."""

    key: str

    kid = compose(Kid)
    returns = "kid"


@with_ordered_lock(lambda i: f"line:{i['key']}")
@with_period(lambda i: f"daily:{i['key']}", every="day")
@with_rate_limit(lambda i: f"api:{i['key']}", limit=5, period="minute")
class Metered(Reactor):
    """An ordered turn, a daily period and a rate limit around the run, and a period and a
    rate limit of its own on the step."""

    key: str

    @step
    @with_period(lambda a: f"step-daily:{a['key']}", every="day")
    @with_rate_limit(lambda a: f"step-api:{a['key']}", limit=5, period="minute")
    def settle(key: str) -> str:
        return "settled"


#: test key -> attempts made so far by ``Flaky.call``.
ATTEMPTS: dict[str, int] = {}


class Flaky(Reactor):
    """``call`` fails once, then succeeds (no pause between the attempts)."""

    key: str

    @step
    @retries(max_attempts=2, backoff="fixed", base_delay=0)
    def call(key: str) -> Any:
        ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
        return Failure("flaked") if ATTEMPTS[key] == 1 else "ok"


@background
class Whole(Reactor):
    """Runs entirely in the worker."""

    key: str

    @step
    def first(key: str) -> int:
        hook(key, "first")
        return 1

    @step(x=Result("first"))
    def second(key: str, x: int) -> int:
        hook(key, "second")
        return x + 1

    returns = "second"


@background(after="first")
class After(Whole):
    """``first`` in the caller, ``second`` in the worker."""


@background
class ParksOnLock(Reactor):
    """``reserve``, then ``charge`` under the lock on ``key`` (parks while someone holds it)."""

    key: str

    @step
    def reserve(key: str) -> str:
        return "reserved"

    @step(wait_for=["reserve"])
    @with_lock(lambda a: a["key"], ttl=10)
    def charge(key: str) -> str:
        return "charged"

    returns = "charge"


class Work(Step):
    """An async unit: returns n * 10."""

    key: str
    n: int

    def run(self) -> Any:
        hook(self.inputs.key, "work")
        return self.inputs.n * 10


class WithUnit(Reactor):
    """Dispatches ``unit`` to a worker, then ``total`` reads its result (waits in the caller)."""

    key: str
    n: int

    unit = async_step(Work)

    @step(value=Result("unit"))
    def total(value: int) -> int:
        return value + 1

    returns = "total"


# -- fixtures and helpers ----------------------------------------------------------------------


@dataclass
class Spans:
    """The finished spans of this test, and a tracer for the test's own spans."""

    exporter: InMemorySpanExporter
    tracer: trace.Tracer

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def of(self, execution_id: str) -> list[ReadableSpan]:
        """Spans whose ``py_reactor.execution_id`` is ``execution_id``, in start order."""
        found = [s for s in self.all() if attr(s, "py_reactor.execution_id") == execution_id]
        return sorted(found, key=lambda s: s.start_time or 0)

    def named(self, name: str, execution_id: str | None = None) -> list[ReadableSpan]:
        pool = self.all() if execution_id is None else self.of(execution_id)
        return [s for s in pool if s.name == name]

    def one(self, name: str, execution_id: str | None = None) -> ReadableSpan:
        found = self.named(name, execution_id)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {self.describe()}"
        return found[0]

    def describe(self) -> str:
        return ", ".join(f"{s.name}[{attr(s, 'py_reactor.execution_id')}]" for s in self.all())


#: The park timer of these runs: a run resumed within WOKEN_WITHIN of a release was woken by it.
PARK_DELAY = 30.0
WOKEN_WITHIN = 10.0


@pytest.fixture
def spans(redis_url: str) -> Iterator[Spans]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    configure(
        redis_url=redis_url,
        middleware=[OpenTelemetryMiddleware(tracer_provider=provider)],
        park_delay=PARK_DELAY,
        park_jitter=0.0,
    )
    yield Spans(exporter, provider.get_tracer("tests"))
    HOOKS.clear()
    provider.shutdown()


def attr(span: ReadableSpan, name: str) -> Any:
    return (span.attributes or {}).get(name)


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.trace_id


def event_names(span: ReadableSpan) -> list[str]:
    return [e.name for e in span.events]


def exception_types(span: ReadableSpan) -> list[str]:
    return [
        str((e.attributes or {}).get("exception.type"))
        for e in span.events
        if e.name == "exception"
    ]


# -- in the caller -----------------------------------------------------------------------------


def test_step_level_locks_give_step_spans_with_key_and_fencing_token(
    spans: Spans, key: str
) -> None:
    """One reactor span, under the caller's span; a span per step inside it, each carrying its
    lock's key and the fencing token the store issued, with acquire/release span events; the
    step's span is current while its body runs."""
    current: dict[str, trace.SpanContext] = {}
    tokens: dict[str, int] = {}

    def inside(name: str) -> None:  # the span current in the body, the token held there
        current[name] = trace.get_current_span().get_span_context()
        tokens[name] = Lock(key if name == "reserve" else f"{key}:charge").state().fencing_token

    HOOKS[key] = inside
    with spans.tracer.start_as_current_span("caller") as caller:
        out = Locked.run(key=key)
        assert trace.get_current_span() is caller  # the run's spans are no longer current
    assert out.is_success, out
    execution = out.execution_id
    reactor = spans.one("reactor Locked", execution)
    assert parent_of(reactor) == caller.get_span_context().span_id
    assert reactor.status.status_code is StatusCode.UNSET
    reserve = spans.one("step Locked.reserve", execution)
    charge = spans.one("step Locked.charge", execution)
    for span, lock_key, name in ((reserve, key, "reserve"), (charge, f"{key}:charge", "charge")):
        assert parent_of(span) == span_id(reactor)
        assert trace_id(span) == caller.get_span_context().trace_id
        assert attr(span, "py_reactor.step") == name
        assert attr(span, "py_reactor.attempt") == 1
        assert attr(span, "py_reactor.lock.key") == lock_key
        assert attr(span, "py_reactor.lock.fencing_token") == tokens[name] > 0
        assert event_names(span) == ["lock.acquired", "lock.released"]
        assert current[name].span_id == span_id(span)
    first_token = attr(reserve, "py_reactor.lock.fencing_token")
    again = Locked.run(key=key)
    assert attr(spans.one("step Locked.reserve", again.execution_id),
                "py_reactor.lock.fencing_token") > first_token  # fmt: skip


def test_a_composed_child_nests_under_its_step_and_reactor_locks_sit_on_the_reactor_span(
    spans: Spans, key: str
) -> None:
    """The reactor-level lock's key and token are on the parent's reactor span; the child's
    reactor span (its own execution id) is inside the parent's ``kid`` step span, and the
    child's locked step inside that."""
    out = Parent.run(key=key)
    assert out.is_success, out
    parent = spans.one("reactor Parent", out.execution_id)
    assert attr(parent, "py_reactor.lock.key") == key
    assert attr(parent, "py_reactor.lock.fencing_token") > 0
    assert event_names(parent) == ["lock.acquired", "lock.released"]
    kid_step = spans.one("step Parent.kid", out.execution_id)
    assert parent_of(kid_step) == span_id(parent)
    (child,) = [s for s in spans.named("reactor Kid") if parent_of(s) == span_id(kid_step)]
    child_id = attr(child, "py_reactor.execution_id")
    assert child_id != out.execution_id
    charge = spans.one("step Kid.charge", child_id)
    assert parent_of(charge) == span_id(child)
    assert attr(charge, "py_reactor.lock.key") == f"{key}:kid"


def test_rate_limit_period_and_ordered_lock_keys_and_events_sit_on_their_spans(
    spans: Spans, key: str
) -> None:
    """The reactor's ordered lock, period and rate limit are on its span (keys and span events),
    the step's own period and rate limit on the step's; a rate limit has no release, and the
    reactor span still ends once its period and turn are given back."""
    out = Metered.run(key=key)
    assert out.is_success, out
    reactor = spans.one("reactor Metered", out.execution_id)
    assert attr(reactor, "py_reactor.ordered_lock.key") == f"line:{key}"
    assert attr(reactor, "py_reactor.period.key") == f"daily:{key}"
    assert attr(reactor, "py_reactor.rate_limit.key") == f"api:{key}"
    assert event_names(reactor) == [
        "ordered_lock.acquired",
        "period.acquired",
        "rate_limit.acquired",
        "period.released",
        "ordered_lock.released",
    ]
    settle = spans.one("step Metered.settle", out.execution_id)
    assert parent_of(settle) == span_id(reactor)
    assert attr(settle, "py_reactor.period.key") == f"step-daily:{key}"
    assert attr(settle, "py_reactor.rate_limit.key") == f"step-api:{key}"
    assert event_names(settle) == ["period.acquired", "rate_limit.acquired", "period.released"]


def test_a_failure_records_the_exception_and_nests_compensate_and_undo_in_rollback(
    spans: Spans, key: str
) -> None:
    """The failing step's span and the reactor's are errors with the exception recorded; a
    rollback span holds the compensate (under the step's kept lock) and the undos, newest
    first; the undo that raised is an error, and so is the rollback."""
    out = Refund.run(key=key)
    assert not out.is_success
    execution = out.execution_id
    reactor = spans.one("reactor Refund", execution)
    assert reactor.status.status_code is StatusCode.ERROR
    assert exception_types(reactor) == [f"{__name__}.CardDeclinedError"]
    assert attr(reactor, "py_reactor.failed_step") == "charge"
    charge = spans.one("step Refund.charge", execution)
    assert charge.status.status_code is StatusCode.ERROR
    assert "card declined" in (charge.status.description or "")
    assert exception_types(charge) == [f"{__name__}.CardDeclinedError"]
    assert attr(charge, "py_reactor.lock.key") == key
    rollback = spans.one("rollback Refund", execution)
    assert parent_of(rollback) == span_id(reactor)
    assert attr(rollback, "py_reactor.rollback_failures") == 1
    assert rollback.status.status_code is StatusCode.ERROR
    inside = [s for s in spans.of(execution) if parent_of(s) == span_id(rollback)]
    assert [s.name for s in inside] == [
        "compensate Refund.charge",
        "undo Refund.note",
        "undo Refund.reserve",
    ]
    compensate, undo_note, undo_reserve = inside
    assert compensate.status.status_code is StatusCode.UNSET
    assert undo_note.status.status_code is StatusCode.ERROR
    assert exception_types(undo_note) == [f"{__name__}.UndoBrokeError"]
    assert undo_reserve.status.status_code is StatusCode.UNSET
    assert "lock.released" in event_names(rollback)  # the kept lock, released after compensate


def test_each_attempt_of_a_retried_step_is_its_own_span(spans: Spans, key: str) -> None:
    """Attempt 1 failed (an error, with the retry delay), attempt 2 succeeded."""
    out = Flaky.run(key=key)
    assert out.is_success, out
    attempts = spans.named("step Flaky.call", out.execution_id)
    assert [attr(s, "py_reactor.attempt") for s in attempts] == [1, 2]
    assert [s.status.status_code for s in attempts] == [StatusCode.ERROR, StatusCode.UNSET]
    assert attr(attempts[0], "py_reactor.error") == "flaked"
    assert attr(attempts[0], "py_reactor.retry_delay_s") == 0


# -- into the worker ---------------------------------------------------------------------------


def test_a_background_run_continues_the_callers_trace_in_the_thread_worker(
    spans: Spans, key: str
) -> None:
    """The dispatch span (producer) is a child of the caller's span; the worker's reactor span
    (consumer) a child of the dispatch span; its steps inside it: one trace."""
    with spans.tracer.start_as_current_span("caller") as caller:
        out = Whole.run(key=key)
    done = out.wait(timeout=10)
    assert done.is_success, done
    execution = out.execution_id
    stored = ExecutionStore(current_store()).load(execution)
    assert stored is not None
    assert "traceparent" in loads_context(stored.context).carried[TRACE_CONTEXT_KEY]
    dispatch = spans.one("dispatch Whole", execution)
    assert dispatch.kind is SpanKind.PRODUCER
    assert parent_of(dispatch) == caller.get_span_context().span_id
    assert attr(dispatch, "py_reactor.dispatch.kind") == "background"
    assert attr(dispatch, "py_reactor.worker") == "threads"
    worker = spans.one("reactor Whole", execution)
    assert worker.kind is SpanKind.CONSUMER
    assert parent_of(worker) == span_id(dispatch)
    assert attr(worker, "py_reactor.resumed") is False
    for name in ("step Whole.first", "step Whole.second"):
        assert parent_of(spans.one(name, execution)) == span_id(worker)
    trace_ids = {trace_id(s) for s in spans.of(execution)}
    assert trace_ids == {caller.get_span_context().trace_id}


def test_a_hand_off_ends_the_callers_reactor_span_and_the_worker_goes_on_under_it(
    spans: Spans, key: str
) -> None:
    """``after=``: the caller's reactor span (first step inside, marked dispatched) ends at the
    dispatch; the worker's reactor span is a child of the dispatch span, in the same trace."""
    out = After.run(key=key)
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left current in the caller
    done = out.wait(timeout=10)
    assert done.is_success, done
    execution = out.execution_id
    reactors = spans.named("reactor After", execution)
    assert len(reactors) == 2, spans.describe()
    caller, worker = reactors
    assert attr(caller, "py_reactor.dispatched") is True
    assert caller.kind is SpanKind.INTERNAL
    assert parent_of(spans.one("step After.first", execution)) == span_id(caller)
    dispatch = spans.one("dispatch After", execution)
    assert parent_of(dispatch) == span_id(caller)
    assert parent_of(worker) == span_id(dispatch)
    assert parent_of(spans.one("step After.second", execution)) == span_id(worker)
    assert {trace_id(s) for s in spans.of(execution)} == {trace_id(caller)}


def test_concurrent_worker_runs_keep_their_spans_apart(spans: Spans, key: str) -> None:
    """Six background runs at once on the thread worker: every step span sits inside the
    reactor span of its own execution, in that execution's trace."""
    started = threading.Barrier(3, timeout=10)

    def meet(name: str) -> None:
        if name == "first":
            with contextlib.suppress(threading.BrokenBarrierError):
                started.wait()  # three runs are inside a step at the same moment

    HOOKS[key] = meet
    outs = [Whole.run(key=key) for _ in range(6)]
    for out in outs:
        assert out.wait(timeout=20).is_success
    for out in outs:
        worker = spans.one("reactor Whole", out.execution_id)
        steps = [s for s in spans.of(out.execution_id) if s.name.startswith("step ")]
        assert len(steps) == 2
        assert {parent_of(s) for s in steps} == {span_id(worker)}
        assert {trace_id(s) for s in spans.of(out.execution_id)} == {trace_id(worker)}
    assert len({trace_id(spans.one("reactor Whole", o.execution_id)) for o in outs}) == 6


def test_a_park_ends_the_worker_span_and_the_wake_is_a_linked_span_that_waited(
    spans: Spans, key: str
) -> None:
    """Held lock: the worker's first run parks (step and reactor spans marked parked, a park
    span naming primitive, key, attempt and until under the step's span); the release wakes
    it: a second reactor span in the same trace, resumed, with waited_ms and a link to the
    park span; its charge step carries a fencing token issued after the test's own hold."""
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    began, before = time.monotonic(), time.time()
    out = ParksOnLock.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    released = time.monotonic()
    held.release()
    done = out.wait(timeout=WOKEN_WITHIN)
    assert time.monotonic() - released < WOKEN_WITHIN  # the release woke it, not the 30 s timer
    elapsed_ms = (time.monotonic() - began) * 1000
    assert done.is_success, done
    execution = out.execution_id
    first, second = spans.named("reactor ParksOnLock", execution)
    assert attr(first, "py_reactor.parked") is True
    park = spans.one("park ParksOnLock.charge", execution)
    parked_step, resumed_step = spans.named("step ParksOnLock.charge", execution)
    assert parent_of(park) == span_id(parked_step)
    assert parent_of(parked_step) == span_id(first)
    assert attr(parked_step, "py_reactor.parked") is True
    assert "lock.acquisition_failed" in event_names(parked_step)
    assert attr(park, "py_reactor.coordination.primitive") == "lock"
    assert attr(park, "py_reactor.coordination.key") == key
    assert attr(park, "py_reactor.park.attempt") == 1
    assert before + PARK_DELAY <= attr(park, "py_reactor.park.until") <= time.time() + PARK_DELAY
    assert attr(second, "py_reactor.resumed") is True
    assert 0 < attr(second, "py_reactor.waited_ms") <= elapsed_ms
    assert attr(second, "py_reactor.coordination.key") == key
    assert attr(second, "py_reactor.park.step") == "charge"
    assert "wake" in event_names(second)
    assert [link.context.span_id for link in second.links] == [span_id(park)]
    assert (
        parent_of(second)
        == parent_of(first)
        == span_id(spans.one("dispatch ParksOnLock", execution))
    )
    assert parent_of(resumed_step) == span_id(second)
    assert attr(resumed_step, "py_reactor.lock.fencing_token") > held.fencing_token  # after ours
    assert len({trace_id(s) for s in spans.of(execution)}) == 1


def test_an_async_unit_dispatch_span_parents_the_units_worker_run(spans: Spans, key: str) -> None:
    """The unit's dispatch span sits in the dispatching reactor's span and names the unit's
    execution; the unit's own reactor span, in the worker, is its child: one trace."""
    out = WithUnit.run(key=key, n=4)
    assert out.is_success, out
    assert out.value == 41
    execution = out.execution_id
    reactor = spans.one("reactor WithUnit", execution)
    dispatch = spans.one("dispatch WithUnit.unit", execution)
    assert dispatch.kind is SpanKind.PRODUCER
    assert parent_of(dispatch) == span_id(reactor)
    assert attr(dispatch, "py_reactor.dispatch.kind") == "unit"
    unit_id = attr(dispatch, "py_reactor.unit.execution_id")
    stored = find(unit_id)
    assert stored is not None
    assert stored.status == "completed"
    unit_run = spans.one("reactor WithUnit.unit", unit_id)
    assert unit_run.kind is SpanKind.CONSUMER
    assert parent_of(unit_run) == span_id(dispatch)
    assert parent_of(spans.one("step WithUnit.unit", unit_id)) == span_id(unit_run)
    assert {trace_id(s) for s in [*spans.of(execution), *spans.of(unit_id)]} == {trace_id(reactor)}


def test_without_opentelemetry_installed_background_runs_and_logging_work(redis_url: str) -> None:
    """With every ``opentelemetry`` import refused (as if not installed), a background run with
    the logging middleware goes through both dispatch hooks and succeeds; asking for
    OpenTelemetryMiddleware then fails naming the extra to install."""
    probe = (
        "import importlib.abc, json, sys\n"
        "class Refuse(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "from py_reactor import Reactor, background, configure, step\n"
        "from py_reactor.observability import LoggingMiddleware\n"
        "@background\n"
        "class Probe(Reactor):\n"
        "    @step\n"
        "    def only() -> int:\n"
        "        return 1\n"
        "    returns = 'only'\n"
        "configure(redis_url=sys.argv[1], middleware=[LoggingMiddleware()])\n"
        "done = Probe.run().wait(timeout=30)\n"
        "try:\n"
        "    from py_reactor.observability import OpenTelemetryMiddleware\n"
        "    refused = ''\n"
        "except ImportError as exc:\n"
        "    refused = str(exc)\n"
        "print(json.dumps({'ok': done.is_success, 'refused': refused}))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe, redis_url],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["ok"] is True
    assert 'pip install -e ".[otel]"' in report["refused"]
