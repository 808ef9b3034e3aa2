"""Freeing a stale hold by force: what ``py-reactor holds release KEY --primitive P --force`` does.

A hold whose holder died stays until its own ttl lapses: a lock's ``ttl``, a semaphore's or a
period's ``lease``, an ordered position's ``poison_pill_timeout`` (ten minutes by default).
An operator who knows the holder is gone frees it now. :func:`force_release` reads from the
store who holds the key, then gives the hold back *as that holder*, through the primitive's own
release (the scripts a holder's release runs, one call per level), so it does all a release
does: the key goes to the oldest waiter queued for it, or the executions parked on it are woken.
It writes nothing else.

* **lock**: every live level of the owner's hold; the key is free after the last one.
  With ``owner``, only if that owner holds it (a guard against freeing a hold that changed
  hands since the operator looked).
* **semaphore**: the slot of every live holder, each with all of its levels; with ``owner``,
  only that holder's slot.
* **period**: every claim in flight on the key (one per bucket), dropped *without* marking the
  bucket done: the work did not finish, so the next run of the bucket does it. With ``owner``,
  only that owner's claims.
* **ordered_lock**: the current turn (the position after the last completed one) is passed on,
  not as a failure: as the poison pill skips a position that stopped heartbeating, only sooner.
  Later positions run, also under ``strict``; the stale position's run, if it ever comes back,
  finds its turn gone and ends the seed's way (the step is skipped, a reactor halts, reason
  ``"ordered_lock_stale_batch"``). Positions have no owner in the store, so ``owner`` is
  refused.
* **rate_limit**: refused: a rate limit counts calls in windows, and nobody holds it.

A holder that was alive after all is not told: it finds its hold lost at its next extend or
release, as when a hold lapses (a warning; a lock's fencing token keeps its late writes out).
Every forced release is logged as a WARNING on the ``py_reactor`` logger, naming the key, the
owner and the execution and step the hold was taken for (when the store or a stored ledger
names them), with the fields in ``record.py_reactor``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from py_reactor.coordination.owner import BRANCH_SEPARATOR, HeldBy, encloses
from py_reactor.coordination.store import ORDERED_UNCHANGED
from py_reactor.errors import CoordinationError
from py_reactor.runtime.execution import snapshot
from py_reactor.states import Status
from py_reactor.storage import current_store
from py_reactor.storage.executions import ExecutionStore
from py_reactor.storage.inspect import Inspector

if TYPE_CHECKING:
    from py_reactor.storage.redis import RedisStore

__all__ = ["RELEASABLE", "LiveHold", "Released", "describe_holds", "force_release", "holds_to_free"]

logger = logging.getLogger("py_reactor")

#: The primitives a hold of which can be freed (a rate limit has no holder).
RELEASABLE = ("lock", "semaphore", "period", "ordered_lock")

#: The ttl an ordered lock's keys get when the store shows none (the primitive's default).
_ORDERED_TTL_MS = 86_400_000
#: The poison-pill timeout a forced release passes: so long that it skips no later position
#: that has a heartbeat (each waiter skips the dead ones itself, with its own timeout).
_NO_POISON_MS = 10 * 365 * 86_400_000
#: The most executions looked at to name the run an ordered turn belongs to.
_MOST_LOOKED_AT = 1000
#: The most releases of one owner's levels (a guard against an owner re-entering for ever).
_MOST_LEVELS = 10_000


@dataclass(frozen=True, slots=True)
class LiveHold:
    """One hold that a forced release frees.

    Attributes:
        primitive, key: the primitive and the user's key.
        owner: who holds it in the store; None for an ordered lock's turn (no owner).
        execution_id: the execution it was taken for, when the store or a stored ledger says.
        step: the step it was taken for (None: the reactor's own, or not known).
        scope: ``"step"``, ``"reactor"``, ``"execution"`` (its step not known) or
            ``"outside"`` (taken outside any execution, or by one not stored), as the
            dashboard's holds say.
        data: what identifies it and what is shown: a lock's ``token``, ``levels`` and
            ``ttl_left`` (s); a semaphore's ``count`` and ``lease_left``; a period claim's
            ``bucket``, ``count`` and ``ttl_left``; an ordered turn's ``epoch``, ``number``,
            ``beat_age`` (s since its last heartbeat, None without one) and ``ttl_ms``.
    """

    primitive: str
    key: str
    owner: str | None
    execution_id: str | None
    step: str | None
    scope: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """Who holds it and what, in a few words: ``'ops' (token 17, 2 levels, 41.0 s left)``;
        for an ordered turn ``position 3 of epoch 2 (execution ..., last heartbeat ...)``."""
        taken_for = []
        if self.execution_id is not None and self.execution_id != self.owner:
            taken_for.append(f"execution {self.execution_id}")
        if self.scope == "step":
            taken_for.append(f"step {self.step!r}")
        elif self.scope == "reactor":
            taken_for.append("the reactor's own hold")
        parts = [", ".join(taken_for)] if taken_for else []
        parts.append(", ".join(self._details()))
        inside = "; ".join(part for part in parts if part)
        if self.primitive == "ordered_lock":
            where = f"position {self.data['number']} of epoch {self.data['epoch']}"
        elif self.owner is not None and self.owner == self.execution_id:
            where = f"execution {self.owner}"
        else:
            where = repr(self.owner)
        return f"{where} ({inside})" if inside else where

    def _details(self) -> list[str]:
        data = self.data
        if self.primitive == "lock":
            levels = int(data["levels"])
            return [
                f"token {data['token']}",
                *([f"{levels} levels"] if levels > 1 else []),
                f"{data['ttl_left']:.1f} s left",
            ]
        if self.primitive == "semaphore":
            count = int(data["count"])
            return [
                *([f"{count} levels"] if count > 1 else []),
                f"lease {data['lease_left']:.1f} s left",
            ]
        if self.primitive == "period":
            left = data.get("ttl_left")
            return [
                f"bucket {data['bucket']!r}",
                *([f"{left:.1f} s left"] if left is not None else []),
            ]
        age = data.get("beat_age")
        return ["no heartbeat" if age is None else f"last heartbeat {age:.1f} s ago"]


@dataclass(frozen=True, slots=True)
class Released:
    """What a forced release freed.

    Attributes:
        primitive, key: the primitive and the user's key.
        freed: the holds freed (those found that had not ended meanwhile).
        woken: executions parked on the key that the release made due now, counted from the
            key's parked list before and after it.
        now_held_by: a lock's owner right after the release: the queued waiter it was handed
            to (or a new holder); None when free, and for the other primitives.
    """

    primitive: str
    key: str
    freed: tuple[LiveHold, ...]
    woken: int
    now_held_by: str | None = None

    def describe(self) -> str:
        """One line: what was freed, how many parked runs were woken, who holds it now."""
        woke = f"woke {self.woken} parked execution{'' if self.woken == 1 else 's'}"
        held = f"; now held by {self.now_held_by!r}" if self.now_held_by is not None else ""
        return f"{describe_holds(list(self.freed))}; {woke}{held}"


def describe_holds(holds: list[LiveHold]) -> str:
    """The holds of one key in a line: ``lock 'k' held by 'ops' (token 17, 41.0 s left)``,
    ``2 holds of semaphore 'k': 'a' (...), 'b' (...)``,
    ``the turn of ordered_lock 'k': position 3 of epoch 2 (...)``."""
    first = holds[0]
    what = f"{first.primitive} {first.key!r}"
    if first.primitive == "ordered_lock":
        return f"the turn of {what}: {first.describe()}"
    if len(holds) == 1:
        return f"{what} held by {first.describe()}"
    return f"{len(holds)} holds of {what}: " + ", ".join(hold.describe() for hold in holds)


def holds_to_free(
    primitive: str, key: str, *, owner: str | None = None, store: RedisStore | None = None
) -> list[LiveHold]:
    """What :func:`force_release` would free now (read only).

    Args:
        primitive: ``"lock"``, ``"semaphore"``, ``"period"`` or ``"ordered_lock"``.
        key: the user's key.
        owner: only the holds of this owner (an execution id also names its ``@parallel``
            branches' holds, and the holds the store says were taken for it); None: every one.
        store: default the configured one.

    Raises:
        CoordinationError: nothing is held (or nothing by ``owner``), a rate limit, an unknown
            primitive, or an owner given for an ordered lock; the message says which.
        StoreUnavailableError: the store cannot be reached.
    """
    _check(primitive, key, owner)
    return _Reader(store or current_store()).to_free(primitive, key, owner)


def force_release(
    primitive: str, key: str, *, owner: str | None = None, store: RedisStore | None = None
) -> Released:
    """Free the live hold(s) on ``key`` of ``primitive`` as their holder's release would, and
    log it; see the module's docstring for what each primitive frees.

    Arguments and errors as :func:`holds_to_free`; a hold that ended between the read and the
    release is left out, and when none is left the error says nothing was freed.
    """
    _check(primitive, key, owner)
    reader = _Reader(store or current_store())
    holds = reader.to_free(primitive, key, owner)
    inspector, s = reader.inspector, reader.store
    parked = inspector.parked(primitive, key)
    heads = inspector.heads(parked) if parked else []
    waiting = {i for i, head in zip(parked, heads, strict=True) if head.status == Status.WAITING}
    free = _FREE[primitive]
    freed = tuple(hold for hold in holds if free(s, hold))
    if not freed:
        raise CoordinationError(
            f"no live hold on {primitive} {key!r} was freed: "
            f"{describe_holds(holds)} ended while it was being freed",
            primitive=primitive,
            key=key,
        )
    popped = Counter(parked) - Counter(inspector.parked(primitive, key))
    now_held_by = s.lock_state(key).owner if primitive == "lock" else None
    released = Released(primitive, key, freed, len(set(popped) & waiting), now_held_by)
    logger.warning(
        "py_reactor: released by force: %s",
        released.describe(),
        extra={
            "py_reactor": {
                "event": "force_release",
                "primitive": primitive,
                "key": key,
                "owners": [hold.owner for hold in freed],
                "execution_ids": [hold.execution_id for hold in freed],
                "steps": [hold.step for hold in freed],
                "woken": released.woken,
            }
        },
    )
    return released


def _check(primitive: str, key: str, owner: str | None) -> None:
    if primitive == "rate_limit":
        raise CoordinationError(
            f"rate_limit {key!r} has no holder to free: a rate limit counts the calls of each "
            "window, and a window's count ends with the window",
            primitive=primitive,
            key=key,
        )
    if primitive not in RELEASABLE:
        raise CoordinationError(
            f"{primitive!r} is not a primitive whose hold can be freed: give lock, semaphore, "
            "period or ordered_lock",
            key=key,
        )
    if primitive == "ordered_lock" and owner is not None:
        raise CoordinationError(
            f"ordered_lock {key!r}: its positions have no owner in the store, so owner "
            f"{owner!r} names none; leave the owner out to free the current turn",
            primitive=primitive,
            key=key,
        )


class _Reader:
    """The reads of one forced release: who holds the key, and which run took it."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.inspector = Inspector(store)
        self.executions = ExecutionStore(store)
        self.now_ms = self.inspector.server_ms()
        self._ledgers: dict[str, list[dict[str, Any]] | None] = {}

    def to_free(self, primitive: str, key: str, owner: str | None) -> list[LiveHold]:
        found = getattr(self, f"_{primitive}")(key)
        chosen = [hold for hold in found if _owned_by(hold, owner)]
        if not chosen:
            by = "" if owner is None else f" by {owner!r}"
            others = [repr(hold.owner) for hold in found]
            held = f" (held by {', '.join(others)})" if others else ""
            raise CoordinationError(
                f"no live hold on {primitive} {key!r}{by}{held}: nothing to free",
                primitive=primitive,
                key=key,
            )
        return chosen

    # -- who holds each primitive --------------------------------------------------------------

    def _lock(self, key: str) -> list[LiveHold]:
        hold = self.inspector.lock_hold(key)
        if hold is None:
            return []
        live = {n: lapses for n, lapses in hold.levels.items() if lapses > self.now_ms}
        if not live:
            return []  # every level lapsed: the hold is gone, whatever its hash says
        data = {
            "token": hold.token,
            "levels": len(live),
            "level_numbers": sorted(live, reverse=True),
            "ttl_left": (max(live.values()) - self.now_ms) / 1000,
        }
        return [self._named("lock", key, hold.owner, hold.by, data, _owner_is(hold.owner))]

    def _semaphore(self, key: str) -> list[LiveHold]:
        return [
            self._named(
                "semaphore",
                key,
                holder.owner,
                holder.by,
                {"count": holder.count, "lease_left": (holder.lease_end_ms - self.now_ms) / 1000},
                _owner_is(holder.owner),
            )
            for holder in self.inspector.semaphore_holders(key, self.now_ms)
        ]

    def _period(self, key: str) -> list[LiveHold]:
        return [
            self._named(
                "period",
                key,
                claim.owner,
                None,
                {
                    "bucket": claim.bucket,
                    "count": claim.count,
                    "ttl_left": None if claim.ttl_ms is None else claim.ttl_ms / 1000,
                },
                _owner_is(claim.owner, bucket=claim.bucket),
            )
            for claim in self.inspector.period_claims(key)
        ]

    def _ordered_lock(self, key: str) -> list[LiveHold]:
        info = self.store.ordered_lock_state(key)
        if info.epoch == 0 or info.issued <= info.done:
            return []  # no position in flight
        number = info.done + 1
        beat = self.inspector.ordered_lock_beat(key, number)
        data = {
            "epoch": info.epoch,
            "number": number,
            "beat_age": None if beat is None else max(0, self.now_ms - beat) / 1000,
            "ttl_ms": self.inspector.ordered_lock_ttl(key) or _ORDERED_TTL_MS,
        }

        def mine(record: dict[str, Any]) -> bool:
            held = record.get("data") or {}
            return (held.get("epoch"), held.get("number")) == (info.epoch, number)

        seen = self.inspector.in_flight()  # the turn's run runs, is parked, or is due
        for execution_id in [*seen.leased, *(i for i, _ in seen.due)][:_MOST_LOOKED_AT]:
            named = self._in_ledger(execution_id, "ordered_lock", key, mine)
            if named is not None:
                return [LiveHold("ordered_lock", key, None, execution_id, *named, data)]
        return [LiveHold("ordered_lock", key, None, None, None, "outside", data)]

    # -- which run took it ---------------------------------------------------------------------

    def _named(
        self,
        primitive: str,
        key: str,
        owner: str,
        by: HeldBy | None,
        data: dict[str, Any],
        match: Callable[[dict[str, Any]], bool],
    ) -> LiveHold:
        """The hold, with the execution and step the store names (``by``), else the ones the
        stored ledger of the owner's execution gives."""
        if by is not None:
            scope = "reactor" if by.step is None else "step"
            return LiveHold(primitive, key, owner, by.execution_id, by.step, scope, data)
        execution_id = owner.split(BRANCH_SEPARATOR, 1)[0]
        named = self._in_ledger(execution_id, primitive, key, match)
        if named is not None:
            return LiveHold(primitive, key, owner, execution_id, *named, data)
        if self._ledger(execution_id) is not None:
            return LiveHold(primitive, key, owner, execution_id, None, "execution", data)
        return LiveHold(primitive, key, owner, None, None, "outside", data)

    def _in_ledger(
        self,
        execution_id: str,
        primitive: str,
        key: str,
        match: Callable[[dict[str, Any]], bool],
    ) -> tuple[str | None, str] | None:
        """``(step, scope)`` of the record of ``execution_id``'s stored ledger on ``key`` that
        ``match`` accepts; None when it lists none (or the execution is not stored)."""
        for record in self._ledger(execution_id) or []:
            if record["primitive"] == primitive and record["key"] == key and match(record):
                step = record.get("step")
                return step, "reactor" if step is None else "step"
        return None

    def _ledger(self, execution_id: str) -> list[dict[str, Any]] | None:
        if execution_id not in self._ledgers:
            stored = self.executions.load(execution_id)
            self._ledgers[execution_id] = None if stored is None else snapshot(stored).holds
        return self._ledgers[execution_id]


def _owner_is(owner: str, bucket: str | None = None) -> Callable[[dict[str, Any]], bool]:
    """Whether a ledger record is ``owner``'s (and of period ``bucket``, when given)."""

    def match(record: dict[str, Any]) -> bool:
        held = record.get("data") or {}
        return record["owner"] == owner and (bucket is None or held.get("bucket") == bucket)

    return match


def _owned_by(hold: LiveHold, owner: str | None) -> bool:
    """Whether ``owner`` (None: anyone) names ``hold``: its owner, the execution whose
    ``@parallel`` branch owns it, or the execution the store says it was taken for."""
    if owner is None:
        return True
    return (hold.owner is not None and encloses(owner, hold.owner)) or hold.execution_id == owner


# -- freeing, as the holder's own release: True if something was freed ---------------------------


def _free_lock(store: RedisStore, hold: LiveHold) -> bool:
    assert hold.owner is not None
    freed = False
    for level in hold.data["level_numbers"]:  # the last live level frees the key, and hands it on
        freed = (
            store.lock_release(hold.key, hold.owner, int(hold.data["token"]), level) >= 0 or freed
        )
    return freed


def _free_semaphore(store: RedisStore, hold: LiveHold) -> bool:
    assert hold.owner is not None
    return _drop_levels(lambda: store.semaphore_release(hold.key, hold.owner or ""))


def _free_period(store: RedisStore, hold: LiveHold) -> bool:
    assert hold.owner is not None
    bucket = str(hold.data["bucket"])
    # Not marked done (the work did not finish), so the marker's expiry is not used.
    return _drop_levels(
        lambda: store.period_release(hold.key, bucket, hold.owner or "", mark=False, expire_at=0)
    )


def _free_ordered_lock(store: RedisStore, hold: LiveHold) -> bool:
    outcome = store.ordered_lock_release(
        hold.key,
        int(hold.data["epoch"]),
        int(hold.data["number"]),
        failed=False,  # skipped as a poison pill is: later positions of a strict lock still run
        poison_ms=_NO_POISON_MS,
        ttl_ms=int(hold.data["ttl_ms"]),  # the keys keep the expiry they had
    )
    return outcome != ORDERED_UNCHANGED


def _drop_levels(release: Callable[[], int]) -> bool:
    """Call ``release`` (one level each) until nothing is left; False if nothing was held."""
    left = release()
    if left < 0:
        return False
    for _ in range(_MOST_LEVELS):
        if left <= 0:
            break
        left = release()
    return True


_FREE: dict[str, Callable[[RedisStore, LiveHold], bool]] = {
    "lock": _free_lock,
    "semaphore": _free_semaphore,
    "period": _free_period,
    "ordered_lock": _free_ordered_lock,
}
