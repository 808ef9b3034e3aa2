"""Assertions about the live state of a coordination key in the store.

Each reads the key with the primitive's read-only state call (one round trip, nothing
changed) on the configured store, or on ``store=``, and says what it found when it fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from py_reactor.config.options import window_seconds
from py_reactor.coordination.lock import LockState
from py_reactor.coordination.ordered_lock import OrderedLockState
from py_reactor.coordination.semaphore import Semaphore
from py_reactor.coordination.store import default_store
from py_reactor.engine.results import Outcome
from py_reactor.runtime.execution import Execution
from py_reactor.storage.inspect import Inspector
from py_reactor.testing._describe import MISSING

if TYPE_CHECKING:
    from py_reactor.coordination.store import Store

__all__ = [
    "SemaphoreSnapshot",
    "assert_locked",
    "assert_ordered_lock",
    "assert_period_marked",
    "assert_rate_limit_count",
    "assert_semaphore",
    "assert_unlocked",
]


def _store(store: Store | None) -> Store:
    if store is not None:
        return store

    return default_store()


def _lock_state(key: str, store: Store | None) -> LockState:
    info = _store(store).lock_state(key)
    return LockState(
        owner=info.owner,
        count=info.count,
        fencing_token=info.token,
        ttl=info.pttl_ms / 1000 if info.pttl_ms > 0 else None,
        waiters=info.waiters,
    )


def _describe_lock(state: LockState) -> str:
    if state.owner is None:
        waiting = f" ({state.waiters} waiting)" if state.waiters else ""
        return f"it is free{waiting}"
    ttl = "no ttl" if state.ttl is None else f"ttl {state.ttl:.1f} s"
    return (
        f"it is held by {state.owner!r} (count {state.count}, fencing token "
        f"{state.fencing_token}, {ttl}, {state.waiters} waiting)"
    )


def owner_of(by: object) -> str:
    """The owner id ``by`` stands for: a str, a hold (``hold.owner``), an outcome or an
    execution (its root execution id, which owns every hold taken in it)."""

    if isinstance(by, str):
        return by
    owner = getattr(by, "owner", None)
    if isinstance(owner, str):  # a LockHold, a SemaphoreHold, a hold_lock hold
        return owner
    if isinstance(by, Outcome):
        return by.context.root_id
    if isinstance(by, Execution):
        return by.execution_id
    raise TypeError(
        "by= takes an owner id (str), a lock hold, an outcome or an Execution, "
        f"got {type(by).__qualname__}"
    )


def assert_locked(key: str, by: object = MISSING, *, store: Store | None = None) -> LockState:
    """Assert lock ``key`` is held now, by ``by`` if given (an owner id, a hold, or the
    outcome / execution whose run holds it).

    Returns:
        The lock's state (owner, count, fencing token, ttl, waiters).
    """
    __tracebackhide__ = True
    state = _lock_state(key, store)
    if state.owner is None:
        who = "" if by is MISSING else f" by {owner_of(by)!r}"
        raise AssertionError(f"expected lock {key!r} to be held{who}, but {_describe_lock(state)}")
    if by is not MISSING and state.owner != owner_of(by):
        raise AssertionError(
            f"expected lock {key!r} to be held by {owner_of(by)!r}, but {_describe_lock(state)}"
        )
    return state


def assert_unlocked(key: str, *, store: Store | None = None) -> LockState:
    """Assert nobody holds lock ``key`` now.

    Returns:
        The lock's state.
    """
    __tracebackhide__ = True
    state = _lock_state(key, store)
    if state.owner is not None:
        raise AssertionError(f"expected lock {key!r} to be free, but {_describe_lock(state)}")
    return state


@dataclass(frozen=True, slots=True)
class SemaphoreSnapshot:
    """A semaphore as :func:`assert_semaphore` found it: live holders, queued waiters, and the
    free slots when the limit is known (else None)."""

    held: int
    waiters: int
    available: int | None


def assert_semaphore(
    key: str | Semaphore,
    *,
    available: int = MISSING,
    held: int = MISSING,
    limit: int = MISSING,
    waiters: int = MISSING,
    store: Store | None = None,
) -> SemaphoreSnapshot:
    """Assert semaphore ``key`` has ``held`` live holders, ``available`` free slots (out of
    ``limit``, or the ``Semaphore``'s own when one is passed as ``key``) and ``waiters``
    queued, for each of them given.

    Raises:
        TypeError: ``available`` is asked for without a limit to count it against.
        AssertionError: a count differs (the message gives them all).
    """
    __tracebackhide__ = True
    if isinstance(key, Semaphore):
        if limit is MISSING:
            limit = key.limit
        store = store or key.store
        key = key.key
    if available is not MISSING and limit is MISSING:
        raise TypeError(
            f"assert_semaphore({key!r}, available=...) needs the semaphore's limit: pass "
            "limit=, or the Semaphore itself as the key (the store does not keep the limit)"
        )
    info = _store(store).semaphore_state(key)
    free = None if limit is MISSING else int(limit) - info.held
    found = SemaphoreSnapshot(held=info.held, waiters=info.waiters, available=free)
    wrong = [
        f"{name}={expected!r}"
        for name, expected, actual in (
            ("held", held, info.held),
            ("available", available, free),
            ("waiters", waiters, info.waiters),
        )
        if expected is not MISSING and expected != actual
    ]
    if wrong:
        of = "" if limit is MISSING else f" of {limit}"
        seen = f"held {info.held}{of}, waiters {info.waiters}"
        if free is not None:
            seen += f", available {free}"
        raise AssertionError(
            f"expected semaphore {key!r} to have {', '.join(wrong)}, but found {seen}"
        )
    return found


def assert_rate_limit_count(
    key: str, period: str | int, count: int, *, store: Store | None = None
) -> int:
    """Assert rate limit ``key`` has admitted ``count`` calls in the current ``period``
    window (``"second"``, ``"minute"``, ``"hour"``, ``"day"``, ``"week"`` or seconds).

    Windows are fixed on the server's clock: a window that rolls over during the test starts
    again at 0, so assert on a window longer than the test.

    Returns:
        The count found.
    """
    __tracebackhide__ = True

    seconds = window_seconds("assert_rate_limit_count", "period", period)
    (used,) = _store(store).rate_limit_usage(key, [seconds])
    if used != count:
        raise AssertionError(
            f"expected rate limit {key!r} to have admitted {count} call(s) in the current "
            f"{_window(period)} window, but it admitted {used}"
        )
    return int(used)


def _window(period: str | int) -> str:
    return period if isinstance(period, str) else f"{period}-second"


def assert_period_marked(
    key: str, every: str | int = MISSING, *, bucket: str = MISSING, store: Store | None = None
) -> None:
    """Assert period ``key`` is marked done: in the current bucket of ``every``
    (``"minute"`` ... ``"year"`` or seconds), or in ``bucket`` (a bucket id such as
    ``"2024-05-01"``), or, with neither, in any bucket.
    """
    __tracebackhide__ = True
    chosen = _store(store)
    if every is not MISSING and bucket is not MISSING:
        raise TypeError("assert_period_marked takes every= or bucket=, not both")
    if every is not MISSING:
        if chosen.period_check(key, every):
            return
        raise AssertionError(
            f"expected period {key!r} to be marked done in the current {_window(every)} "
            f"bucket, but it is not; {_marked(chosen, key)}"
        )
    inspector = _inspector(chosen)
    if bucket is not MISSING:
        if inspector.period_marked(key, bucket):
            return
        raise AssertionError(
            f"expected period {key!r} to be marked done in bucket {bucket!r}, but it is not; "
            f"{_marked(chosen, key)}"
        )
    if not inspector.period_buckets(key):
        raise AssertionError(f"expected period {key!r} to be marked done, but no bucket is")


def _inspector(store: Store) -> Inspector:
    try:
        return Inspector(store)
    except TypeError:
        raise TypeError(f"{store!r} has no Redis client to read period markers from") from None


def _buckets(store: Store, key: str) -> list[str]:
    try:
        inspector = Inspector(store)
    except TypeError:  # a store of another kind: no markers to list
        return []
    return inspector.period_buckets(key)


def _marked(store: Store, key: str) -> str:
    buckets = _buckets(store, key)
    return f"marked bucket(s): {', '.join(buckets)}" if buckets else "no bucket is marked"


def assert_ordered_lock(
    key: str,
    *,
    next: int = MISSING,
    last_completed: int = MISSING,
    in_flight: int = MISSING,
    drained: bool = MISSING,
    epoch: int = MISSING,
    failed: bool = MISSING,
    store: Store | None = None,
) -> OrderedLockState:
    """Assert ordered lock ``key``'s counters: ``next`` (the number the next position gets),
    ``last_completed``, ``in_flight`` (taken, not yet released), ``drained`` (nothing in
    flight), ``epoch`` and ``failed`` (a strict failure in this epoch), for each given.

    Returns:
        The lock's state.
    """
    __tracebackhide__ = True
    info = _store(store).ordered_lock_state(key)
    state = OrderedLockState(
        epoch=info.epoch,
        next_position=info.issued + 1,
        last_completed=info.done,
        in_flight=info.issued - info.done,
        failed=info.failed,
    )
    actual = {
        "next": state.next_position,
        "last_completed": state.last_completed,
        "in_flight": state.in_flight,
        "drained": state.drained,
        "epoch": state.epoch,
        "failed": state.failed,
    }
    asked = {
        "next": next,
        "last_completed": last_completed,
        "in_flight": in_flight,
        "drained": drained,
        "epoch": epoch,
        "failed": failed,
    }
    wrong = [f"{n}={v!r}" for n, v in asked.items() if v is not MISSING and actual[n] != v]
    if wrong:
        seen = ", ".join(f"{n}={v!r}" for n, v in actual.items())
        raise AssertionError(
            f"expected ordered lock {key!r} to have {', '.join(wrong)}, but found {seen}"
        )
    return state
