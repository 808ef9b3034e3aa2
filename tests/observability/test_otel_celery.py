"""The OpenTelemetry trace context crosses into a real Celery worker process.

One ``py-reactor worker`` (prefork, one pool process) serves a queue of this module's own, on
the session's private redis-server as store and broker. It imports ``_otel_celery_worker``,
which configures the middleware there with an exporter that writes each finished span as JSON
to Redis; the test process collects its own spans with the SDK's in-memory exporter. The
worker's spans are read once its ``reactor`` span is in Redis: it ends last (at the end of the
worker run, after the outcome is stored), and its steps' spans were written before it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from py_reactor import configure
from py_reactor.engine.serializer import loads_context
from py_reactor.observability import OpenTelemetryMiddleware
from py_reactor.observability.otel import TRACE_CONTEXT_KEY
from py_reactor.storage import current_store
from py_reactor.storage.executions import ExecutionStore
from tests._redis import PrivateRedis
from tests._wait import until
from tests.observability._otel_celery_worker import SPANS, Traced
from tests.transport._harness import Worker, on_queue

#: The queue this module's worker serves (no other module's worker takes these jobs).
QUEUE = f"otel-celery-{uuid.uuid4().hex[:8]}"
WORKER_MODULE = "tests.observability._otel_celery_worker"
STEPS = ["step Traced.first", "step Traced.second"]


@pytest.fixture(scope="module")
def otel_worker(private_redis: PrivateRedis) -> Iterator[Worker]:
    """``py-reactor worker --import _otel_celery_worker`` on this module's queue, one pool
    process (the harness's worker: the test's own ``PYTHONPATH`` stays behind the project
    root)."""
    worker = Worker(private_redis.url, QUEUE, concurrency=1, imports=WORKER_MODULE)
    try:
        worker.wait_ready()
        yield worker
    finally:
        worker.stop()


@pytest.fixture(autouse=True)
def _on_celery(_default_settings: None, otel_worker: Worker, redis_url: str) -> None:
    """Dispatch to this module's queue (and no thread worker of this process competes)."""
    on_queue(redis_url, QUEUE)


@dataclass
class Local:
    """The test process's tracer provider and the in-memory exporter of its spans."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    def of(self, execution_id: str) -> list[ReadableSpan]:
        """The finished spans of ``execution_id`` in this process."""
        return [
            s
            for s in self.exporter.get_finished_spans()
            if (s.attributes or {}).get("py_reactor.execution_id") == execution_id
        ]


@pytest.fixture
def local() -> Iterator[Local]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Local(provider, exporter)
    provider.shutdown()


def hex_span(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.span_id, "016x")


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def worker_spans(raw: redis.Redis, execution_id: str, worker: Worker) -> list[dict[str, Any]]:
    """The execution's spans from the worker, in the order they ended, once its ``reactor``
    span (the last to end) has been written."""

    def written() -> list[dict[str, Any]] | None:
        found = [json.loads(e) for e in raw.lrange(SPANS.format(execution_id), 0, -1)]
        return found if any(s["name"] == "reactor Traced" for s in found) else None

    try:
        return until(written, "the worker's reactor span is written", timeout=10)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the worker's log:\n{worker.output()}") from None


def stored_carried(execution_id: str) -> dict[str, Any]:
    stored = ExecutionStore(current_store()).load(execution_id)
    assert stored is not None
    return loads_context(stored.context).carried


def test_the_worker_process_continues_the_callers_trace(
    local: Local, raw: redis.Redis, otel_worker: Worker
) -> None:
    """The caller's dispatch span (producer, under the test's own span) is the remote parent
    of the worker process's reactor span (consumer); the worker's step spans are inside that
    one; caller and worker spans are one trace."""
    configure(middleware=[OpenTelemetryMiddleware(tracer_provider=local.provider)])
    with local.provider.get_tracer("tests").start_as_current_span("caller") as caller:
        out = Traced.run(n=4)
    assert out.status == "dispatched", getattr(out, "error", None)
    done = out.wait(timeout=10)
    assert done.is_success, done
    assert done.value == 50
    execution = out.execution_id
    trace_hex = format(caller.get_span_context().trace_id, "032x")

    mine = local.of(execution)
    assert [s.name for s in mine] == ["dispatch Traced"]  # nothing of the run in this process
    (dispatch,) = mine
    assert dispatch.kind is SpanKind.PRODUCER
    assert dispatch.parent is not None
    assert dispatch.parent.span_id == caller.get_span_context().span_id
    assert hex_trace(dispatch) == trace_hex
    assert (dispatch.attributes or {}).get("py_reactor.worker") == "celery"
    carrier = stored_carried(execution)[TRACE_CONTEXT_KEY]
    _version, stored_trace, stored_parent, _flags = carrier["traceparent"].split("-")
    assert (stored_trace, stored_parent) == (trace_hex, hex_span(dispatch))

    theirs = worker_spans(raw, execution, otel_worker)
    assert [s["name"] for s in theirs] == [*STEPS, "reactor Traced"]
    assert {s["pid"] for s in theirs} != {os.getpid()}
    assert len({s["pid"] for s in theirs}) == 1  # one pool process ran the whole run
    *steps, reactor = theirs
    assert reactor["kind"] == "CONSUMER"
    assert reactor["parent_span_id"] == hex_span(dispatch)
    assert reactor["parent_is_remote"] is True
    assert reactor["attributes"]["py_reactor.execution_id"] == execution
    assert reactor["attributes"]["py_reactor.resumed"] is False
    for span in steps:
        assert span["kind"] == "INTERNAL"
        assert span["parent_span_id"] == reactor["span_id"]
        assert span["status"] == "UNSET"
    assert {s["trace_id"] for s in theirs} == {trace_hex}


def test_a_run_dispatched_without_the_middleware_is_a_new_trace_in_the_worker(
    local: Local, raw: redis.Redis, otel_worker: Worker
) -> None:
    """No middleware in the caller: nothing is stored for the worker, whose reactor span
    (consumer) is the root of a trace of its own, its step spans inside it; the run
    succeeds. The caller's ambient span does not leak into the worker."""
    with local.provider.get_tracer("tests").start_as_current_span("caller") as caller:
        out = Traced.run(n=2)
    done = out.wait(timeout=10)
    assert done.is_success, done
    assert done.value == 30
    execution = out.execution_id
    assert TRACE_CONTEXT_KEY not in stored_carried(execution)

    theirs = worker_spans(raw, execution, otel_worker)
    assert [s["name"] for s in theirs] == [*STEPS, "reactor Traced"]
    *steps, reactor = theirs
    assert reactor["kind"] == "CONSUMER"
    assert reactor["parent_span_id"] is None
    assert reactor["status"] == "UNSET"
    for span in steps:
        assert span["parent_span_id"] == reactor["span_id"]
        assert span["trace_id"] == reactor["trace_id"]
    assert reactor["trace_id"] != format(caller.get_span_context().trace_id, "032x")
