"""What ``test_otel_celery`` has a real ``py-reactor worker`` import (``--import``).

In a worker process (``py-reactor worker`` sets ``PY_REACTOR_REDIS_URL`` before importing this
module), the import configures ``OpenTelemetryMiddleware`` on an SDK tracer provider whose
exporter writes every finished span, as JSON, to the Redis list ``otel-celery-test:<execution
id>`` on the store's server: the spans of one execution, in the order they ended, for the test
to read. Imported by the test process (no ``PY_REACTOR_REDIS_URL``), it only defines the reactor.

The pool processes are forked from the worker's main process after this import; each opens its
own connection to Redis (by pid), and the simple span processor exports as each span ends, so
nothing waits in a buffer a pool process could take down with it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import redis
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from py_reactor import Reactor, Result, background, configure, step
from py_reactor.observability import OpenTelemetryMiddleware

#: The Redis list of the worker spans of one execution: ``SPANS.format(execution_id)``.
SPANS = "otel-celery-test:{}"
#: Where a span without ``py_reactor.execution_id`` goes (none is expected).
UNATTRIBUTED = "otel-celery-test:unattributed"


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """What the test reads of one finished span (ids as lowercase hex, as W3C writes them)."""
    assert span.context is not None
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": format(span.context.trace_id, "032x"),
        "span_id": format(span.context.span_id, "016x"),
        "parent_span_id": None if parent is None else format(parent.span_id, "016x"),
        "parent_trace_id": None if parent is None else format(parent.trace_id, "032x"),
        "parent_is_remote": None if parent is None else parent.is_remote,
        "kind": span.kind.name,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "pid": os.getpid(),
    }


class RedisSpanExporter(SpanExporter):
    """Appends each span's :func:`span_record` to its execution's list on ``url``."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._clients: dict[int, redis.Redis] = {}

    def _client(self) -> redis.Redis:
        pid = os.getpid()  # a connection of this process, never one inherited across a fork
        client = self._clients.get(pid)
        if client is None:
            client = self._clients[pid] = redis.Redis.from_url(self._url, decode_responses=True)
        return client

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        pipe = self._client().pipeline(transaction=False)
        for span in spans:
            execution = (span.attributes or {}).get("py_reactor.execution_id")
            key = UNATTRIBUTED if execution is None else SPANS.format(execution)
            pipe.rpush(key, json.dumps(span_record(span)))
        pipe.execute()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        for client in self._clients.values():
            client.close()


_url = os.environ.get("PY_REACTOR_REDIS_URL")
if _url:  # in the worker
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedisSpanExporter(_url)))
    configure(middleware=[OpenTelemetryMiddleware(tracer_provider=provider)])


@background
class Traced(Reactor):
    """Runs entirely in the worker: ``first``, then ``second`` reading its result."""

    n: int

    @step
    def first(n: int) -> int:
        return n + 1

    @step(x=Result("first"))
    def second(x: int) -> int:
        return x * 10

    returns = "second"
