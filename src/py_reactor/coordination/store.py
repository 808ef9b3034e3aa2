"""The typed protocol every primitive talks to, its replies, and how the current store is found.

A primitive never speaks Redis: it calls one method per operation (``lock_acquire``,
``semaphore_release``, ``period_claim``, ...) with its own key and gets a typed reply back.
Only ``py_reactor.storage`` knows key names, Lua scripts and raw replies; there each method is
exactly one script call, one round trip. The waits (``wait_for_handoff``,
``ordered_lock_wait``) are the blocking calls: a waiter sleeps on a list of its own that a
release pushes to, which is how a holder hands its key to the next waiter without polling.

Any object with these methods can be passed as a primitive's ``store=``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from py_reactor.coordination.owner import HeldBy

__all__ = [
    "ORDERED_ABANDONED",
    "ORDERED_DRAINED",
    "ORDERED_PASSED",
    "ORDERED_UNCHANGED",
    "LockInfo",
    "LockReply",
    "OrderedLockInfo",
    "PeriodReply",
    "RateLimitReply",
    "SemaphoreInfo",
    "Store",
    "TurnReply",
    "WaitTicket",
    "default_store",
]


class WaitTicket(NamedTuple):  # a tuple: made on every acquire that may wait, so kept cheap
    """A waiter's place in the queue of one key, as the acquire that queues it describes it.

    Attributes:
        primitive: ``"lock"``, ``"semaphore"`` or ``"period"``: whose queue.
        key: the primitive's key.
        waiter: a unique id of this wait.
        owner: who will hold the key when it is handed over.
        ttl_ms: the hold's ttl (lock) or lease (semaphore, period) once handed over.
        wait_ms: how long the waiter stays queued (server ms from the attempt).
        queued: an earlier attempt queued this ticket already, so a release may have handed
            it the key since; the first queued attempt skips looking.
        by: the execution and step the hold is taken for (written with the hold when it is
            handed over), None outside an execution.
    """

    primitive: str
    key: str
    waiter: str
    owner: str
    ttl_ms: int
    wait_ms: int
    queued: bool = False
    by: HeldBy | None = None


@dataclass(slots=True)  # not frozen: one is made per acquire, and frozen ones cost more
class LockReply:
    """The answer to an acquire of a lock or of a semaphore slot.

    Attributes:
        held: the caller holds it now.
        count: its nesting count when held (> 1: re-entered), else 0.
        token: the lock's fencing token when held; 0 for a semaphore or when not held.
        busy_ms: when not held: ms until the holder's lease lapses (a semaphore: the soonest).
        level: a lock's level the caller took (1: the outermost, as a handed hold is); only
            that level is extended and released by the caller (each lapses on its own).
    """

    held: bool
    count: int
    token: int
    busy_ms: int = 0
    level: int = 1


@dataclass(frozen=True, slots=True)
class LockInfo:
    """A lock's state: owner (None when free), nesting count, token, ms left, waiters, and the
    execution and step the hold was taken for (None: not named, e.g. taken outside one)."""

    owner: str | None
    count: int
    token: int
    pttl_ms: int  # <= 0 when not held
    waiters: int
    by: HeldBy | None = None


@dataclass(frozen=True, slots=True)
class SemaphoreInfo:
    """A semaphore's live holders and queued waiters."""

    held: int
    waiters: int


@dataclass(frozen=True, slots=True)
class PeriodReply:
    """The answer to a period check or claim of the current bucket.

    Attributes:
        outcome: ``"done"`` (marked done, nothing held), ``"due"`` (the caller holds the
            claim) or ``"busy"`` (another owner holds it; a ticket given was queued).
        bucket: the bucket id (when due: the one recorded when the claim was first taken).
        expire_at: when the bucket's marker expires (unix seconds).
        count: the claim's nesting count when due.
        busy_ms: when busy: the other claim's remaining lease in ms.
    """

    outcome: Literal["done", "due", "busy"]
    bucket: str
    expire_at: int
    count: int = 0
    busy_ms: int = 0


@dataclass(frozen=True, slots=True)
class RateLimitReply:
    """The answer to a rate-limit acquire: admitted (counted in every window), or not (counted
    in none) with the ms until every full window has rolled over and which windows are full."""

    admitted: bool
    retry_after_ms: int = 0
    full: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnReply:
    """The answer to "is it this ordered position's turn?".

    Attributes:
        outcome: ``"turn"`` (go), ``"wait"`` (an earlier position is current) or ``"never"``
            (the position was skipped, or its epoch ended).
        failed: with ``"turn"``: an earlier position of the epoch released as failed.
        blocker: with ``"wait"``: the current position; with ``"never"``: the last completed.
        stale_in_ms: with ``"wait"``: ms until the blocker turns stale unless it heartbeats.
    """

    outcome: Literal["turn", "wait", "never"]
    failed: bool = False
    blocker: int = 0
    stale_in_ms: int = 0


@dataclass(frozen=True, slots=True)
class OrderedLockInfo:
    """An ordered lock's counters: epoch (0: unused), positions issued and done, failed."""

    epoch: int
    issued: int
    done: int
    failed: bool


#: ``ordered_lock_release`` replies: nothing changed (an ended epoch, already released or
#: skipped); the turn passed on; it passed on and the sequence drained (a new epoch began);
#: abandoned before its turn.
ORDERED_UNCHANGED, ORDERED_PASSED, ORDERED_DRAINED, ORDERED_ABANDONED = 0, 1, 2, 3


@runtime_checkable
class Store(Protocol):
    """Where coordination state lives (Redis, a private server or the embedded default).

    Every method is one atomic round trip, except the waits, which block up to ``timeout``
    seconds. Every method may raise ``StoreUnavailableError`` when the store cannot be reached.
    Counts, ttls and leases are in milliseconds; keys are the primitives' own keys.
    """

    #: A human description for error messages, e.g. ``redis://host:6379/0`` or the socket path.
    description: str

    # -- lock ------------------------------------------------------------------------------

    def lock_acquire(
        self,
        key: str,
        owner: str,
        ttl_ms: int,
        *,
        waiter: WaitTicket | None = None,
        by: HeldBy | None = None,
    ) -> LockReply:
        """Take lock ``key`` for ``owner`` (re-entrant); if it is busy and ``waiter`` is
        given, queue that ticket for it in the same call. A fresh hold records ``by``."""
        ...

    def lock_release(self, key: str, owner: str, token: int, level: int) -> int:
        """Release the caller's ``level`` (no other); with no live level left, hand the lock to
        the oldest live waiter (else wake the oldest parked execution). Returns the live levels
        left, 0 when freed, -1 when that level was not held (it lapsed)."""
        ...

    def lock_extend(self, key: str, owner: str, ttl_ms: int, token: int, level: int) -> bool:
        """Push the expiry of the caller's ``level`` out to ``ttl_ms``; False when that level is
        no longer held (a lapsed level stays lapsed)."""
        ...

    def lock_state(self, key: str) -> LockInfo:
        """The lock's state (read only); its count is the live levels."""
        ...

    # -- semaphore -------------------------------------------------------------------------

    def semaphore_acquire(
        self,
        key: str,
        owner: str,
        limit: int,
        lease_ms: int,
        *,
        waiter: WaitTicket | None = None,
        by: HeldBy | None = None,
    ) -> LockReply:
        """Take one of ``limit`` slots for ``owner`` (re-entrant); if all are taken and
        ``waiter`` is given, queue that ticket in the same call. A fresh slot records ``by``."""
        ...

    def semaphore_release(self, key: str, owner: str) -> int:
        """Release one level of ``owner``'s slot; at zero hand it on. As ``lock_release``."""
        ...

    def semaphore_extend(self, key: str, owner: str, lease_ms: int) -> bool:
        """Renew ``owner``'s lease; False when it holds no slot."""
        ...

    def semaphore_state(self, key: str) -> SemaphoreInfo:
        """Live holders and queued waiters (read only)."""
        ...

    # -- waiting for a lock, a slot or a period claim --------------------------------------

    def wait_for_handoff(self, ticket: WaitTicket, timeout: float) -> int | None:
        """Block until a release hands ``ticket`` the key (lock: its fencing token; semaphore
        and period: 1), or None after ``timeout`` seconds."""
        ...

    def wait_cancel(self, ticket: WaitTicket) -> int:
        """Leave the lock or semaphore queue; 0, or the token handed meanwhile (1 for a slot),
        which the caller then holds."""
        ...

    # -- period ----------------------------------------------------------------------------

    def period_check(self, key: str, every: str | int) -> bool:
        """Whether the current bucket of ``every`` is marked done (read only)."""
        ...

    def period_claim(
        self,
        key: str,
        every: str | int,
        owner: str,
        lease_ms: int,
        *,
        waiter: WaitTicket | None = None,
    ) -> PeriodReply:
        """Claim the current bucket for ``owner``; if busy, queue ``waiter`` (for
        ``waiter.wait_ms``) to be woken by the release."""
        ...

    def period_release(
        self, key: str, bucket: str, owner: str, *, mark: bool, expire_at: int
    ) -> int:
        """Drop one level of the claim on ``bucket``, marking it done if ``mark`` (the marker
        expires at ``expire_at``); wakes every waiter and every execution parked on the period.
        The count left, or -1 if it lapsed."""
        ...

    def period_extend(self, key: str, bucket: str, owner: str, lease_ms: int) -> bool:
        """Push the claim's lease out; False when ``owner`` no longer holds it."""
        ...

    # -- rate limit ------------------------------------------------------------------------

    def rate_limit_acquire(self, key: str, windows: tuple[tuple[int, int], ...]) -> RateLimitReply:
        """Count one call in every ``(window seconds, limit)``, or in none if one is full."""
        ...

    def rate_limit_usage(self, key: str, windows: Sequence[int]) -> tuple[int, ...]:
        """Calls admitted so far in each current window (read only)."""
        ...

    # -- ordered lock ----------------------------------------------------------------------

    def ordered_lock_take(self, key: str, ttl_ms: int) -> tuple[int, int]:
        """The next position: ``(epoch, number)``, with a first heartbeat."""
        ...

    def ordered_lock_turn(
        self, key: str, epoch: int, number: int, poison_ms: int, ttl_ms: int
    ) -> TurnReply:
        """Whether it is this position's turn, skipping dead blockers on the way."""
        ...

    def ordered_lock_release(
        self, key: str, epoch: int, number: int, *, failed: bool, poison_ms: int, ttl_ms: int
    ) -> int:
        """Finish or abandon the position; one of the ``ORDERED_*`` replies."""
        ...

    def ordered_lock_heartbeat(self, key: str, epoch: int, number: int, ttl_ms: int) -> bool:
        """Refresh the position's heartbeat; False once it is no longer pending."""
        ...

    def ordered_lock_state(self, key: str) -> OrderedLockInfo:
        """The lock's counters (read only)."""
        ...

    def ordered_lock_wait(self, key: str, epoch: int, number: int, timeout: float) -> bool:
        """Block until the position is woken (its turn may have come), or False after
        ``timeout`` seconds."""
        ...


def default_store() -> Store:
    """The store configured with ``configure(redis_url=...)``, else the embedded server.

    The storage package is imported here, on first use, so that ``import py_reactor`` never
    imports ``redis``.
    """
    from py_reactor.storage import current_store

    return current_store()
