"""``Semaphore``: at most ``limit`` owners inside at once, each holding an expiring lease.

Every holder's slot is a lease (default 60 s) renewed every ``lease / 3`` seconds while the
work runs, so a holder that dies gives its slot back when the lease lapses instead of losing it
for good. An owner that enters again (a composed child, a nested step) re-enters its own slot
with a nesting count. Waiters queue in FIFO order and a release hands the freed slot to the
oldest live waiter. Each acquire, release and extend is one Lua call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from py_reactor.config import options as opt
from py_reactor.coordination._base import Acquirable, Hold, refuse_on_loop
from py_reactor.coordination._extender import keep_alive
from py_reactor.coordination._waiting import wait_to_take
from py_reactor.coordination.owner import owner_or_new, running_held_by
from py_reactor.coordination.store import LockReply, Store, WaitTicket
from py_reactor.errors import SemaphoreAcquisitionError

__all__ = ["Semaphore", "SemaphoreHold", "SemaphoreState"]


@dataclass(frozen=True, slots=True)
class SemaphoreState:
    """A snapshot of a semaphore: live holders and queued waiters."""

    held: int
    waiters: int


class Semaphore(Acquirable["SemaphoreHold"]):
    """At most ``limit`` concurrent owners on ``key``, across every process using the store.

    Args:
        key: what to limit, e.g. ``"mailer"``.
        limit: how many owners may hold a slot at once (>= 1).
        wait: seconds to wait for a free slot before raising (default 0: do not wait).
        lease: seconds a slot lives without renewal (default 60); renewed while held.
        owner: who holds the slot; default the running execution's root id, else a fresh id.
        store: the store to use; default the configured one.

    Raises:
        DefinitionError: an option is invalid (the message names it).
    """

    primitive = "semaphore"

    def __init__(
        self,
        key: str,
        *,
        limit: int,
        wait: float = 0,
        lease: float = 60,
        owner: str | None = None,
        store: Store | None = None,
    ) -> None:
        where = f"Semaphore({key!r})"
        self.key = opt.check_key("Semaphore(...)", key)
        self.limit = opt.check_positive_int(where, "limit", limit)
        self.wait = opt.check_non_negative(where, "wait", wait)
        self.lease = opt.check_positive(where, "lease", lease)
        self.owner = owner
        self._store = store
        self._lease_ms = max(1, int(self.lease * 1000))
        self._local = threading.local()

    def acquire(self, *, wait: float | None = None) -> SemaphoreHold:
        """Take a slot, waiting up to ``wait`` seconds (default: the semaphore's ``wait``).

        Raises:
            SemaphoreAcquisitionError: every slot stayed taken for the whole wait.
            StoreUnavailableError: the store cannot be reached.
        """
        refuse_on_loop(f"{self!r}.acquire()", "`async with` or `await ....aacquire()`")
        owner = owner_or_new(self.owner)
        wait = self.wait if wait is None else opt.check_non_negative(repr(self), "wait", wait)
        store, key, limit, lease_ms = self.store, self.key, self.limit, self._lease_ms
        by = running_held_by()  # the execution and step a scope takes it for, if any
        if wait <= 0:
            reply = store.semaphore_acquire(key, owner, limit, lease_ms, by=by)
            taken: LockReply | None = reply if reply.held else None
        else:  # one call when a slot is free; a full semaphore queues us in that same call

            def attempt(waiter: WaitTicket) -> LockReply:
                return store.semaphore_acquire(key, owner, limit, lease_ms, waiter=waiter, by=by)

            taken = wait_to_take(
                store, "semaphore", key, attempt, owner=owner, ttl_ms=lease_ms, wait=wait,
                give_back=lambda _: store.semaphore_release(key, owner),
                # a slot it holds now (it held none when it queued): renewing it says so
                handed_anyway=lambda: int(store.semaphore_extend(key, owner, lease_ms)),
                by=by,
            )  # fmt: skip
        if taken is None:
            waited = f"after waiting {wait:g} s" if wait > 0 else "(wait=0: did not wait)"
            raise SemaphoreAcquisitionError(
                f"semaphore {self.key!r} has all {self.limit} slot(s) taken {waited}; retry "
                "later, or raise wait= or limit=",
                primitive="semaphore",
                key=self.key,
                limit=self.limit,
            )
        hold = SemaphoreHold(self, store, owner, taken.count)
        keep_alive(hold, max(self.lease / 3, 0.01))  # every hold: they may end in any order
        return hold

    def adopt(self, owner: str, count: int) -> SemaphoreHold | None:
        """Take over the slot ``owner`` still has (one round trip), e.g. after a park or in
        another process; None if its lease lapsed meanwhile.

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        store = self.store
        if not store.semaphore_extend(self.key, owner, self._lease_ms):
            return None
        hold = SemaphoreHold(self, store, owner, int(count))
        keep_alive(hold, max(self.lease / 3, 0.01))
        return hold

    def state(self) -> SemaphoreState:
        """How many owners hold a live slot, and how many wait (one read-only round trip)."""
        info = self.store.semaphore_state(self.key)
        return SemaphoreState(held=info.held, waiters=info.waiters)

    def __repr__(self) -> str:
        return f"Semaphore({self.key!r}, limit={self.limit}, wait={self.wait:g})"


class SemaphoreHold(Hold):
    """One owner's slot in a :class:`Semaphore`; release it once (extra releases are ignored)."""

    __slots__ = ()

    def __init__(self, semaphore: Semaphore, store: Store, owner: str, count: int) -> None:
        super().__init__(store, semaphore.key, owner, count, ttl_ms=semaphore._lease_ms)

    def _give_back(self) -> int:
        return self.store.semaphore_release(self.key, self.owner)

    def _renew(self) -> bool:
        return self.store.semaphore_extend(self.key, self.owner, self._ttl_ms)
