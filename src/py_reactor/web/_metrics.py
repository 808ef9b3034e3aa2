"""``GET /metrics``: the store's state in the Prometheus text format, read at scrape time.

The numbers come from the dashboard's own read models, never from raw Redis: the execution
index (``storage.inspect``: each record's status and reactor, read in pipelined batches), the
parked view (``views.executions.parked``) and the coordination view
(``views.coordination.coordination``). Each app registers one collector on a registry of its
own (not prometheus-client's global default registry), so two dashboards in one process never
clash and a scrape reads exactly one store.

prometheus-client is part of the ``web`` extra but is imported on the first scrape, so a
dashboard without it still serves every page and answers ``/metrics`` with a 501 that says
what to install.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from py_reactor.errors import StoreUnavailableError
from py_reactor.states import Status
from py_reactor.storage.inspect import Inspector
from py_reactor.storage.redis import RedisStore
from py_reactor.views import coordination as _coordination
from py_reactor.views import executions as _executions

__all__ = ["HELD_PRIMITIVES", "Metrics", "StoreCollector", "namespace_of"]

#: The primitives a hold can be of (a rate limit charges calls but holds nothing).
HELD_PRIMITIVES = ("lock", "semaphore", "period", "ordered_lock")

#: The label of a stored status that is not one of ``Status`` (a damaged record).
UNKNOWN_STATUS = "unknown"

#: Execution ids read per pipelined round trip while counting.
_BATCH = 1000


def namespace_of(reactor: str | None, stored: str | None = None) -> str:
    """The namespace label of an execution: the one its record names (``stored``), else
    the default of its reactor path, the top-level package of its module (``shop`` for
    ``shop.reactors:Checkout``: a record written before namespaces were stored); ``""`` for a
    record naming neither."""
    if stored:
        return stored
    module = (reactor or "").partition(":")[0]
    return module.partition(".")[0]


class StoreCollector:
    """A prometheus-client collector (duck-typed: ``collect`` and ``describe``) that reads
    the store each time it is scraped."""

    def __init__(self, store: Callable[[], RedisStore]) -> None:
        self._store = store

    def describe(self) -> list[Any]:
        """Nothing: registering the collector must not read the store (a scrape does)."""
        return []

    def collect(self) -> Iterator[Any]:
        """The four gauge families, read from the store now."""
        from prometheus_client.core import GaugeMetricFamily

        store = self._store()
        executions = GaugeMetricFamily(
            "py_reactor_executions",
            "Stored executions by namespace (the application: by default its reactor module's "
            "top-level package) and status.",
            labels=["namespace", "status"],
        )
        for (namespace, status), count in sorted(execution_counts(store).items()):
            executions.add_metric([namespace, status], count)

        parked = _executions.parked(store)
        waiting = GaugeMetricFamily(
            "py_reactor_parked",
            "Executions parked (status waiting) by namespace and the primitive they wait on.",
            labels=["namespace", "primitive"],
        )
        oldest = GaugeMetricFamily(
            "py_reactor_oldest_waiting_seconds",
            "Seconds the longest-parked execution of each namespace has been waiting.",
            labels=["namespace"],
        )
        by_primitive: Counter[tuple[str, str]] = Counter()
        since: dict[str, float] = {}
        for item in parked["parked"]:
            namespace = namespace_of(item["reactor"], item.get("namespace"))
            by_primitive[namespace, str(item["primitive"])] += 1
            if item["since"] is not None:
                since[namespace] = min(since.get(namespace, item["since"]), item["since"])
        for (namespace, primitive), count in sorted(by_primitive.items()):
            waiting.add_metric([namespace, primitive], count)
        now = parked["server_time"]
        for namespace, first in sorted(since.items()):
            oldest.add_metric([namespace], max(0.0, now - first))

        holds = GaugeMetricFamily(
            "py_reactor_holds",
            "Live holds in the store by primitive (ordered-lock positions whose turn came).",
            labels=["primitive"],
        )
        held = Counter(
            hold["primitive"]
            for hold in _coordination.coordination(store)["holds"]
            if hold["live"] and hold["state"] == "held"
        )
        for primitive in sorted({*HELD_PRIMITIVES, *held}):
            holds.add_metric([primitive], held[primitive])
        yield from (executions, waiting, holds, oldest)


def execution_counts(store: RedisStore) -> dict[tuple[str, str], int]:
    """How many stored executions each (namespace, status) has. Every status of a namespace
    that has any execution is present (0 when none), so a series never vanishes when its
    last execution changes status; a status the store holds that is not a ``Status`` counts
    as ``"unknown"``."""
    inspector = Inspector(store)
    counts: Counter[tuple[str, str]] = Counter()
    namespaces: set[str] = set()
    known = {str(status) for status in Status}
    position = 0
    while ids := inspector.newest_ids(position, _BATCH):
        position += len(ids)
        for head in inspector.heads(ids):
            if head.status is None and head.reactor is None:
                continue  # removed since the index was read
            namespace = namespace_of(head.reactor, head.namespace)
            namespaces.add(namespace)
            status = head.status if head.status in known else UNKNOWN_STATUS
            counts[namespace, str(status)] += 1
    for namespace in namespaces:
        for status in Status:
            counts.setdefault((namespace, str(status)), 0)
    return dict(counts)


class Metrics:
    """One app's metrics: its own registry with one ``StoreCollector``, made on first scrape."""

    def __init__(self, store: Callable[[], RedisStore]) -> None:
        self._store = store
        self._registry: Any = None
        self._lock = threading.Lock()

    def registry(self) -> Any:
        """The app's ``prometheus_client.CollectorRegistry`` (ImportError without the
        library)."""
        with self._lock:
            if self._registry is None:
                from prometheus_client import CollectorRegistry

                registry = CollectorRegistry(auto_describe=False)
                registry.register(StoreCollector(self._store))
                self._registry = registry
            return self._registry

    def response(self, request: Request) -> Response:
        """The scrape, as the response to ``GET /metrics`` (the text format; OpenMetrics when
        the ``Accept`` header asks for it): a 501 that names the package when
        prometheus-client is not installed, a 503 when the store cannot be read."""
        try:
            from prometheus_client.exposition import choose_encoder

            registry = self.registry()
        except ImportError as exc:
            if (exc.name or "").partition(".")[0] != "prometheus_client":
                raise
            return PlainTextResponse(
                "/metrics needs prometheus-client, part of the 'web' extra: "
                "pip install 'py_reactor[web]' (or pip install prometheus-client)\n",
                status_code=501,
            )
        # The text format, or OpenMetrics when the scraper's Accept header asks for it.
        encode, media_type = choose_encoder(request.headers.get("accept", ""))
        try:
            body = encode(registry)
        except StoreUnavailableError as exc:
            error: Exception = exc
        except Exception as exc:
            found = self._store().read_error(exc, "a scrape of /metrics")
            if found is None:
                raise
            error = found
        else:
            return Response(body, headers={"content-type": media_type})
        return PlainTextResponse(f"{error}\n", status_code=503)
