"""The store reads both of the dashboard's read models start from: which executions have not
ended, an execution's stored context, and the server's clock.

They sit below ``views.executions`` (the listing and one execution's detail, whose holds the
coordination view reads) and ``views.coordination`` (every hold, which walks the live
executions), so each of those imports this module and ``executions`` imports
``coordination``, one way. ``to_json`` is how a view becomes JSON (the dashboard's API and the
command line's ``--json``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from py_reactor.engine.serializer import loads_context
from py_reactor.errors import SerializationError
from py_reactor.runtime.execution import TERMINAL
from py_reactor.storage.executions import ExecutionStore, StoredExecution
from py_reactor.storage.inspect import Inspector
from py_reactor.storage.redis import RedisStore

__all__ = ["BATCH", "SCAN_IDS", "live_executions", "load_context", "now_ms"]

#: How many execution ids one listing request reads at most while it filters.
SCAN_IDS = 5000

#: Execution ids read per pipelined round trip.
BATCH = 200


def live_executions(store: RedisStore) -> Iterator[StoredExecution]:
    """The stored executions that have not ended (leased, due, or not terminal in the index)."""
    inspector = Inspector(store)
    in_flight = inspector.in_flight()
    ids = dict.fromkeys(in_flight.leased)
    ids.update(dict.fromkeys(execution_id for execution_id, _ in in_flight.due))
    newest = inspector.newest_ids(0, SCAN_IDS)
    for start in range(0, len(newest), BATCH):
        batch = newest[start : start + BATCH]
        for execution_id, head in zip(batch, inspector.heads(batch), strict=True):
            if head.status is not None and head.status not in TERMINAL:
                ids[execution_id] = None
    executions = ExecutionStore(store)
    for execution_id in ids:
        stored = executions.load(execution_id)
        if stored is not None and stored.status not in TERMINAL:
            yield stored


def load_context(stored: StoredExecution) -> Any:
    """The execution's stored context, or None when it cannot be read here (the dashboard
    shows the record without it rather than failing the page)."""
    try:
        return loads_context(stored.context)
    except SerializationError:
        return None


def now_ms(store: RedisStore) -> int:
    """The server clock in ms (holds expire on it, so ttls are computed against it)."""
    return Inspector(store).server_ms()


def finite(value: Any) -> Any:
    """``value`` with infinite and NaN floats as None (JSON has no such numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def to_json(value: Any, *, indent: int | None = None) -> str:
    """A view as JSON text, as the dashboard's API and ``--json`` give it: never failing on a
    value JSON cannot encode (shown as its ``repr``), infinities and NaN as null."""
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(
        finite(value), ensure_ascii=False, separators=separators, default=repr, indent=indent
    )
