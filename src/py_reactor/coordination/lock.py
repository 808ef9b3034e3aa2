"""``Lock``: an exclusive, re-entrant, self-expiring lock with fencing tokens and fair handoff.

Re-entrant per owner (the running execution's root id, or a fresh id per acquisition outside
any execution): each acquisition by the owner is a *level* of its hold, and the key frees when
no level is left. Every fresh hold gets a fencing token, strictly increasing per key, that the
holder can pass to the systems it writes to. Waiters queue in FIFO order and a release hands
the lock straight to the oldest live waiter, so nobody polls and nobody starves. Each acquire,
release and extend is one Lua call. A level expires ``ttl`` seconds after its last extension, so
a holder that dies (kill -9) frees the key on its own; while the holder lives, auto-extend
pushes the expiry out every ``ttl / 3`` seconds. Levels lapse, extend and release one by one: a
runner presumed dead (its execution recovered elsewhere, re-entering the hold under the same
owner) keeps its level until that level's ttl runs out, and when it wakes it extends and
releases only its own level, never the recovered run's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from py_reactor.config import options as opt
from py_reactor.coordination._base import Acquirable, Hold, refuse_on_loop
from py_reactor.coordination._extender import keep_alive, remember
from py_reactor.coordination._waiting import wait_to_take
from py_reactor.coordination.owner import owner_or_new, running_held_by
from py_reactor.coordination.store import LockReply, Store, WaitTicket
from py_reactor.errors import LockAcquisitionError

__all__ = ["Lock", "LockHold", "LockState"]


def _token_if_held(store: Store, key: str, owner: str) -> int:
    """The token of ``owner``'s hold on ``key`` (0: none), read once an interrupted wait left
    no trace of a hand-off (see ``_waiting.wait_to_take``): a waiter held nothing before."""
    state = store.lock_state(key)
    return state.token if state.owner == owner else 0


@dataclass(frozen=True, slots=True)
class LockState:
    """A snapshot of a lock: who holds it, how deeply, its token, expiry and queue length."""

    owner: str | None
    count: int
    fencing_token: int
    ttl: float | None  # seconds left; None when not held
    waiters: int


class Lock(Acquirable["LockHold"]):
    """An exclusive lock on ``key``, shared by every process that uses the same store.

    Args:
        key: what to lock, e.g. ``"invoice:42"``.
        ttl: seconds a hold lives without being extended (default 60).
        wait: seconds to wait for a busy lock before raising (default 0: do not wait).
        auto_extend: extend the hold every ``ttl / 3`` seconds until it is released.
        owner: who holds it; default the running execution's root id, else a fresh id per
            acquisition (so separate ``with Lock(...)`` blocks outside executions exclude
            each other, even in one thread).
        store: the store to use; default the configured one (see ``configure``).

    Raises:
        DefinitionError: an option is invalid (the message names it).

    ``with Lock("invoice:42", ttl=30, wait=5) as hold:`` acquires and releases; ``hold`` is a
    :class:`LockHold` with ``fencing_token``.
    """

    primitive = "lock"

    def __init__(
        self,
        key: str,
        *,
        ttl: float = 60,
        wait: float = 0,
        auto_extend: bool = True,
        owner: str | None = None,
        store: Store | None = None,
    ) -> None:
        where = f"Lock({key!r})"
        self.key = opt.check_key("Lock(...)", key)
        self.ttl = opt.check_positive(where, "ttl", ttl)
        self.wait = opt.check_non_negative(where, "wait", wait)
        self.auto_extend = opt.check_bool(where, "auto_extend", auto_extend)
        self.owner = owner
        self._store = store
        self._ttl_ms = max(1, int(self.ttl * 1000))
        self._local = threading.local()

    def acquire(self, *, wait: float | None = None) -> LockHold:
        """Take the lock, waiting up to ``wait`` seconds (default: the lock's ``wait``).

        Returns:
            The hold; release it with ``hold.release()`` (or use ``with``).

        Raises:
            LockAcquisitionError: another owner held the lock for the whole wait.
            StoreUnavailableError: the store cannot be reached.
        """
        refuse_on_loop(f"{self!r}.acquire()", "`async with` or `await ....aacquire()`")
        owner = owner_or_new(self.owner)
        wait = self.wait if wait is None else opt.check_non_negative(repr(self), "wait", wait)
        store, key, ttl_ms = self.store, self.key, self._ttl_ms
        by = running_held_by()  # the execution and step a scope takes it for, if any
        if wait <= 0:
            reply = store.lock_acquire(key, owner, ttl_ms, by=by)
            taken: LockReply | None = reply if reply.held else None
        else:  # one call when free; a busy lock queues us in that same call

            def attempt(waiter: WaitTicket) -> LockReply:
                return store.lock_acquire(key, owner, ttl_ms, waiter=waiter, by=by)

            taken = wait_to_take(
                store, "lock", key, attempt, owner=owner, ttl_ms=ttl_ms, wait=wait,
                give_back=lambda token: store.lock_release(key, owner, token, 1),  # handed: level 1
                handed_anyway=lambda: _token_if_held(store, key, owner),
                by=by,
            )  # fmt: skip
        if taken is None:
            raise self._busy(wait)
        return self._held(store, owner, taken.count, taken.token, taken.level)

    def adopt(self, owner: str, token: int, count: int, level: int) -> LockHold | None:
        """Take over the ``level`` of a hold that ``owner`` still has (one round trip), e.g.
        after a park or in another process; None if it lapsed (or was taken again) meanwhile.

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        store = self.store
        if not store.lock_extend(self.key, owner, self._ttl_ms, int(token), int(level)):
            return None
        return self._held(store, owner, int(count), int(token), int(level))

    def _held(self, store: Store, owner: str, count: int, token: int, level: int) -> LockHold:
        hold = LockHold(self, store, owner, int(token), int(count), int(level))
        if self.auto_extend:
            # Every hold, not just the outermost: holds of one owner in several threads are
            # released in any order, and the last one standing must keep the key alive.
            keep_alive(hold, max(self.ttl / 3, 0.01))
        else:
            remember(hold, self.ttl)  # not extended, but given back at a clean exit
        return hold

    def _busy(self, wait: float) -> LockAcquisitionError:
        waited = f"after waiting {wait:g} s" if wait > 0 else "(wait=0: did not wait)"
        return LockAcquisitionError(
            f"lock {self.key!r} is held by another owner {waited}; retry later, or raise "
            "wait= if holders are expected to finish soon",
            primitive="lock",
            key=self.key,
        )

    def state(self) -> LockState:
        """Who holds the lock right now (one read-only round trip)."""
        info = self.store.lock_state(self.key)
        return LockState(
            owner=info.owner,
            count=info.count,
            fencing_token=info.token,
            ttl=info.pttl_ms / 1000 if info.pttl_ms > 0 else None,
            waiters=info.waiters,
        )

    def __repr__(self) -> str:
        return f"Lock({self.key!r}, ttl={self.ttl:g}, wait={self.wait:g})"


class LockHold(Hold):
    """One acquisition of a :class:`Lock`: release it exactly once (extra releases are ignored).

    Attributes:
        fencing_token: strictly increasing per key across fresh holds (a re-entered hold shares
            its outer hold's token). Pass it to the resource you protect and have it reject
            writes carrying a smaller token than one it has seen.
        level: this acquisition's level of the owner's hold (1: the outermost); it is extended
            and released alone, and lapses on its own.
        key, owner, count, released, lost: as for every hold (see ``Hold``).
    """

    __slots__ = ("fencing_token", "level")

    def __init__(
        self, lock: Lock, store: Store, owner: str, token: int, count: int, level: int = 1
    ) -> None:
        super().__init__(store, lock.key, owner, count, ttl_ms=lock._ttl_ms)
        self.fencing_token = token
        self.level = level

    def _give_back(self) -> int:
        # The token: a stale hold of the same owner (expired, taken again) frees nothing; the
        # level: nor does one whose level lapsed while the owner's other levels live on.
        return self.store.lock_release(self.key, self.owner, self.fencing_token, self.level)

    def _renew(self) -> bool:
        return self.store.lock_extend(
            self.key, self.owner, self._ttl_ms, self.fencing_token, self.level
        )

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<LockHold {self.key!r} token={self.fencing_token} count={self.count} {state}>"
