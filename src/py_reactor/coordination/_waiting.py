"""The wait side of lock-like primitives: enqueue once, sleep on a personal list, get woken.

A waiter that finds a key busy is added (atomically, by the same acquire script) to the key's
FIFO queue under a unique waiter id. A release hands the key straight to the oldest live
waiter and pushes to ``py_reactor:wake:<waiter id>``; the waiter's BLPOP returns and it already
holds the key: handoff costs the release round trip plus one reply, with no polling. The BLPOP
timeout is capped by the holder's remaining lease, so a holder that died (and never releases)
is noticed when its lease runs out.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from py_reactor.coordination.owner import new_owner
from py_reactor.coordination.store import NAMESPACE, Store

__all__ = ["new_waiter", "sleep_for", "take_or_wait", "wake_key"]

#: Longest single sleep between checks while waiting (seconds): a safety net, not a poll.
MAX_SLEEP = 2.0

#: Shortest sleep worth a BLPOP (seconds). Redis 6.2 reads a timeout under about 1 ms as 0,
#: which means "block forever", so a wait with less left than this retries without sleeping.
MIN_SLEEP = 0.01


def new_waiter() -> str:
    """A unique waiter id (no ``|``: queue members are ``<waiter>|<owner>|...``)."""
    return new_owner()


def wake_key(waiter: str) -> str:
    """The list a release pushes to when it hands a key to ``waiter``."""
    return f"{NAMESPACE}:wake:{waiter}"


def sleep_for(remaining: float, busy_for_ms: int) -> float:
    """How long to block: until the wait ends, the holder's lease lapses, or ``MAX_SLEEP``."""
    lapse = busy_for_ms / 1000 + 0.005 if busy_for_ms > 0 else MAX_SLEEP
    return max(MIN_SLEEP, min(remaining, lapse, MAX_SLEEP))


def take_or_wait(
    store: Store,
    script: str,
    keys: tuple[str, ...],
    args: tuple[str | int, ...],
    *,
    queue: tuple[str, ...],
    owner: str,
    ttl_ms: int,
    wait: float,
    give_back: Callable[[int], object],
) -> tuple[int, int] | None:
    """Run an acquire ``script`` and, while busy, wait to be handed the key.

    The script takes ``args + (queue member, wait_ms, retry flag)`` and replies
    ``{1, count, token}`` when held or ``{0, holder's remaining ms, 0}`` when busy. ``keys`` are
    what an attempt that will not wait needs; a waiting attempt also passes ``queue`` (the queue
    and deadlines keys) and the waiter's wake list as its last key, so a retry that comes after
    a handoff takes the handed hold instead of re-entering it.
    Returns ``(count, token)`` once held, None when ``wait`` ran out.

    If the wait is interrupted (Ctrl-C, a store error), the waiter leaves the queue; a key it
    was handed meanwhile is given straight back with ``give_back(token)``, so it is not
    stranded until its ttl with an owner who no longer wants it.
    """
    # First the smallest call the script accepts: an uncontended acquire is just this, even
    # when the caller would wait. Only a busy key pays for joining the queue.
    held, count, token = store.run_script(script, keys, args)
    if held or wait <= 0:
        return (int(count), int(token)) if held else None
    deadline = time.monotonic() + wait
    waiter = new_waiter()
    member = f"{waiter}|{owner}|{ttl_ms}"
    wake = wake_key(waiter)
    wait_keys = (*keys, *queue, wake)
    try:
        return _wait(store, script, wait_keys, args, queue, member, wake, wait, deadline)
    except BaseException:
        with contextlib.suppress(Exception):
            handed = store.run_script("wait_cancel", (*queue, wake), (member,))
            if handed:
                give_back(int(handed))
        raise


def _wait(
    store: Store,
    script: str,
    wait_keys: tuple[str, ...],
    args: tuple[str | int, ...],
    queue: tuple[str, ...],
    member: str,
    wake: str,
    wait: float,
    deadline: float,
) -> tuple[int, int] | None:
    """The queued part of ``take_or_wait``: retry, sleep on the wake list, give up in time."""
    retry = 0  # the first queued attempt cannot have been handed anything: the script skips that
    while True:
        held, count, token = store.run_script(
            script, wait_keys, (*args, member, max(1, int(wait * 1000)), retry)
        )
        retry = 1
        if held:
            return int(count), int(token)
        busy_for = int(count)
        remaining = deadline - time.monotonic()
        if remaining < MIN_SLEEP:  # too little left to sleep on: give up (or take a handoff)
            handed = store.run_script("wait_cancel", (*queue, wake), (member,))
            return (1, int(handed)) if handed else None
        signal = store.wait_signal(wake, sleep_for(remaining, busy_for))
        if signal is not None:
            return 1, int(signal)
        # Woken by the timeout: the holder's lease may have lapsed (it died). Try again.
