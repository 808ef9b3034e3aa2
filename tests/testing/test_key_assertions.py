"""The assertion helpers about a key's live state: lock, semaphore, rate limit, period and
ordered lock, each read from the real store, passing when it matches and failing with what
was found."""

from __future__ import annotations

import re
import threading

import pytest

from py_reactor import Lock, OrderedLock, Period, Semaphore
from py_reactor.storage import RedisStore
from py_reactor.testing import (
    LockHolder,
    ReactorWorker,
    assert_locked,
    assert_ordered_lock,
    assert_period_marked,
    assert_rate_limit_count,
    assert_semaphore,
    assert_succeeded,
    assert_unlocked,
)
from tests.testing import _reactors as r

pytestmark = pytest.mark.usefixtures("reactor_store")


# -- assert_locked / assert_unlocked -----------------------------------------------------------


def test_locked_passes_by_owner_id_or_hold(hold_lock: LockHolder, key: str) -> None:
    """A held lock passes with its owner given as a str or as the hold; the state is returned."""
    with hold_lock(key, ttl=20) as hold:
        state = assert_locked(key, by=hold.owner)
        assert_locked(key, by=hold)
        assert_locked(key)
        assert state.count == 1
        assert state.ttl is not None
        assert 0 < state.ttl <= 20
    assert_unlocked(key)


def test_locked_passes_by_the_run_that_holds_it(reactor_worker: ReactorWorker, key: str) -> None:
    """While a background run's step holds the lock, the run (its outcome) is the owner."""
    r.GATES[key], r.ENTERED[key] = threading.Event(), threading.Event()
    try:
        out = r.HoldingLock.run(key=key)
        assert r.ENTERED[key].wait(10)
        assert_locked(key, by=out)
        with pytest.raises(AssertionError, match=r"to be free, but it is held by"):
            assert_unlocked(key)
        r.GATES[key].set()
        reactor_worker.drain(timeout=10)
    finally:
        r.GATES.pop(key).set()
        r.ENTERED.pop(key)
    assert_succeeded(out)
    assert_unlocked(key)


def test_locked_fails_on_a_free_lock_or_another_owner(hold_lock: LockHolder, key: str) -> None:
    """A free lock, or one held by someone else: the message gives owner, count and token."""
    with pytest.raises(AssertionError, match=rf"expected lock '{key}' to be held, but it is free"):
        assert_locked(key)
    with pytest.raises(AssertionError, match=r"to be held by 'me', but it is free"):
        assert_locked(key, by="me")
    with (
        hold_lock(key) as hold,
        pytest.raises(
            AssertionError,
            match=rf"to be held by 'me', but it is held by '{re.escape(hold.owner)}' \(count 1, "
            rf"fencing token {hold.fencing_token}, ttl \d+\.\d s, 0 waiting\)",
        ),
    ):
        assert_locked(key, by="me")
    with pytest.raises(TypeError, match=r"by= takes an owner id"):
        assert_locked(key, by=12)


# -- assert_semaphore --------------------------------------------------------------------------


def test_semaphore_counts_holders_and_free_slots(key: str) -> None:
    """With one slot of three taken: held 1, available 2, given the limit or the Semaphore."""
    mailer = Semaphore(key, limit=3)
    assert_semaphore(mailer, held=0, available=3)
    with mailer:
        found = assert_semaphore(mailer, held=1, available=2, waiters=0)
        assert found.available == 2
        assert_semaphore(key, held=1, limit=3, available=2)
    assert_semaphore(key, held=0)


def test_semaphore_reads_a_slot_a_running_step_holds(key: str) -> None:
    """While a run's step is inside the semaphore, one of its two slots is taken."""
    r.GATES[key], r.ENTERED[key] = threading.Event(), threading.Event()
    results = []
    runner = threading.Thread(target=lambda: results.append(r.Mailer.run(key=key)))
    runner.start()
    try:
        assert r.ENTERED[key].wait(10)
        assert_semaphore(key, held=1, limit=2, available=1)
    finally:
        r.GATES.pop(key).set()
        runner.join(10)
        r.ENTERED.pop(key)
    assert_succeeded(results[0], value="mailed")
    assert_semaphore(key, held=0, limit=2, available=2)


def test_semaphore_fails_with_every_count_found(key: str) -> None:
    """A wrong count: the message says what was asked and every count found."""
    mailer = Semaphore(key, limit=3)
    with mailer:
        with pytest.raises(
            AssertionError,
            match=rf"expected semaphore '{key}' to have held=2, available=1, but found held 1 "
            r"of 3, waiters 0, available 2",
        ):
            assert_semaphore(mailer, held=2, available=1)
        with pytest.raises(AssertionError, match=r"to have waiters=1, but found held 1, waiters 0"):
            assert_semaphore(key, waiters=1)
    with pytest.raises(TypeError, match=r"needs the semaphore's limit"):
        assert_semaphore(key, available=1)


# -- assert_rate_limit_count -------------------------------------------------------------------


def test_rate_limit_count_counts_admitted_calls(key: str) -> None:
    """Each run's step is one call in the current hour window (by name or in seconds)."""
    limit = f"api:{key}"
    assert_rate_limit_count(limit, "hour", 0)
    r.Report.run(key=key)
    assert assert_rate_limit_count(limit, "hour", 1) == 1
    r.Report.run(key=key)
    assert_rate_limit_count(limit, 3600, 2)


def test_rate_limit_count_fails_with_the_count_found(key: str) -> None:
    """Another count: the message gives the count admitted in that window."""
    r.Report.run(key=key)
    with pytest.raises(
        AssertionError,
        match=rf"expected rate limit 'api:{key}' to have admitted 5 call\(s\) in the current "
        r"hour window, but it admitted 1",
    ):
        assert_rate_limit_count(f"api:{key}", "hour", 5)


# -- assert_period_marked ----------------------------------------------------------------------


def test_period_marked_after_the_work_succeeded(key: str) -> None:
    """After the step ran, the day bucket is marked: current bucket, by id, or any."""
    period = f"report:{key}"
    assert_succeeded(r.Report.run(key=key))
    assert_period_marked(period, "day")
    claim = Period(period, every="day").claim()  # done: not due, only tells the bucket id
    assert claim.due is False
    assert_period_marked(period, bucket=claim.bucket)
    assert_period_marked(period)


def test_period_marked_fails_listing_the_marked_buckets(key: str) -> None:
    """Unmarked: the message lists the buckets that are marked (or says none is)."""
    period = f"report:{key}"
    with pytest.raises(
        AssertionError,
        match=rf"'{period}' to be marked done in the current day bucket, but it is not; no "
        "bucket is marked",
    ):
        assert_period_marked(period, "day")
    with pytest.raises(AssertionError, match=r"to be marked done, but no bucket is"):
        assert_period_marked(period)
    r.Report.run(key=key)
    bucket = Period(period, every="day").claim().bucket
    with pytest.raises(
        AssertionError,
        match=rf"current hour bucket, but it is not; marked bucket\(s\): {bucket}",
    ):
        assert_period_marked(period, "hour")
    with pytest.raises(AssertionError, match=r"in bucket '1999-01-01', but it is not"):
        assert_period_marked(period, bucket="1999-01-01")
    with pytest.raises(TypeError, match=r"not both"):
        assert_period_marked(period, "day", bucket=bucket)


# -- assert_ordered_lock -----------------------------------------------------------------------


def test_ordered_lock_counters_through_a_batch(key: str) -> None:
    """Two positions: in flight, then one completed, then drained (a new epoch begins)."""
    ordered = OrderedLock(key)
    assert_ordered_lock(key, next=1, in_flight=0, drained=True, epoch=0)
    first, second = ordered.take_position(), ordered.take_position()
    state = assert_ordered_lock(key, next=3, last_completed=0, in_flight=2, drained=False)
    ordered.wait_turn(first).release(failed=False)
    assert_ordered_lock(key, next=3, last_completed=1, in_flight=1, epoch=state.epoch)
    ordered.wait_turn(second).release(failed=False)
    after = assert_ordered_lock(key, next=1, last_completed=0, drained=True, failed=False)
    assert after.epoch > state.epoch


def test_ordered_lock_drained_after_runs_of_a_reactor(key: str) -> None:
    """Runs of a step under the ordered lock leave it drained."""
    assert_succeeded(r.Ledger.run(key=key))
    assert_succeeded(r.Ledger.run(key=key))
    assert_ordered_lock(key, drained=True, in_flight=0)


def test_ordered_lock_fails_with_every_counter_found(key: str) -> None:
    """Wrong counters: the message gives what was asked and every counter found."""
    ordered = OrderedLock(key)
    position = ordered.take_position()
    with pytest.raises(
        AssertionError,
        match=rf"expected ordered lock '{key}' to have next=5, drained=True, but found next=2, "
        r"last_completed=0, in_flight=1, drained=False, epoch=\d+, failed=False",
    ):
        assert_ordered_lock(key, next=5, drained=True)
    ordered.abandon(position)


def test_key_helpers_read_the_store_they_are_given(redis_url: str, key: str) -> None:
    """``store=`` reads that store: a lock held on another server is held there, and free on
    the configured one."""
    other = RedisStore.from_url(redis_url)
    with Lock(key, store=other):
        assert_locked(key, store=other)
        assert_unlocked(key)
        with pytest.raises(AssertionError, match=r"to be free, but it is held by"):
            assert_unlocked(key, store=other)
