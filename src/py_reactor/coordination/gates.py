"""One gate protocol over the five primitives: enter → entered | busy | skip; exit; extend.

A scope (``coordination.scope``) takes an execution's declarations through gates and never
asks which primitive it is talking to. A gate turns its primitive's calls into three answers:

* ``Entered(record)``: taken (or adopted from a record an earlier run of the scope left, for
  example before a park or in another process); ``record`` is what goes into the ledger.
* ``Busy(error)``: contended after ``wait``; ``error`` is the typed error (with ``retry_after``
  for a rate limit). Waiting in-process and parking in a worker are two callers of this answer.
* ``Skip(reason)``: the work must not run (period already done, strict ordered short-circuit,
  an ordered position that left the sequence while its run was away).

Everything a gate takes is written as a :class:`~py_reactor.coordination.holds.HoldRecord`;
the live hold object stays in this process's registry (``holds.live``) and is rebuilt from the
record when another process exits or extends it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from py_reactor.coordination._extender import forget, keep_alive
from py_reactor.coordination.holds import CHARGED, HELD, WAITING, HoldRecord, live
from py_reactor.coordination.lock import Lock, LockHold
from py_reactor.coordination.ordered_lock import OrderedLock, Position, Turn
from py_reactor.coordination.owner import owner_or_new
from py_reactor.coordination.period import Period, PeriodClaim
from py_reactor.coordination.rate_limit import RateLimit
from py_reactor.coordination.semaphore import Semaphore, SemaphoreHold
from py_reactor.errors import (
    CoordinationError,
    LockAcquisitionError,
    OrderedLockWaitError,
    PeriodBusyError,
    RateLimitExceededError,
    SemaphoreAcquisitionError,
)

__all__ = ["Busy", "Entered", "Gate", "Skip", "gate_for"]


@dataclass(frozen=True, slots=True)
class Entered:
    """The gate is passed; ``record`` says what is held. ``fresh``: newly taken (report it)."""

    record: HoldRecord
    fresh: bool = True
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Busy:
    """Contended: the gate stayed shut for the whole wait. ``error`` is the typed error."""

    error: CoordinationError
    record: HoldRecord | None = None  # what was taken anyway (an ordered position in line)

    @property
    def retry_after(self) -> float | None:
        """Seconds until it may admit (rate limits); None: when the key is released."""
        return getattr(self.error, "retry_after", None)


@dataclass(frozen=True, slots=True)
class Skip:
    """The work must not run: ``reason`` is ``"period"``, ``"ordered_lock"`` or
    ``"ordered_lock_stale_batch"``.

    ``record``: what is still held and must be exited (a short-circuited ordered turn).
    """

    reason: str
    record: HoldRecord | None = None


Answer = Entered | Busy | Skip

#: The Skip reason of an ordered position that left the sequence while its run was away (parked
#: past ``poison_pill_timeout`` and skipped, or its batch ended): its turn will never come.
STALE_BATCH = "ordered_lock_stale_batch"


class Gate:
    """One declared primitive on one key, as a scope drives it.

    Class attributes say what differs between primitives, so that no caller branches on a
    primitive's name:

    * ``exclusive``: it keeps others out (lock, semaphore): a step's compensate/undo re-take
      it, and the dispatch guard looks at it.
    * ``by_ledger``: re-entered through the ledger (a nested run inside an enclosing hold of
      the same entry passes without taking anything), not through the store's owner count.
    * ``kept_across_park``: a step that parks keeps it (its ordered position).
    """

    primitive: ClassVar[str] = ""
    exclusive: ClassVar[bool] = False
    by_ledger: ClassVar[bool] = False
    kept_across_park: ClassVar[bool] = False

    def __init__(self, primitive: Any) -> None:
        self.p = primitive
        self.key: str = primitive.key

    @property
    def entry(self) -> str:
        """How a hold of this gate is listed in ``held_keys``."""
        return f"{self.primitive}:{self.key}"

    def check(self) -> Skip | None:
        """A cheap look before anything is taken; a Skip stops the scope at once."""
        return None

    def enter(self, record: HoldRecord | None, *, owner: str | None, wait: float | None) -> Answer:
        """Take the gate, or adopt ``record`` (this scope's own, from before a park)."""
        raise NotImplementedError

    def exit(self, record: HoldRecord, *, succeeded: bool, failed: bool) -> bool:
        """Release what ``record`` holds; True if it had been lost (expired) meanwhile."""
        raise NotImplementedError

    def extend(self, record: HoldRecord) -> bool:
        """Push the hold's expiry out; False if it is no longer ours."""
        hold = self._hold(record)
        return True if hold is None else bool(hold.extend())

    def detach(self, record: HoldRecord) -> None:
        """Stop keeping ``record`` alive in this process; the record itself stays held."""
        hold = live.pop(record)
        if hold is not None:
            forget(hold)

    def _hold(self, record: HoldRecord) -> Any:
        """The live hold object of ``record``: this process's, else rebuilt from the record."""
        hold = live.get(record)
        return hold if hold is not None else self._rebuild(record)

    def _rebuild(self, record: HoldRecord) -> Any:
        return None

    def _record(self, owner: str, state: str = HELD, **data: Any) -> HoldRecord:
        """A record of what this gate took; the scope fills in holder and step.

        ``data["ttl"]``: seconds the hold lives unextended (how long a parked or dead holder
        keeps it).
        """
        return HoldRecord(self.primitive, self.key, owner, "", None, self.entry, state, data)


class _OwnedGate(Gate):
    """Lock and semaphore: a hold owned in the store, adopted by owner, released once."""

    exclusive = True
    busy: ClassVar[type[CoordinationError]] = CoordinationError

    def enter(self, record: HoldRecord | None, *, owner: str | None, wait: float | None) -> Answer:
        if record is not None:
            adopted = self._adopt(record)
            if adopted is not None:
                live.put(record, adopted)
                return Entered(record, fresh=False)
        try:
            hold = self.p.acquire(wait=wait)
        except self.busy as exc:
            return Busy(exc)
        data, fields = self._taken(hold)
        new = self._record(hold.owner, **data)
        live.put(new, hold)
        return Entered(new, fields=fields)

    def exit(self, record: HoldRecord, *, succeeded: bool, failed: bool) -> bool:
        hold = live.pop(record) or self._rebuild(record)
        hold.release()
        return bool(hold.lost)

    def _adopt(self, record: HoldRecord) -> Any:
        """The hold ``record`` names, still ours (extended now), else None: it lapsed."""
        raise NotImplementedError

    def _taken(self, hold: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """What a fresh hold's record keeps, and what its acquisition event carries."""
        raise NotImplementedError


class LockGate(_OwnedGate):
    """``with_lock``: exclusive, re-entrant by owner in the store, fencing token per hold."""

    primitive = "lock"
    busy = LockAcquisitionError
    p: Lock

    def _adopt(self, record: HoldRecord) -> LockHold | None:
        data = record.data
        return self.p.adopt(record.owner, data["fencing_token"], data["count"], _level(record))

    def _taken(self, hold: LockHold) -> tuple[dict[str, Any], dict[str, Any]]:
        token = hold.fencing_token
        data = {"fencing_token": token, "count": hold.count, "level": hold.level, "ttl": self.p.ttl}
        return data, {"fencing_token": token}

    def _rebuild(self, record: HoldRecord) -> LockHold:
        data = record.data
        return LockHold(
            self.p, self.p.store, record.owner, data["fencing_token"], data["count"], _level(record)
        )


def _level(record: HoldRecord) -> int:
    """The lock level ``record`` holds (a record written before levels had one: the first)."""
    return int(record.data.get("level", 1))


class SemaphoreGate(_OwnedGate):
    """``with_semaphore``: one leased slot per owner."""

    primitive = "semaphore"
    busy = SemaphoreAcquisitionError
    p: Semaphore

    def _adopt(self, record: HoldRecord) -> SemaphoreHold | None:
        return self.p.adopt(record.owner, record.data["count"])

    def _taken(self, hold: SemaphoreHold) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"count": hold.count, "ttl": self.p.lease}, {}

    def _rebuild(self, record: HoldRecord) -> SemaphoreHold:
        return SemaphoreHold(self.p, self.p.store, record.owner, record.data["count"])


class PeriodGate(Gate):
    """``with_period``: checked before anything is taken, claimed under lock and semaphore."""

    primitive = "period"
    by_ledger = True
    p: Period

    @property
    def entry(self) -> str:
        # A nested run re-enters an enclosing claim only for the same period length.
        return f"period:{self.key}@{self.p.every}"

    def check(self) -> Skip | None:
        return Skip("period") if self.p.is_done() else None

    def enter(self, record: HoldRecord | None, *, owner: str | None, wait: float | None) -> Answer:
        if record is not None:
            claim = self._rebuild(record)
            if claim.extend():
                keep_alive(claim, max(self.p.lease / 3, 0.001))
                live.put(record, claim)
                return Entered(record, fresh=False)
        try:
            claim = self.p.claim(owner_or_new(owner), wait=wait)
        except PeriodBusyError as exc:
            return Busy(exc)
        if not claim.due:
            return Skip("period")
        new = self._record(
            claim.owner,
            bucket=claim.bucket,
            expire_at=claim._expire_at,
            every=self.p.every,
            ttl=self.p.lease,
        )
        live.put(new, claim)
        return Entered(new)

    def exit(self, record: HoldRecord, *, succeeded: bool, failed: bool) -> bool:
        claim = live.pop(record) or self._rebuild(record)
        forget(claim)
        return claim.release(mark=succeeded)

    def _rebuild(self, record: HoldRecord) -> PeriodClaim:
        return PeriodClaim(
            self.p,
            self.p.store,
            due=True,
            bucket=record.data["bucket"],
            expire_at=record.data["expire_at"],
            owner=record.owner,
        )


class OrderedLockGate(Gate):
    """``with_ordered_lock``: a position taken once, then this position's turn."""

    primitive = "ordered_lock"
    by_ledger = True
    kept_across_park = True
    p: OrderedLock

    def enter(self, record: HoldRecord | None, *, owner: str | None, wait: float | None) -> Answer:
        fresh = record is None or record.state != HELD  # a turn kept across a park is adopted
        if record is None:
            position = self.p.take_position()
            record = self._record(
                owner_or_new(owner),
                WAITING,
                epoch=position.epoch,
                number=position.number,
                ttl=self.p.poison_pill_timeout,
            )
        position = self._position(record)
        lock = self.p if wait is None else self._waiting(wait)
        try:
            turn = lock.wait_turn(position)
        except OrderedLockWaitError as exc:
            if exc.stale:  # its turn will never come: waiting (or parking) on it would be forever
                return Skip(STALE_BATCH)  # nothing to give back: the position is out of line
            return Busy(exc, record)
        except BaseException:  # interrupted, or the store failed: step out of the line
            with contextlib.suppress(Exception):
                self.p.abandon(position)
            raise
        record.state = HELD
        live.put(record, turn)
        if turn.short_circuit:
            return Skip("ordered_lock", record)
        return Entered(record, fresh=fresh)

    def _waiting(self, wait: float) -> OrderedLock:
        if self.p.wait == wait:
            return self.p
        return OrderedLock(
            self.key,
            ttl=self.p.ttl,
            poison_pill_timeout=self.p.poison_pill_timeout,
            strict=self.p.strict,
            wait=wait,
            store=self.p._store,
        )

    def exit(self, record: HoldRecord, *, succeeded: bool, failed: bool) -> bool:
        held = live.pop(record)
        position = self._position(record)
        if isinstance(held, Turn):
            return held.release(failed=failed)
        if record.state == HELD:  # a turn taken in another process
            return Turn(self.p, position, False, self.p._watch(position)).release(failed=failed)
        # never got its turn: step aside so later positions need not wait for it
        with contextlib.suppress(Exception):
            self.p.abandon(position)
        return False

    def extend(self, record: HoldRecord) -> bool:
        return True  # positions heartbeat on their own from take to release

    def detach(self, record: HoldRecord) -> None:
        live.pop(record)
        self.p._unwatch(self._position(record))

    def _position(self, record: HoldRecord) -> Position:
        return Position(self.key, int(record.data["epoch"]), int(record.data["number"]))


class RateLimitGate(Gate):
    """``with_rate_limit``: charged once per entry; a scope that already paid is not charged."""

    primitive = "rate_limit"
    p: RateLimit

    def enter(self, record: HoldRecord | None, *, owner: str | None, wait: float | None) -> Answer:
        if record is not None:
            return Entered(record, fresh=False)
        try:
            self.p.acquire(wait=wait)
        except RateLimitExceededError as exc:
            return Busy(exc)
        return Entered(self._record(owner_or_new(owner), CHARGED))

    def exit(self, record: HoldRecord, *, succeeded: bool, failed: bool) -> bool:
        return False  # a charge is spent; nothing to give back

    def extend(self, record: HoldRecord) -> bool:
        return True


_GATES: dict[str, type[Gate]] = {
    gate.primitive: gate
    for gate in (LockGate, SemaphoreGate, PeriodGate, OrderedLockGate, RateLimitGate)
}


def gate_for(primitive: Any) -> Gate:
    """The gate that drives ``primitive`` (a Lock, Semaphore, Period, OrderedLock, RateLimit)."""
    return _GATES[primitive.primitive](primitive)
