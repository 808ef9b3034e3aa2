"""The wait side of lock-like primitives: enqueue once, sleep on a personal list, get woken.

An acquire that may wait carries a ``WaitTicket`` from its first call: a free key is simply
taken (nothing is queued), a busy one adds the ticket to the key's FIFO queue in the same
atomic call, so contention costs no extra round trip. A release hands the key straight to the
oldest live waiter and pushes to that waiter's wake list; the waiter's ``wait_for_handoff``
returns and it already holds the key: handoff costs the release round trip plus one reply,
with no polling. The sleep is capped by the holder's remaining lease, so a holder that died
(and never releases) is noticed when its lease runs out.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from py_reactor.coordination.owner import HeldBy, new_owner
from py_reactor.coordination.store import LockReply, Store, WaitTicket

__all__ = ["new_ticket", "new_waiter", "sleep_for", "wait_to_take"]

#: Longest single sleep between checks while waiting (seconds): a safety net, not a poll.
MAX_SLEEP = 2.0

#: Shortest sleep worth a blocking wait (seconds). Redis 6.2 reads a BLPOP timeout under about
#: 1 ms as 0, which means "block forever", so a wait with less left than this retries at once.
MIN_SLEEP = 0.01

#: One queued acquire attempt with the waiter's ticket.
Attempt = Callable[[WaitTicket], LockReply]


def new_waiter() -> str:
    """A unique waiter id (no ``|``: queue members are ``<waiter>|<owner>|...``)."""
    return new_owner()


def new_ticket(
    primitive: str, key: str, owner: str, ttl_ms: int, wait: float, by: HeldBy | None = None
) -> WaitTicket:
    """A fresh ticket for a waiter on ``key`` that stays queued ``wait`` seconds (for ``by``)."""
    wait_ms = max(1, int(wait * 1000))
    return WaitTicket(primitive, key, new_waiter(), owner, ttl_ms, wait_ms, by=by)


def sleep_for(remaining: float, busy_for_ms: int) -> float:
    """How long to block: until the wait ends, the holder's lease lapses, or ``MAX_SLEEP``."""
    lapse = busy_for_ms / 1000 + 0.005 if busy_for_ms > 0 else MAX_SLEEP
    return max(MIN_SLEEP, min(remaining, lapse, MAX_SLEEP))


def wait_to_take(
    store: Store,
    primitive: str,
    key: str,
    attempt: Attempt,
    *,
    owner: str,
    ttl_ms: int,
    wait: float,
    give_back: Callable[[int], object],
    handed_anyway: Callable[[], int],
    by: HeldBy | None = None,
) -> LockReply | None:
    """Take ``key``, waiting up to ``wait`` seconds (> 0) to be handed it if it is busy.

    ``attempt(ticket)`` is one acquire call carrying the ticket: the first takes a free key or
    queues the ticket; a later one (``ticket.queued``) first takes a hold handed to it
    meanwhile. Returns the held reply, or None when ``wait`` ran out.

    If the wait is interrupted (Ctrl-C, a cancelled task, a store error), the waiter leaves the
    queue; a key it was handed meanwhile is given straight back with ``give_back(token)``, so it
    is not stranded until its ttl with an owner who no longer wants it. The hand-off's wake may
    have been popped by the very BLPOP the interruption abandoned (the reply is lost with its
    connection): then the queue and the wake list are empty, and ``handed_anyway()`` (the
    token of a hold ``owner`` has now, which it did not have when it queued, else 0) finds it.
    """
    deadline = time.monotonic() + wait
    ticket = new_ticket(primitive, key, owner, ttl_ms, wait, by)
    try:
        return _wait(store, attempt, ticket, deadline)
    except BaseException:
        with contextlib.suppress(Exception):
            handed = store.wait_cancel(ticket) or handed_anyway()
            if handed:
                give_back(handed)
        raise


def _wait(store: Store, attempt: Attempt, ticket: WaitTicket, deadline: float) -> LockReply | None:
    """``wait_to_take`` once the ticket exists: try, sleep on the wake list, give up in time."""
    while True:
        reply = attempt(ticket)
        if reply.held:
            return reply
        if not ticket.queued:  # from now on a release may have handed us the key
            ticket = ticket._replace(queued=True)
        remaining = deadline - time.monotonic()
        if remaining < MIN_SLEEP:  # too little left to sleep on: give up (or take a handoff)
            handed = store.wait_cancel(ticket)
            return LockReply(True, 1, handed) if handed else None
        token = store.wait_for_handoff(ticket, sleep_for(remaining, reply.busy_ms))
        if token is not None:
            return LockReply(True, 1, token)
        # Woken by the timeout: the holder's lease may have lapsed (it died). Try again.
