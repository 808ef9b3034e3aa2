"""Reading execution records for the dashboard and the command line: the listing, one
execution, the parked ones.

Everything here is read only and works from the store alone (no reactor class is imported):
records come from ``storage.executions``; the listing filters on two fields of each record
(read in one pipelined round trip per batch) before it loads the records it returns. The JSON
shapes are documented in ``docs/operations.md``. The reads shared with the coordination view
(live executions, a stored context, the server clock) are in ``views.records``.
"""

from __future__ import annotations

from typing import Any

from py_reactor.runtime import operations
from py_reactor.runtime.execution import TERMINAL, problem_of
from py_reactor.states import Status
from py_reactor.storage.executions import ExecutionStore, StoredExecution
from py_reactor.storage.inspect import Inspector
from py_reactor.storage.redis import RedisStore
from py_reactor.views.coordination import Reader, coordination
from py_reactor.views.parks import parks_left
from py_reactor.views.records import BATCH, SCAN_IDS, live_executions, load_context, now_ms

__all__ = [
    "ACTIONS",
    "STATUSES",
    "execution_detail",
    "list_executions",
    "live_executions",
    "load_context",
    "now_ms",
    "parked",
    "summary",
]

#: Every status, in the order the dashboard's filter lists them.
STATUSES = (
    Status.PENDING,
    Status.RUNNING,
    Status.WAITING,
    Status.PAUSED,
    Status.COMPLETED,
    Status.FAILED,
    Status.HALTED,
    Status.ABORTED,
    Status.CANCELLED,
    Status.ROLLING_BACK,
)

#: The statuses each action accepts (the operations refuse the others).
ACTIONS: dict[str, frozenset[Status]] = {
    "cancel": frozenset(operations.CANCELLABLE),
    "undo": frozenset(operations.UNDOABLE),
    "retry": frozenset(operations.RETRYABLE),
    "resume": frozenset({Status.PAUSED}),  # with a JSON payload: its own form, not a bare button
}


# -- executions ----------------------------------------------------------------------------------


def list_executions(
    store: RedisStore,
    *,
    reactor: str | None = None,
    status: str | None = None,
    namespace: str | None = None,
    limit: int = 50,
    cursor: int = 0,
) -> dict[str, Any]:
    """A page of execution summaries, newest first, filtered by reactor, status and
    namespace.

    ``reactor`` matches the stored ``module:qualname`` exactly, or its class name alone.
    ``cursor`` is a position in the newest-first index (0: the newest); the reply's
    ``next_cursor`` continues after the last item returned, None when nothing is left.
    """
    inspector = Inspector(store)
    executions = ExecutionStore(store)
    items: list[dict[str, Any]] = []
    position = cursor
    scanned = 0
    exhausted = False
    while len(items) < limit and scanned < SCAN_IDS:
        ids = inspector.newest_ids(position, BATCH)
        if not ids:
            exhausted = True
            break
        for offset, (execution_id, head) in enumerate(zip(ids, inspector.heads(ids), strict=True)):
            scanned += 1
            found_status, found_reactor = head.status, head.reactor
            if found_status is None and found_reactor is None:
                continue  # removed since the index was read
            if status is not None and found_status != status:
                continue
            if namespace is not None and (head.namespace or "") != namespace:
                continue
            if reactor is not None and not _same_reactor(found_reactor or "", reactor):
                continue
            stored = executions.load(execution_id)
            if stored is not None:
                items.append(summary(stored))
            if len(items) == limit:
                position += offset + 1
                break
        else:
            position += len(ids)
            if len(ids) < BATCH:
                exhausted = True
    more = not exhausted and bool(inspector.newest_ids(position, 1))
    return {
        "items": items,
        "next_cursor": position if more else None,
        "total": inspector.execution_count(),
        "filters": {
            "reactor": reactor,
            "status": status,
            "namespace": namespace,
            "limit": limit,
            "cursor": cursor,
        },
    }


def _same_reactor(stored: str, wanted: str) -> bool:
    return stored == wanted or stored.rpartition(":")[2] == wanted


def summary(stored: StoredExecution) -> dict[str, Any]:
    """The list view of one execution: where it is and, if it failed, why."""
    outcome = stored.outcome or {}
    waiting_on = stored.waiting_on if stored.status in (Status.WAITING, Status.PAUSED) else None
    step = waiting_on.get("step") if waiting_on else outcome.get("step_name")
    return {
        "execution_id": stored.id,
        "reactor": stored.reactor,
        "reactor_name": stored.reactor.rpartition(":")[2],
        "namespace": stored.namespace,
        "status": stored.status,
        "created_at": stored.created_at,
        "updated_at": stored.updated_at,
        "parks": stored.parks,
        "step": step,
        "waiting_on": waiting_on,
        "error": outcome.get("error") if stored.status in (Status.FAILED, Status.ABORTED) else None,
        "reason": outcome.get("reason")
        if stored.status in (Status.HALTED, Status.CANCELLED)
        else None,
        "problem": stored.problem,
    }


def execution_detail(store: RedisStore, execution_id: str) -> dict[str, Any] | None:
    """Everything the dashboard shows about one execution, or None for an unknown id."""
    stored = ExecutionStore(store).load(execution_id)
    if stored is None:
        return None
    detail = summary(stored)
    context = load_context(stored)
    records = [] if context is None else context.holds.to_list()
    reader = Reader(store)
    holds = [reader.hold(record, stored) for record in records]
    if stored.status not in TERMINAL:  # a running step's holds reach the ledger at checkpoints
        listed = {(h["primitive"], h["key"]) for h in holds}
        holds += [
            h
            for h in coordination(store)["holds"]
            if h["execution_id"] == stored.id and (h["primitive"], h["key"]) not in listed
        ]
    problem = problem_of(stored)  # the context, outcome, status or trace cannot be read
    detail.update(
        problem=problem,
        inputs={} if context is None else dict(context.inputs),
        results={} if context is None else dict(context.results),
        trace=[] if context is None else list(context.trace),
        outcome=stored.outcome,
        holds=holds,
        epoch=stored.epoch,
        worker=stored.worker,
        retry_of=None if context is None else context.retry_of,
        retried_by=stored.retried_by,
        parks_left=parks_left(stored, context),
        actions=[
            name
            for name, accepted in ACTIONS.items()
            if stored.status in accepted
            and not (name == "undo" and stored.undone)
            and (problem is None or name == "cancel")  # a damaged record can only be stopped
        ],
    )
    return detail


# -- parked executions ---------------------------------------------------------------------------


def parked(store: RedisStore) -> dict[str, Any]:
    """Every execution parked ("waiting"), soonest next attempt first."""
    items = [
        _parked_item(stored)
        for stored in live_executions(store)
        if stored.status == Status.WAITING and stored.waiting_on is not None
    ]
    items.sort(key=lambda item: item["next_attempt_at"] or 0)
    return {"parked": items, "server_time": now_ms(store) / 1000}


def _parked_item(stored: StoredExecution) -> dict[str, Any]:
    waiting = stored.waiting_on or {}
    return {
        "execution_id": stored.id,
        "reactor": stored.reactor,
        "reactor_name": stored.reactor.rpartition(":")[2],
        "namespace": stored.namespace,
        "status": stored.status,
        "step": waiting.get("step"),
        "primitive": waiting.get("primitive"),
        "key": waiting.get("key"),
        "attempt": waiting.get("attempt"),
        "parks": stored.parks,
        "next_attempt_at": waiting.get("until"),
        "since": stored.updated_at,
    }
