"""Reading the live coordination state for the dashboard: every hold and every key in use.

Read only, from the store: holds are listed from the stored ledgers of the executions that
have not ended, each checked against the store's read-only scripts (``lock_state``,
``semaphore_state``, ``ordered_lock_state``, ``rate_limit_usage``) and, for what no script
reports (a semaphore's holders, period markers and claims, ordered-lock heartbeats), the
store's read model (``storage.inspect``). Holds no ledger lists (a running step's, before
its checkpoint, or one of a run in the caller, which is never stored; one taken in code or
outside any execution) are found by one ``SCAN`` of py_reactor's namespace; a lock or semaphore
hold names the execution and step it was taken for in the store itself. The JSON shapes are
documented in ``docs/operations.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from py_reactor.coordination.holds import CHARGED, HELD, WAITING
from py_reactor.coordination.owner import BRANCH_SEPARATOR, HeldBy
from py_reactor.states import Status
from py_reactor.storage.executions import StoredExecution
from py_reactor.storage.inspect import Found, Inspector, PeriodClaim
from py_reactor.storage.redis import RedisStore
from py_reactor.views import declared
from py_reactor.views.records import live_executions, load_context, now_ms

__all__ = ["Reader", "coordination"]


def coordination(store: RedisStore, *, scan: bool = True) -> dict[str, Any]:
    """The live coordination state: every hold, semaphore, rate limit, period, ordered lock.

    Holds come from the ledgers of the executions that have not ended, each checked against
    the store (``live``: the store still has it); with ``scan``, holds of locks, semaphores and
    period claims no ledger lists (a running step's, not checkpointed yet; taken in code; or
    outside any execution) are added from the store.
    """
    view = _Coordination(store)
    view.read_ledgers()
    found = view.reader.inspector.scan() if scan else Found()
    view.known["lock"] |= found.locks
    view.known["semaphore"] |= found.semaphores
    view.known["ordered_lock"] |= found.ordered_locks
    return view.result(found)


class _Coordination:
    """One build of the coordination view: the live executions, what they hold and await."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.reader = Reader(store)
        self.holds: list[dict[str, Any]] = []
        self.seen: set[tuple[str, str, str]] = set()  # (primitive, key, owner) listed already
        self.known: dict[str, set[str]] = {p: set() for p in ("lock", "semaphore", "ordered_lock")}
        self.users: dict[tuple[str, str], set[declared.User]] = {}  # who took or awaits a key
        self.parked_on: dict[tuple[str, str], list[str]] = {}
        self.executions: dict[str, StoredExecution] = {}

    def _use(self, primitive: str, key: str, reactor: str | None, step: str | None) -> None:
        if reactor is not None:
            self.users.setdefault((primitive, key), set()).add((reactor, step))

    def _add(self, hold: dict[str, Any]) -> None:
        self.holds.append(hold)
        self.seen.add((hold["primitive"], hold["key"], hold["owner"]))
        if hold["primitive"] in self.known:
            self.known[hold["primitive"]].add(hold["key"])
        if hold["scope"] in ("reactor", "step"):
            self._use(hold["primitive"], hold["key"], hold["reactor"], hold["step"])

    def read_ledgers(self) -> None:
        """What each live execution waits on, and the holds its stored ledger lists."""
        for stored in live_executions(self.store):
            self.executions[stored.id] = stored
            waiting = stored.waiting_on
            if stored.status == Status.WAITING and waiting and waiting.get("key") is not None:
                primitive, key = str(waiting.get("primitive")), str(waiting.get("key"))
                self.parked_on.setdefault((primitive, key), []).append(stored.id)
                self._use(primitive, key, stored.reactor, waiting.get("step"))
                if primitive in self.known:
                    self.known[primitive].add(key)
            context = load_context(stored)
            for record in [] if context is None else context.holds.to_list():
                self._use(record["primitive"], record["key"], stored.reactor, record.get("step"))
                if record["state"] != CHARGED:
                    self._add(self.reader.hold(record, stored))

    def result(self, found: Found) -> dict[str, Any]:
        """The view, with the holds only the store knows added."""
        reader, executions = self.reader, self.executions
        for key in sorted(self.known["lock"]):
            info = self.store.lock_state(key)
            if info.owner is not None and ("lock", key, info.owner) not in self.seen:
                self._add(reader.outside_lock(key, info, executions))
        semaphores = []
        for key in sorted(self.known["semaphore"]):
            semaphore = reader.semaphore(key, executions, self.parked_on)
            for holder in semaphore["holders"]:
                if ("semaphore", key, holder["owner"]) not in self.seen:
                    self._add(reader.outside_semaphore(semaphore, holder, executions))
            limit = declared.semaphore_limit(self.users.get(("semaphore", key), set()))
            free = None if limit is None else max(0, limit - semaphore["held"])
            semaphore.update(limit=limit, free=free)
            if semaphore["held"] or semaphore["waiters"] or semaphore["parked"]:
                semaphores.append(semaphore)
        periods = reader.periods(found, executions)
        for claim in periods["claims"]:
            if ("period", claim["key"], claim["owner"]) not in self.seen:
                self._add(reader.outside_period(claim, executions))
        for key, _window in found.counters:
            self._rate_limit_users(key)
        self.holds.sort(key=lambda h: (h["primitive"], h["key"], h["execution_id"] or ""))
        # Keys in use only: a lock's token (and an ordered lock's epoch) outlive their holds.
        locks = [reader.lock(key, self.parked_on) for key in sorted(self.known["lock"])]
        lines = [
            reader.ordered_lock(key, self.holds, self.parked_on)
            for key in sorted(self.known["ordered_lock"])
        ]
        return {
            "server_time": reader.now_ms / 1000,
            "holds": self.holds,
            "locks": [lock for lock in locks if lock["owner"] or lock["waiters"] or lock["parked"]],
            "semaphores": semaphores,
            "rate_limits": reader.rate_limits(found, self.users),
            "periods": periods["markers"],
            "period_claims": periods["claims"],
            "ordered_locks": [
                line for line in lines if line["in_flight"] or line["parked"] or line["positions"]
            ],
        }

    def _rate_limit_users(self, key: str) -> None:
        """A rate limit charged by a step still running has no ledger record yet: find the
        live execution whose declarations name ``key``."""
        if ("rate_limit", key) in self.users:
            return
        for stored in self.executions.values():
            context = load_context(stored)
            named = None if context is None else declared.attribute(context, "rate_limit", key)
            if named is not None:
                self._use("rate_limit", key, stored.reactor, named[1])


class Reader:
    """One request's reads of the store, on one server clock."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.inspector = Inspector(store)
        self.now_ms = now_ms(store)

    def _ttl(self, pttl_ms: int) -> float | None:
        return None if pttl_ms < 0 else pttl_ms / 1000

    # -- holds from ledgers ---------------------------------------------------------------

    def hold(self, record: dict[str, Any], stored: StoredExecution) -> dict[str, Any]:
        """One ledger record of ``stored``, checked against the store."""
        primitive, key, owner = record["primitive"], record["key"], record["owner"]
        data = dict(record.get("data") or {})
        hold: dict[str, Any] = {
            "primitive": primitive,
            "key": key,
            "step": record.get("step"),
            "scope": "reactor" if record.get("step") is None else "step",
            "execution_id": stored.id,
            "reactor": stored.reactor,
            "owner": owner,
            "state": record.get("state"),
            "fencing_token": data.get("fencing_token"),
            "count": data.get("count"),
            "ttl": data.get("ttl"),
            "ttl_left": None,
            "live": None,
            "taken_at": record.get("taken_at"),
            "details": {k: v for k, v in data.items() if k not in ("fencing_token", "count")},
        }
        if record.get("state") == CHARGED:
            return hold  # a rate limit's charge: nothing is held in the store
        if primitive == "lock":
            info = self.store.lock_state(key)
            hold["live"] = info.owner == owner and info.token == data.get("fencing_token")
            hold["ttl_left"] = self._ttl(info.pttl_ms) if hold["live"] else None
        elif primitive == "semaphore":
            lease_end = self.inspector.semaphore_lease(key, owner)
            hold["live"] = lease_end is not None and lease_end > self.now_ms
            if lease_end is not None and hold["live"]:
                hold["ttl_left"] = (lease_end - self.now_ms) / 1000
        elif primitive == "period":
            claim = self.inspector.period_claim(key, str(data.get("bucket")))
            hold["live"] = claim is not None and claim.owner == owner
            hold["ttl_left"] = _seconds(claim.ttl_ms) if claim and hold["live"] else None
        elif primitive == "ordered_lock":
            hold.update(self._position(key, data, record.get("state")))
        return hold

    def _position(self, key: str, data: dict[str, Any], state: Any) -> dict[str, Any]:
        info = self.store.ordered_lock_state(key)
        epoch, number = int(data.get("epoch", 0)), int(data.get("number", 0))
        live = info.epoch == epoch and number > info.done
        beat = self.inspector.ordered_lock_beat(key, number) if live else None
        ttl_left = None
        if beat is not None and data.get("ttl") is not None:
            ttl_left = (beat + float(data["ttl"]) * 1000 - self.now_ms) / 1000
        return {
            "live": live,
            "ttl_left": ttl_left,
            "details": {
                "epoch": epoch,
                "position": number,
                "turn": state == HELD,
                "waiting": state == WAITING,
                "ttl": data.get("ttl"),
            },
        }

    # -- holds found in the store only --------------------------------------------------------

    def _outside(
        self,
        primitive: str,
        key: str,
        owner: str,
        executions: dict[str, StoredExecution],
        by: HeldBy | None = None,
    ) -> dict[str, Any]:
        """A hold found in the store that no ledger lists: taken by a running execution whose
        ledger is not checkpointed yet, by a run in the caller (never stored), in a step body,
        or outside any execution. The step is the one the hold record names (``by``), else
        the one the declarations give."""
        execution_id = execution_of(owner, executions)
        stored = None if execution_id is None else executions[execution_id]
        scope, step = "outside", None
        if by is not None:
            scope, step = ("reactor", None) if by.step is None else ("step", by.step)
            execution_id = execution_id or by.execution_id
        elif stored is not None:
            context = load_context(stored)
            found = None if context is None else declared.attribute(context, primitive, key)
            scope, step = found if found is not None else ("execution", None)
        return {
            "primitive": primitive,
            "key": key,
            "step": step,
            "scope": scope,
            "execution_id": execution_id,
            "reactor": None if stored is None else stored.reactor,
            "owner": owner,
            "state": HELD,
            "fencing_token": None,
            "count": None,
            "ttl": None,
            "ttl_left": None,
            "live": True,
            "taken_at": None,
            "details": {},
        }

    def outside_lock(
        self, key: str, info: Any, executions: dict[str, StoredExecution]
    ) -> dict[str, Any]:
        hold = self._outside("lock", key, info.owner, executions, info.by)
        hold.update(fencing_token=info.token, count=info.count, ttl_left=self._ttl(info.pttl_ms))
        return hold

    def outside_semaphore(
        self,
        semaphore: dict[str, Any],
        holder: dict[str, Any],
        executions: dict[str, StoredExecution],
    ) -> dict[str, Any]:
        key, owner = semaphore["key"], holder["owner"]
        by = self.inspector.semaphore_by(key, owner)
        hold = self._outside("semaphore", key, owner, executions, by)
        hold.update(count=holder["count"], ttl_left=holder["lease_left"])
        return hold

    def outside_period(
        self, claim: dict[str, Any], executions: dict[str, StoredExecution]
    ) -> dict[str, Any]:
        """A period claim found in the store that no ledger lists."""
        hold = self._outside("period", claim["key"], claim["owner"], executions)
        hold.update(
            count=claim["count"], ttl_left=claim["lease_left"], details={"bucket": claim["bucket"]}
        )
        return hold

    # -- per key ----------------------------------------------------------------------------

    def lock(self, key: str, parked_on: dict[tuple[str, str], list[str]]) -> dict[str, Any]:
        """A lock's live state, with the executions parked on it."""
        info = self.store.lock_state(key)
        return {
            "key": key,
            "owner": info.owner,
            "fencing_token": info.token or None,
            "count": info.count,
            "ttl_left": self._ttl(info.pttl_ms) if info.owner else None,
            "waiters": info.waiters,
            "parked": sorted(parked_on.get(("lock", key), [])),
        }

    def semaphore(
        self,
        key: str,
        executions: dict[str, StoredExecution],
        parked_on: dict[tuple[str, str], list[str]],
    ) -> dict[str, Any]:
        """A semaphore's holders (with their lease left), waiters and free slots."""
        info = self.store.semaphore_state(key)
        holders = [
            {
                "owner": holder.owner,
                "execution_id": execution_of(holder.owner, executions)
                or (None if holder.by is None else holder.by.execution_id),
                "count": holder.count,
                "lease_left": (holder.lease_end_ms - self.now_ms) / 1000,
            }
            for holder in self.inspector.semaphore_holders(key, self.now_ms)
        ]
        return {
            "key": key,
            "held": info.held,
            "limit": None,  # filled in from the declarations of its users
            "free": None,
            "waiters": info.waiters,
            "holders": holders,
            "parked": sorted(parked_on.get(("semaphore", key), [])),
        }

    def ordered_lock(
        self, key: str, holds: list[dict[str, Any]], parked_on: dict[tuple[str, str], list[str]]
    ) -> dict[str, Any]:
        """An ordered lock's next turn, last completed position and positions in flight."""
        info = self.store.ordered_lock_state(key)
        positions = [
            {
                "position": h["details"].get("position"),
                "execution_id": h["execution_id"],
                "step": h["step"],
                "turn": h["details"].get("turn"),
                "beat_age": None,
            }
            for h in holds
            if h["primitive"] == "ordered_lock" and h["key"] == key and h["live"]
        ]
        listed = {p["position"] for p in positions}
        beats = self.inspector.ordered_lock_beats(key)
        for number, beat in beats.items():  # positions taken by runs whose ledger is not stored
            if number > info.done and number not in listed:
                positions.append(
                    {
                        "position": number,
                        "execution_id": None,
                        "step": None,
                        "turn": number == info.done + 1,
                        "beat_age": (self.now_ms - beat) / 1000,
                    }
                )
        positions.sort(key=lambda p: p["position"] or 0)
        pending = max(0, info.issued - info.done)
        return {
            "key": key,
            "epoch": info.epoch or None,
            "issued": info.issued,
            "last_completed": info.done,
            "next": info.done + 1 if pending else None,
            "in_flight": pending,
            "failed": info.failed,
            "positions": positions,
            "parked": sorted(parked_on.get(("ordered_lock", key), [])),
        }

    def rate_limits(
        self, found: Found, users: dict[tuple[str, str], set[declared.User]]
    ) -> list[dict[str, Any]]:
        """Each rate limit's calls in its current windows (and the limit, where declared)."""
        now = self.now_ms // 1000
        by_key: dict[str, list[dict[str, Any]]] = {}
        for (key, window), indexes in sorted(found.counters.items()):
            index = now // window
            count = self.inspector.rate_limit_count(key, window, index) if index in indexes else 0
            if not count:
                continue  # only old windows are left, waiting to expire
            by_key.setdefault(key, []).append(
                {
                    "window": window,
                    "count": count,
                    "limit": None,
                    "resets_in": (index + 1) * window - self.now_ms / 1000,
                }
            )
        result = []
        for key, counted in by_key.items():
            limits = declared.windows(key, users.get(("rate_limit", key), set()))
            for entry in counted:
                entry["limit"] = limits.get(entry["window"])
            result.append({"key": key, "windows": counted})
        return result

    def periods(self, found: Found, executions: dict[str, StoredExecution]) -> dict[str, Any]:
        """Period markers (buckets done, with when they expire) and in-flight claims."""
        markers = []
        for key, bucket in sorted(found.markers):
            marker = self.inspector.period_marker(key, bucket)
            if marker is not None:  # else it expired since the SCAN
                markers.append(
                    {
                        "key": key,
                        "bucket": bucket,
                        "marked_by": marker.marked_by,
                        "expires_in": _seconds(marker.ttl_ms),
                    }
                )
        claims = [
            _claim(claim, executions)
            for key, bucket in sorted(found.claims)
            if (claim := self.inspector.period_claim(key, bucket)) is not None
        ]
        return {"markers": markers, "claims": claims}


def _claim(claim: PeriodClaim, executions: dict[str, StoredExecution]) -> dict[str, Any]:
    return {
        "key": claim.key,
        "bucket": claim.bucket,
        "owner": claim.owner,
        "execution_id": execution_of(claim.owner, executions),
        "count": claim.count,
        "lease_left": _seconds(claim.ttl_ms),
    }


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def execution_of(owner: str, executions: Mapping[str, Any]) -> str | None:
    """The stored execution a store owner belongs to: the owner itself (the root id), or the
    root of a ``@parallel`` branch's owner (``"<root id>/<step>"``); None for a hold taken
    outside any execution."""
    for candidate in (owner, owner.split(BRANCH_SEPARATOR, 1)[0]):
        if candidate in executions:
            return candidate
    return None
