"""The store read for people and tests: what the dashboard (``web``) and ``py_reactor.testing``
ask, answered as plain typed data.

Read only. Every key layout and raw Redis call those readers need is here, so that neither
builds a key name nor holds the redis-py client: the live holds of each primitive's key (a
semaphore's holders, period markers and claims, ordered-lock heartbeats: what no state script
reports), the keys in use (one ``SCAN`` of py_reactor's namespace), and the execution ids in
the index, lease and due sets with the fields a listing filters on. Times are the server's, in
milliseconds; a ttl of None means the key has no expiry (or is gone). The typed state the
scripts report (``lock_state``, ``semaphore_state``, ...) is ``RedisStore``'s own.

Errors are redis-py's, as the store's raw reads raise them (the dashboard reports them as the
store's); nothing here imports redis, so importing it never does.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from py_reactor.coordination.owner import HeldBy
from py_reactor.storage import keys

__all__ = [
    "Found",
    "Head",
    "InFlight",
    "Inspector",
    "LockHoldFields",
    "PeriodClaim",
    "PeriodMarker",
    "SemaphoreHolder",
    "held_by",
]

#: A coordination key's Redis name: primitive, hash tag, and what follows (see ``keys``).
_NAME = re.compile(
    rf"^{keys.NAMESPACE}:(lock|semaphore|period|rate_limit|ordered_lock):(\{{[^}}]*\}}):(.*)$"
)


@dataclass(frozen=True, slots=True)
class SemaphoreHolder:
    """One holder of a semaphore: its lease end (server ms), nesting count and, when the hold
    record names them, the execution and step it was taken for."""

    owner: str
    lease_end_ms: float
    count: int
    by: HeldBy | None


@dataclass(frozen=True, slots=True)
class LockHoldFields:
    """A lock's hold as its hash stores it: the owner, the fencing token, each level with the
    server ms it lapses at (lapsed ones included until a release drops them), and the execution
    and step the hold was taken for."""

    owner: str
    token: int
    levels: dict[int, int]
    by: HeldBy | None


@dataclass(frozen=True, slots=True)
class PeriodMarker:
    """A period's bucket marked done: what marked it, and the ms until the marker expires."""

    key: str
    bucket: str
    marked_by: str | None
    ttl_ms: int | None


@dataclass(frozen=True, slots=True)
class PeriodClaim:
    """The in-flight claim on one bucket of a period: its owner, nesting count and lease left."""

    key: str
    bucket: str
    owner: str
    count: int
    ttl_ms: int | None


@dataclass(frozen=True, slots=True)
class Head:
    """The fields of an execution record a listing filters on (None: not in the record)."""

    status: str | None
    reactor: str | None
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class InFlight:
    """The lease and due sets, read at one instant: running ids, and due ids with when."""

    now_ms: int
    leased: list[str]
    due: list[tuple[str, float]]


@dataclass
class Found:
    """What one SCAN of py_reactor's coordination keys found, as user keys by primitive."""

    locks: set[str] = field(default_factory=set)
    semaphores: set[str] = field(default_factory=set)
    ordered_locks: set[str] = field(default_factory=set)
    markers: list[tuple[str, str]] = field(default_factory=list)  # (key, bucket)
    claims: list[tuple[str, str]] = field(default_factory=list)  # (key, bucket)
    counters: dict[tuple[str, int], set[int]] = field(default_factory=dict)  # (key, window s)


def held_by(text: str | None) -> HeldBy | None:
    """The execution and step a hold record names; None if it names none (see
    ``storage.redis``, which writes it)."""
    if not text:
        return None
    try:
        execution_id, step = json.loads(text)
    except (ValueError, TypeError):
        return None
    return HeldBy(str(execution_id), None if step is None else str(step))


class Inspector:
    """Read-only questions about one store (a ``RedisStore``: any store with a redis-py client).

    Raises:
        TypeError: the store has no Redis client to read from (a store of another kind).
    """

    def __init__(self, store: object) -> None:
        client = getattr(store, "client", None)
        if client is None:
            raise TypeError(f"{store!r} has no Redis client to read from")
        self.store = store
        self._client: Any = client  # redis-py's

    def server_ms(self) -> int:
        """The server clock in ms (holds expire on it, so ttls are computed against it)."""
        try:
            seconds, micros = self._client.time()
            return int(seconds) * 1000 + int(micros) // 1000
        except Exception:  # pragma: no cover - a server without TIME
            return int(time.time() * 1000)

    # -- executions ----------------------------------------------------------------------------

    def newest_ids(self, start: int, count: int) -> list[str]:
        """``count`` execution ids from position ``start`` of the index, newest first."""
        if count <= 0:
            return []
        return [str(i) for i in self._client.zrevrange(keys.INDEX, start, start + count - 1)]

    def execution_count(self) -> int:
        """How many executions the index holds."""
        return int(self._client.zcard(keys.INDEX))

    def heads(self, ids: Sequence[str]) -> list[Head]:
        """The status, reactor and namespace of each of ``ids``, in one pipelined round trip."""
        pipe = self._client.pipeline(transaction=False)
        for execution_id in ids:
            pipe.hmget(keys.execution(execution_id), "status", "reactor", "namespace")
        return [Head(*fields) for fields in pipe.execute()]

    def in_flight(self) -> InFlight:
        """The running and due ids, in one MULTI/EXEC: a claim moves an id from the due set to
        the leases between two separate reads."""
        namespaces = sorted(self.namespaces())
        pipe = self._client.pipeline(transaction=True)
        pipe.time().zrange(keys.LEASES, 0, -1)
        for namespace in namespaces:
            pipe.zrange(keys.due(namespace), 0, -1, withscores=True)
        (seconds, micros), leases, *scheduled = pipe.execute()
        return InFlight(
            now_ms=int(seconds) * 1000 + int(micros) // 1000,
            leased=[str(i) for i in leases],
            due=[(str(i), float(score)) for due in scheduled for i, score in due],
        )

    def namespaces(self) -> set[str]:
        """Every namespace an execution was stored in."""
        return {str(n) for n in self._client.smembers(keys.NAMESPACES)}

    def running_count(self) -> int:
        """How many executions hold a lease (live or lapsed)."""
        return int(self._client.zcard(keys.LEASES))

    def waiting_on(self, execution_id: str) -> dict[str, Any] | None:
        """What a parked execution waits on (its record's ``waiting_on``), without loading the
        rest of the record; None when it has none or it cannot be read."""
        text = self._client.hget(keys.execution(execution_id), "waiting_on")
        try:
            value = json.loads(text) if text else None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    # -- holds of each primitive ---------------------------------------------------------------

    def semaphore_lease(self, key: str, owner: str) -> float | None:
        """When ``owner``'s lease on semaphore ``key`` ends (server ms); None if not a holder."""
        score = self._client.zscore(keys.semaphore(key).holders, owner)
        return None if score is None else float(score)

    def semaphore_by(self, key: str, owner: str) -> HeldBy | None:
        """The execution and step ``owner``'s hold of semaphore ``key`` was taken for."""
        return held_by(self._client.hget(keys.semaphore(key).by, owner))

    def semaphore_holders(self, key: str, after_ms: int) -> list[SemaphoreHolder]:
        """The holders of semaphore ``key`` whose lease ends after ``after_ms``, soonest end
        first."""
        names = keys.semaphore(key)
        leases = self._client.zrangebyscore(names.holders, f"({after_ms}", "+inf", withscores=True)
        counts = self._client.hgetall(names.counts)
        named = self._client.hgetall(names.by)
        return [
            SemaphoreHolder(
                owner=str(owner),
                lease_end_ms=float(score),
                count=int(counts.get(owner, 1)),
                by=held_by(named.get(owner)),
            )
            for owner, score in leases
        ]

    def lock_hold(self, key: str) -> LockHoldFields | None:
        """The hold of lock ``key`` with every level (``lock_state`` counts the live ones only);
        None when nobody holds it."""
        fields = self._client.hgetall(keys.lock(key).hold)
        if not fields.get("owner"):
            return None
        levels = {
            int(name[6:]): int(value)
            for name, value in fields.items()
            if name.startswith("level:") and name[6:].isdigit()
        }
        return LockHoldFields(
            str(fields["owner"]), int(fields.get("token") or 0), levels, held_by(fields.get("by"))
        )

    def parked(self, primitive: str, key: str) -> list[str]:
        """The ids on the list of executions parked on ``key`` of ``primitive``, oldest first
        (a release pops from the front; ids of runs woken otherwise stay until popped)."""
        return [str(i) for i in self._client.lrange(keys.parked(primitive, key), 0, -1)]

    def period_claim(self, key: str, bucket: str) -> PeriodClaim | None:
        """The in-flight claim on ``bucket`` of period ``key``; None when nobody claims it."""
        name = keys.period_claim(key, bucket)
        data = self._client.hgetall(name)
        if not data.get("owner"):
            return None
        return PeriodClaim(
            key=key,
            bucket=bucket,
            owner=str(data["owner"]),
            count=int(data.get("count") or 1),
            ttl_ms=_ttl(self._client.pttl(name)),
        )

    def period_claims(self, key: str) -> list[PeriodClaim]:
        """Every in-flight claim of period ``key``, one per bucket, sorted by bucket (one SCAN
        of the key's names)."""
        prefix = keys.period(key).claim + ":"
        found = (str(name) for name in self._client.scan_iter(match=keys.pattern("period", key)))
        buckets = sorted(name[len(prefix) :] for name in found if name.startswith(prefix))
        return [claim for bucket in buckets if (claim := self.period_claim(key, bucket))]

    def period_marker(self, key: str, bucket: str) -> PeriodMarker | None:
        """The marker of ``bucket`` of period ``key``; None when the bucket is not marked."""
        name = keys.period_marker(key, bucket)
        marked_by = self._client.get(name)
        ttl = self._client.pttl(name)
        if marked_by is None and ttl == -2:
            return None
        return PeriodMarker(key=key, bucket=bucket, marked_by=marked_by, ttl_ms=_ttl(ttl))

    def period_marked(self, key: str, bucket: str) -> bool:
        """Whether ``bucket`` of period ``key`` is marked done."""
        return bool(self._client.exists(keys.period_marker(key, bucket)))

    def period_buckets(self, key: str) -> list[str]:
        """Every bucket of period ``key`` marked done, sorted (one SCAN of the key's names)."""
        prefix = keys.period(key).done + ":"
        found = (str(name) for name in self._client.scan_iter(match=keys.pattern("period", key)))
        return sorted(name[len(prefix) :] for name in found if name.startswith(prefix))

    def rate_limit_count(self, key: str, window: int, index: int) -> int:
        """The calls rate limit ``key`` admitted in window ``index`` (``floor(now / window)``)
        of ``window`` seconds."""
        return int(self._client.get(keys.rate_limit_counter(key, window, index)) or 0)

    def ordered_lock_beat(self, key: str, number: int) -> int | None:
        """The last heartbeat (server ms) of position ``number`` of ordered lock ``key``."""
        beat = self._client.hget(keys.ordered_lock(key).beats, str(number))
        return None if beat is None else int(beat)

    def ordered_lock_beats(self, key: str) -> dict[int, int]:
        """Every position of ordered lock ``key`` with a heartbeat: position -> server ms."""
        beats = self._client.hgetall(keys.ordered_lock(key).beats)
        return {int(n): int(beat) for n, beat in beats.items() if str(n).isdigit()}

    def ordered_lock_ttl(self, key: str) -> int | None:
        """The ms until ordered lock ``key``'s state expires (its ``ttl`` after the last write);
        None when it has no expiry or is gone."""
        return _ttl(self._client.pttl(keys.ordered_lock(key).state))

    # -- discovery -----------------------------------------------------------------------------

    def scan(self, limit: int = 100_000) -> Found:
        """The coordination keys in use, from one SCAN (at most ``limit`` names looked at)."""
        found = Found()
        names = self._client.scan_iter(match=f"{keys.NAMESPACE}:*", count=1000)
        for seen, name in enumerate(names, start=1):
            if seen > limit:
                break
            match = _NAME.match(str(name))
            if match is None:
                continue
            primitive, tag, rest = match.groups()
            key = unquote(tag[1:-1])  # the user's key inside its hash tag (see ``keys.tag``)
            if primitive == "lock" and rest == "hold":
                found.locks.add(key)
            elif primitive == "semaphore" and rest == "holders":
                found.semaphores.add(key)
            elif primitive == "ordered_lock" and rest == "state":
                found.ordered_locks.add(key)
            elif primitive == "period" and rest.startswith("done:"):
                found.markers.append((key, rest[5:]))
            elif primitive == "period" and rest.startswith("claim:"):
                found.claims.append((key, rest[6:]))
            elif primitive == "rate_limit":
                window, _, index = rest.partition(":")
                if window.isdigit() and index.isdigit():
                    found.counters.setdefault((key, int(window)), set()).add(int(index))
        return found

    def __repr__(self) -> str:
        return f"<Inspector {self.store!r}>"


def _ttl(pttl_ms: int) -> int | None:
    """A PTTL reply as ms left; None for a key without expiry (-1) or gone (-2)."""
    return None if pttl_ms < 0 else int(pttl_ms)
