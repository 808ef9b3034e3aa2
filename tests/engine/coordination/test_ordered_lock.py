"""The ordered lock declared on a reactor: strict and lenient, waiting for a turn."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import redis

from py_reactor import FailureResult, HaltedResult, SuccessResult
from tests._wait import until
from tests.engine.coordination._helpers import ordered_issued, ordered_reactors, ran


def test_a_strict_ordered_lock_halts_later_positions_after_a_failure(
    key: str, raw: redis.Redis
) -> None:
    """Position 2 fails, so position 3 halts with reason "ordered_lock" without running its step."""
    from py_reactor.coordination.ordered_lock import OrderedLock

    reactor = ordered_reactors()["strict"]
    sequence = OrderedLock(key, ttl=60, poison_pill_timeout=600, strict=True, wait=None)
    gate = sequence.take_position()  # the test holds position 1, so the runs queue behind it
    with ThreadPoolExecutor(2) as pool:
        failing = pool.submit(reactor.run, key=key, mode="fail")
        until(lambda: ordered_issued(raw, key) == 2, "ordered_issued(raw, key) == 2")
        later = pool.submit(reactor.run, key=key, mode="ok")
        until(lambda: ordered_issued(raw, key) == 3, "ordered_issued(raw, key) == 3")
        assert ran == []
        turn = sequence.wait_turn(gate)
        assert not turn.short_circuit
        turn.release(failed=False)
        failed = failing.result(timeout=10)
        halted = later.result(timeout=10)
    assert isinstance(failed, FailureResult), failed
    assert isinstance(halted, HaltedResult), halted
    assert halted.reason == "ordered_lock"
    assert ran == [key]


def test_a_lenient_ordered_lock_lets_later_positions_run_after_a_failure(
    key: str, raw: redis.Redis
) -> None:
    """With strict=False, the position after a failed one still runs its step."""
    from py_reactor.coordination.ordered_lock import OrderedLock

    reactor = ordered_reactors()["lenient"]
    sequence = OrderedLock(key, ttl=60, poison_pill_timeout=600, strict=False, wait=None)
    gate = sequence.take_position()
    with ThreadPoolExecutor(2) as pool:
        failing = pool.submit(reactor.run, key=key, mode="fail")
        until(lambda: ordered_issued(raw, key) == 2, "ordered_issued(raw, key) == 2")
        later = pool.submit(reactor.run, key=key, mode="ok")
        until(lambda: ordered_issued(raw, key) == 3, "ordered_issued(raw, key) == 3")
        sequence.wait_turn(gate).release(failed=False)
        failed = failing.result(timeout=10)
        succeeded = later.result(timeout=10)
    assert isinstance(failed, FailureResult)
    assert isinstance(succeeded, SuccessResult), succeeded
    assert ran == [key, key]


def test_a_failed_position_does_not_poison_the_next_batch(key: str) -> None:
    """Once the sequence drains after a strict failure, a new run of the same key runs normally."""
    reactor = ordered_reactors()["strict"]
    assert isinstance(reactor.run(key=key, mode="fail"), FailureResult)
    after = reactor.run(key=key)
    assert isinstance(after, SuccessResult), after
    assert ran == [key, key]


def test_an_ordered_turn_that_never_comes_fails_the_run_and_frees_its_place(key: str) -> None:
    """A run whose turn does not come within ``wait`` fails; its place does not block later runs."""
    from py_reactor.coordination.ordered_lock import OrderedLock
    from py_reactor.errors import OrderedLockWaitError

    reactor = ordered_reactors()["impatient"]
    sequence = OrderedLock(key, ttl=60, poison_pill_timeout=600, strict=True)
    gate = sequence.take_position()
    started = time.monotonic()
    outcome = reactor.run(key=key)
    elapsed = time.monotonic() - started
    assert isinstance(outcome, FailureResult), outcome
    error = outcome.error
    assert isinstance(error, OrderedLockWaitError)
    assert error.key == key
    assert error.reactor == reactor.__py_reactor_name__
    assert key in str(error)
    assert reactor.__name__ in str(error)
    assert 0.25 <= elapsed < 5
    assert ran == []
    sequence.wait_turn(gate).release(failed=False)
    started = time.monotonic()
    after = reactor.run(key=key)  # would wait out the poison pill if the failed place blocked
    assert isinstance(after, SuccessResult), after
    assert time.monotonic() - started < 5
    assert ran == [key]
