"""Durable executions: records, claims with a lease and an epoch, parks, and the due set.

An execution dispatched to a worker is stored before anything is enqueued. Whoever runs it
first *claims* it: the claim bumps the record's epoch and gives the runner a liveness lease,
and every checkpoint afterwards is a compare-and-set on that epoch, so a stale runner (a
redelivered job, a worker presumed dead) finds the epoch moved and writes nothing. A parked
execution sits in the due set (score: when its timer fires) and in the parked list of the key
it waits on; the release of that key makes it due at once (``lua/_wake_parked.lua``).

Every execution belongs to a *namespace* (an application), and what a worker takes work from
is that namespace's: a worker serving ``shop`` never sees ``blog``'s executions, though both
park on the same coordination keys. A terminal execution expires ``retention`` after it ended
(``configure(retention=...)``); a live one never does.

Redis layout (``storage.keys`` has it all)::

    exec:<id>       hash  id, reactor, namespace, status, context (JSON), epoch, worker,
                          created_at, updated_at, waiting_on (JSON), outcome (JSON), parks,
                          undone, unimportable_since (server ms)
    exec:index      zset  id -> created (server ms): every stored execution
    exec:leases     zset  id -> lease end (server ms): running executions
    exec:expiring   zset  id -> when its record expires (server ms)
    due:<ns>        zset  id -> due (server ms): what a dispatcher may claim once due
    ready:<ns>      list  ids made due now (dispatchers block on it; the due set is the truth)
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from py_reactor.aio import sleep
from py_reactor.config import get_config
from py_reactor.states import Status
from py_reactor.storage import keys

if TYPE_CHECKING:
    from py_reactor.storage.redis import RedisStore

__all__ = ["ExecutionStore", "StoredExecution"]

# The layout is storage.keys'; these names are kept for the callers that import them here.
INDEX_KEY, LEASES_KEY = keys.INDEX, keys.LEASES
record_key = keys.execution

#: Every status a record may hold (a record with another one cannot be read).
_STATUSES = frozenset(Status)


@dataclass(frozen=True, slots=True)
class StoredExecution:
    """One execution as stored (its context still as JSON text)."""

    id: str
    reactor: str
    status: str
    context: str
    epoch: int
    parks: int
    created_at: float  # seconds (server clock)
    updated_at: float
    waiting_on: dict[str, Any] | None
    outcome: dict[str, Any] | None
    worker: str | None
    pinned: str | None = None  # "host:pid:<script>": a __main__ reactor, only that script runs it
    retried_by: str | None = None  # the execution Reactor.retry started from this one
    problem: str | None = None  # what of the record could not be read (then it cannot run)
    undone: bool = False  # Reactor.undo rolled it back (it is not undone twice)
    namespace: str = ""  # the application it belongs to: the workers that serve it run it


class ExecutionStore:
    """Execution records on a coordination store (every operation one script, one round trip)."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    def create(
        self,
        execution_id: str,
        reactor: str,
        context: str,
        status: Status,
        *,
        pinned: str = "",
        sent_by_caller: float | None = None,
        queue: str = "",
        namespace: str,
    ) -> bool:
        """Store a new execution in ``namespace`` and make it due now there; False if the id
        exists already.

        ``pinned``: ``host:pid:<script path>`` for a reactor defined in a ``__main__`` script,
        which only a process running that same script can import. ``sent_by_caller``: the
        caller sends the job itself (a Celery message): the id is not pushed to the ready list,
        and the recovery loop sends it only if it has not run within that many seconds.
        ``queue``: the Celery queue its jobs go to, every time it is sent again too.
        """
        names = (
            record_key(execution_id),
            INDEX_KEY,
            keys.due(namespace),
            keys.ready(namespace),
            keys.NAMESPACES,
        )
        args: tuple[str, ...] = (execution_id, reactor, context, status, pinned)
        ready, due_in = ("1", "0") if sent_by_caller is None else ("0", str(_ms(sent_by_caller)))
        args = (*args, ready, due_in, queue, namespace)
        return bool(self.store.run_script("execution_create", names, args))

    def take_for_sending(
        self, ids: list[str], resend_after: float
    ) -> list[tuple[str, int, str, str]]:
        """The ``(id, epoch, queue, namespace)`` of those of ``ids`` still due now, each made
        due again only ``resend_after`` seconds later: a dispatcher sends exactly these jobs (to
        the queue the execution was first sent to, ``""`` when none was), and no other
        dispatcher sends them meanwhile."""
        if not ids:
            return []
        names = tuple(record_key(execution_id) for execution_id in ids)
        reply = self.store.run_script("execution_send", names, (_ms(resend_after), *ids))
        return [
            (str(reply[i]), int(reply[i + 1]), str(reply[i + 2]), str(reply[i + 3]))
            for i in range(0, len(reply), 4)
        ]

    def load(self, execution_id: str) -> StoredExecution | None:
        """The stored execution, or None for an unknown id."""
        raw = self._client().hgetall(record_key(execution_id))
        if not raw:
            return None
        problems: list[str] = []
        if not raw.get("context"):
            problems.append("the record has no context")
        status = raw.get("status", "")
        if status not in _STATUSES:
            problems.append(
                f"its status {status!r} is not one py_reactor writes ({', '.join(Status)})"
                if status
                else "the record has no status"
            )
        waiting_on = _json(raw.get("waiting_on"), "waiting_on", problems)
        outcome = _json(raw.get("outcome"), "outcome", problems)
        return StoredExecution(
            id=raw.get("id", execution_id),
            reactor=raw.get("reactor", "?"),
            status=status,
            context=raw.get("context", ""),
            epoch=_int(raw.get("epoch"), "epoch", problems),
            parks=_int(raw.get("parks"), "parks", problems),
            created_at=_int(raw.get("created_at"), "created_at", problems) / 1000,
            updated_at=_int(raw.get("updated_at"), "updated_at", problems) / 1000,
            waiting_on=waiting_on,
            outcome=outcome,
            worker=raw.get("worker") or None,
            pinned=raw.get("pinned") or None,
            retried_by=raw.get("retried_by") or None,
            problem="; ".join(problems) or None,
            undone=bool(raw.get("undone")),
            namespace=raw.get("namespace", ""),
        )

    def claim(
        self,
        execution_id: str,
        worker: str,
        lease: float,
        *,
        due: bool = True,
        sent_at_epoch: int | None = None,
    ) -> int:
        """Claim ``execution_id`` for this runner with a lease of ``lease`` seconds.

        ``sent_at_epoch``: the epoch a job (a Celery message) was sent at; the claim succeeds
        only if nobody claimed the execution since, so a redelivered or duplicated job runs
        nothing.

        Returns:
            The new epoch (> 0); 0 when another runner holds a live lease (or, with ``due``,
            it is not due yet, or the epoch moved past ``sent_at_epoch``); -1 for an unknown
            id; -2 when it already ended.
        """
        names = (record_key(execution_id), LEASES_KEY)
        epoch = "" if sent_at_epoch is None else str(sent_at_epoch)
        args = (execution_id, worker, _ms(lease), "1" if due else "0", epoch)
        return int(self.store.run_script("execution_claim", names, args))

    def leave(self, execution_id: str, grace: float, again_in: float) -> bool:
        """Leave ``execution_id``, whose reactor this worker cannot import, for another worker:
        True when it was left (due again in ``again_in`` seconds at most, never claimed), False
        when ``grace`` seconds have passed since a worker first could not import it (or it is
        not this worker's to leave): then claim it and fail it."""
        names = (record_key(execution_id), LEASES_KEY)
        args = (execution_id, int(grace * 1000), _ms(again_in))
        return int(self.store.run_script("execution_leave", names, args)) == 1

    def checkpoint(
        self,
        execution_id: str,
        epoch: int,
        context: str,
        status: Status,
        *,
        lease: float = 0,
        waiting_on: dict[str, Any] | None = None,
        outcome: dict[str, Any] | None = None,
        due_in: float | None = None,
        parked_on: str | None = None,
        park: bool = False,
        awaiting: str | None = None,
        free_if: tuple[str, str] = ("", ""),
    ) -> bool:
        """Write progress if ``epoch`` is still the record's; False (nothing written) if not.

        Args:
            status: the execution's status now; ``"running"`` renews the lease by ``lease``
                seconds, anything else drops it.
            due_in: parked (or waiting for a retry): seconds until the timer dispatches it.
            parked_on: the parked list of the key it waits on, woken by that key's release.
            park: count one more park.
            awaiting: parked waiting for that execution to end (a reader of an async unit):
                due at once if it has ended already.
            free_if: ``(key, how)`` telling whether the key parked on is free (or the ordered
                turn has come) by now (``keys.free_probe``): then it is due at once, since the
                release that freed it came before this park was written and woke nobody.

        A terminal ``status`` wakes the executions parked waiting for this one to end, and
        starts its retention (``configure(retention=...)``).
        """
        names = (
            record_key(execution_id),
            LEASES_KEY,
            parked_on or "",
            keys.parked(keys.AWAITED, execution_id),
            "" if awaiting is None else record_key(awaiting),
            free_if[0],
            keys.EXPIRING,
        )
        args = (
            execution_id,
            epoch,
            context,
            status,
            _ms(lease),
            "" if waiting_on is None else json.dumps(waiting_on),
            "" if outcome is None else json.dumps(outcome),
            "" if due_in is None else _ms(due_in),
            "1" if park else "0",
            free_if[1],
            _retention(),
        )
        return bool(self.store.run_script("execution_checkpoint", names, args))

    def park(
        self,
        execution_id: str,
        epoch: int,
        context: str,
        *,
        waiting_on: dict[str, Any],
        due_in: float,
        primitive: str | None,
        key: str | None,
        limit: int | None = None,
        bucket: str | None = None,
        turn: str | None = None,
        count: bool = False,
    ) -> bool:
        """Write the execution parked (``"waiting"``) if ``epoch`` is still the record's:
        due in ``due_in`` seconds and, waiting on ``key`` of ``primitive``, in that key's
        parked list (its release wakes it), due at once if the key is free by now (a
        semaphore's ``limit``, a period's ``bucket``, an ordered lock's ``turn``,
        ``"<epoch>:<number>"``, tell how to read that). A reader of an async unit (primitive
        ``keys.AWAITED``) waits for execution ``key`` to end. No key: only the timer wakes it
        (a retry's backoff, the store unavailable). ``count``: count one more park.

        The key names are this module's to know, so a runner passes only what it waits on.
        """
        parked_on = None if primitive is None or key is None else keys.parked(primitive, key)
        return self.checkpoint(
            execution_id, epoch, context, Status.WAITING, waiting_on=waiting_on, due_in=due_in,
            parked_on=parked_on, awaiting=key if primitive == keys.AWAITED else None,
            free_if=keys.free_probe(primitive or "", key or "", limit, bucket, turn),
            park=count,
        )  # fmt: skip

    def take(
        self,
        execution_id: str,
        status: Status,
        allowed: tuple[Status, ...],
        *,
        correlation: tuple[str, str] | None = None,
        once: str = "",
    ) -> tuple[int, str]:
        """Take ``execution_id`` for an operation: set ``status`` if it is in one of
        ``allowed`` and no runner's lease is live (bumping the epoch, so a runner that claimed
        it before writes nothing more).

        ``correlation``: ``(reactor, correlation id)`` the run holds while paused at an
        interrupt, given up with the take. ``once``: a record field marking the
        operation done (``"undone"``): refused if it is set, set by the take.

        Returns:
            ``(new epoch, previous status)``; ``(0, status)`` when refused; ``(-1, "")`` for an
            unknown id.
        """
        names = (
            record_key(execution_id),
            LEASES_KEY,
            keys.parked(keys.AWAITED, execution_id),
            "" if correlation is None else keys.correlation(*correlation),
            keys.EXPIRING,
        )
        epoch, previous = self.store.run_script(
            "execution_take", names, (execution_id, status, once, _retention(), *allowed)
        )
        return int(epoch), str(previous)

    def pause(
        self,
        execution_id: str,
        epoch: int | None,
        reactor: str,
        context: str,
        *,
        waiting_on: dict[str, Any],
        timeout_in: float | None,
        queue: str = "",
        pinned: str = "",
        namespace: str = "",
    ) -> bool:
        """Store the execution paused at an interrupt: created now (``epoch`` None: a run
        paused in the caller) or written by its runner (a compare-and-set on ``epoch``).

        ``timeout_in``: seconds until its timeout, when a worker may claim it to fail the
        interrupt step (it is in the due set until then); None: no timeout. ``queue`` and
        ``pinned`` and ``namespace`` as for :meth:`create` (used when it is created here).

        Returns:
            False when nothing was written (the epoch moved on, or the id exists already).
        """
        names = (record_key(execution_id), INDEX_KEY, LEASES_KEY, keys.NAMESPACES)
        args = (
            execution_id,
            "" if epoch is None else str(epoch),
            reactor,
            context,
            json.dumps(waiting_on),
            "" if timeout_in is None else str(max(0, int(timeout_in * 1000))),
            queue,
            pinned,
            namespace,
        )
        return bool(self.store.run_script("execution_pause", names, args))

    def reserve(
        self, reactor: str, correlation_id: str, execution_id: str, deadline: float | None
    ) -> str | None:
        """Reserve ``correlation_id`` of ``reactor`` for the paused run ``execution_id``: None
        when it is now this run's, else the id of the paused run that holds it. It lives until
        a resume or cancel gives it up (or a day past ``deadline``, a wall-clock time)."""

        lives = "" if deadline is None else str(_ms(max(0.0, deadline - time.time()) + 86400))
        holder = self.store.run_script(
            "interrupt_reserve",
            (keys.correlation(reactor, correlation_id),),
            (execution_id, keys.EXECUTION_PREFIX, lives),
        )
        return str(holder) or None

    def paused_by(self, reactor: str, correlation_id: str) -> str | None:
        """The execution of ``reactor`` that holds ``correlation_id`` (paused, or it was)."""
        found = self._client().get(keys.correlation(reactor, correlation_id))
        return None if found is None else str(found)

    def due_now(self, execution_id: str) -> None:
        """Make ``execution_id`` due now, and tell its namespace's dispatchers (a resumed run,
        say)."""
        self.store.run_script("execution_ready", (record_key(execution_id),), (execution_id,))

    def annotate(self, execution_id: str, **fields: str) -> None:
        """Write fields for people (``retried_by``) on the record, outside any epoch."""
        self._client().hset(record_key(execution_id), mapping=fields)

    def renew(self, execution_id: str, epoch: int, lease: float) -> bool:
        """Push the lease of a running execution out; False when the epoch moved on."""
        names = (record_key(execution_id), LEASES_KEY)
        return bool(
            self.store.run_script("execution_renew", names, (execution_id, epoch, _ms(lease)))
        )

    def due(self, namespaces: Collection[str], limit: int = 100) -> tuple[list[str], list[str]]:
        """One recovery pass of the ``namespaces`` served, in one round trip: ``(their ids due
        now, their ids whose lease lapsed and are due again)``; a lapsed execution of another
        namespace is made due in its own. It also drops from the index the executions whose
        retention has passed."""
        names = (
            LEASES_KEY,
            INDEX_KEY,
            keys.EXPIRING,
            *(keys.due(namespace) for namespace in sorted(namespaces)),
        )
        due, lapsed = self.store.run_script("execution_due", names, (limit,))
        return [str(i) for i in due], [str(i) for i in lapsed]

    def next_ready(self, namespaces: Collection[str], timeout: float) -> str | None:
        """Block up to ``timeout`` seconds for an id of one of ``namespaces`` made due now (a
        wake or a dispatch); None at once when there are none to serve."""
        if not namespaces:
            sleep(timeout)
            return None
        return self.store.wait_signal([keys.ready(n) for n in sorted(namespaces)], timeout)

    def ids(self, limit: int = 1000) -> list[str]:
        """The newest stored execution ids, newest first."""
        return [str(i) for i in self._client().zrevrange(INDEX_KEY, 0, limit - 1)]

    def _client(self) -> Any:
        commands = getattr(self.store, "commands", None)
        if commands is not None:  # a RedisStore: in a bridge, its commands are awaited
            return commands()
        client = getattr(self.store, "client", None)
        if client is None:  # pragma: no cover - every real store is a RedisStore
            raise TypeError(f"{self.store!r} cannot read execution records")
        return client


def _retention() -> str:
    """The configured retention in ms, as the scripts take it (``""``: keep for ever)."""
    retention = get_config().retention
    return "" if retention is None else str(_ms(retention))


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _json(text: str | None, field: str, problems: list[str]) -> dict[str, Any] | None:
    """The JSON object stored in ``field`` (None when empty); what else is there is a
    problem of the record, never read as "nothing stored"."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        problems.append(f"its {field} is not JSON")
        return None
    if not isinstance(value, dict):
        problems.append(f"its {field} is not a JSON object (it is {_JSON_KINDS[type(value)]})")
        return None
    return value


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}  # fmt: skip


def _int(text: str | None, field: str, problems: list[str]) -> int:
    try:
        return int(text or 0)
    except ValueError:
        problems.append(f"its {field} is not a number")
        return 0
