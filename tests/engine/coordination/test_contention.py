"""Contention on a lock or a semaphore, its events, and an unreachable store."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from py_reactor import (
    FailureResult,
    Lock,
    Reactor,
    Semaphore,
    configure,
    step,
    with_lock,
    with_semaphore,
)
from py_reactor.errors import LockAcquisitionError, SemaphoreAcquisitionError, StoreUnavailableError
from py_reactor.observability import events as ev
from py_reactor.storage import current_store
from tests._redis import PrivateRedis, free_port
from tests._wait import until
from tests.coordination._helpers import client_commands, sha
from tests.engine.coordination._helpers import (
    Daily,
    Guarded,
    Locked,
    LockedWait,
    Probe,
    RateLimited,
    by_key,
    ran,
    recorder,
)


@with_lock(by_key, wait=10)
class LockedLongWait(Reactor):
    key: str
    probe = step(Probe)


@with_semaphore(by_key, limit=1, wait=0.3)
class SemaphoreWait(Reactor):
    key: str
    probe = step(Probe)


# -- contention --------------------------------------------------------------------------------


def test_a_busy_lock_fails_the_run_after_waiting(key: str) -> None:
    """With the key held elsewhere it waits ``wait`` then fails with a typed, located error."""
    rec = recorder()
    hold = Lock(key).acquire()
    try:
        started = time.monotonic()
        outcome = LockedWait.run(key=key)
        elapsed = time.monotonic() - started
    finally:
        hold.release()
    assert isinstance(outcome, FailureResult)
    error = outcome.error
    assert isinstance(error, LockAcquisitionError)
    assert error.reactor == "LockedWait"
    assert error.key == key
    assert error.primitive == "lock"
    assert "LockedWait" in str(error)
    assert key in str(error)
    assert outcome.step_name is None
    assert outcome.retryable is False
    assert ran == []
    assert 0.25 <= elapsed < 5
    failed = rec.of(ev.LockAcquisitionFailed)
    assert len(failed) == 1
    assert failed[0].key == key
    assert failed[0].error is error
    assert rec.of(ev.LockAcquired) == []
    assert rec.of(ev.LockReleased) == []


def test_a_lock_freed_during_the_wait_is_handed_to_the_run(
    key: str, private_redis: PrivateRedis
) -> None:
    """A run waiting for a busy lock is handed it by the holder's release, and runs: it sends
    one acquire (which queues it) and one BLPOP, and never tries the key again."""
    hold = Lock(key).acquire()
    outcomes: list[object] = []

    def wait_and_get_handed() -> None:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(LockedLongWait.run, key=key)
            until(lambda: Lock(key).state().waiters == 1, "the run queued on the lock")
            time.sleep(0.05)  # its BLPOP is sent
            hold.release()
            outcomes.append(future.result(timeout=10))

    sent, _ = client_commands(private_redis.url, current_store(), key, wait_and_get_handed)
    acquires = [c for c in sent if c.split()[:2] == ["EVALSHA", sha("lock_acquire")]]
    blocks = [c for c in sent if c.startswith("BLPOP")]
    assert (len(acquires), len(blocks)) == (1, 1), sent
    (outcome,) = outcomes
    assert outcome.is_success, outcome
    assert ran == [key]


def test_a_full_semaphore_fails_the_run_after_waiting(key: str) -> None:
    """With the only slot taken elsewhere the run waits, then fails: SemaphoreAcquisitionError."""
    rec = recorder()
    hold = Semaphore(key, limit=1).acquire()
    try:
        started = time.monotonic()
        outcome = SemaphoreWait.run(key=key)
        elapsed = time.monotonic() - started
    finally:
        hold.release()
    assert isinstance(outcome, FailureResult)
    error = outcome.error
    assert isinstance(error, SemaphoreAcquisitionError)
    assert error.reactor == "SemaphoreWait"
    assert error.key == key
    assert "SemaphoreWait" in str(error)
    assert key in str(error)
    assert ran == []
    assert 0.25 <= elapsed < 5
    failed = rec.of(ev.SemaphoreAcquisitionFailed)
    assert [e.key for e in failed] == [key]


# -- unreachable store -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reactor",
    [Locked, SemaphoreWait, RateLimited, Daily, Guarded],
    ids=lambda r: r.__name__,
)
def test_an_unreachable_store_fails_the_run_and_nothing_runs(reactor: type[Reactor]) -> None:
    """With Redis unreachable the run fails with StoreUnavailableError and its step never runs."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    configure(redis_url=url)
    outcome = reactor.run(key="unreachable")
    assert isinstance(outcome, FailureResult), outcome
    error = outcome.error
    assert isinstance(error, StoreUnavailableError)
    assert url in str(error)
    assert error.reactor == reactor.__name__
    assert ran == []
