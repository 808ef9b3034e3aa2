"""The order primitives are taken in, and their release whatever the outcome."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from py_reactor import (
    FailureResult,
    HaltedResult,
    Lock,
    Reactor,
    Semaphore,
    Step,
    SuccessResult,
    step,
    with_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.errors import (
    LockAcquisitionError,
    RateLimitExceededError,
    SemaphoreAcquisitionError,
)
from py_reactor.observability import events as ev
from py_reactor.storage import keys
from tests._holds import ordered_position, ordered_positions
from tests._wait import until
from tests.engine.coordination._helpers import (
    BEHAVIOUR,
    FourPrimitives,
    Guarded,
    Probe,
    by_key,
    fresh_window,
    lock_is_free,
    ordered_issued,
    ordered_reactors,
    ran,
    recorder,
    semaphore_is_free,
)


@with_lock(by_key, wait=10)
@with_period(by_key, every="day")
class LockedDaily(Reactor):
    key: str
    probe = step(Probe)


@with_lock(by_key)
@with_rate_limit(by_key, limit=1, period="minute")
class LockedRated(Reactor):
    key: str
    probe = step(Probe)


@with_semaphore(by_key, limit=1)
@with_rate_limit(by_key, limit=1, period="minute")
class SemaphoreRated(Reactor):
    key: str
    probe = step(Probe)


@with_period(by_key, every="day")
@with_rate_limit(by_key, limit=1, period="minute")
class DailyRated(Reactor):
    key: str
    probe = step(Probe)


# -- order of acquisition ----------------------------------------------------------------------


def test_lock_is_taken_before_the_semaphore_and_released_after_it(key: str) -> None:
    """Middleware sees lock, semaphore, the step, then the semaphore and the lock released."""
    rec = recorder()
    outcome = Guarded.run(key=key)
    assert outcome.is_success, outcome
    names = rec.names("lock.", "semaphore.", "step.")
    assert names == [
        "lock.acquired",
        "semaphore.acquired",
        "step.started",
        "step.completed",
        "semaphore.released",
        "lock.released",
    ]
    for event in rec.of(ev.LockAcquired) + rec.of(ev.SemaphoreAcquired):
        assert event.key == key
        assert event.step is None
        assert event.execution_id == outcome.execution_id


def test_every_primitive_is_held_by_the_run_while_its_step_runs(key: str, raw: redis.Redis) -> None:
    """Inside the step the run holds the lock, a slot, the period claim and one rate-limit call."""
    from py_reactor.coordination.period import Period
    from py_reactor.coordination.rate_limit import RateLimit

    fresh_window(raw)
    seen: dict[str, Any] = {}

    def look(probe: Step) -> str:
        lock = Lock(key).state()
        seen["lock"] = (lock.owner, lock.count)
        seen["semaphore"] = Semaphore(key, limit=1).state().held
        seen["claim"] = len(raw.keys(f"{keys.period(key).claim}:*"))
        seen["period_done"] = Period(key, every="day").is_done()
        seen["rate"] = RateLimit(key, limit=5, period="minute").usage()
        seen["root"] = probe.context.root_id
        seen["held_keys"] = list(probe.context.held_keys)
        return "looked"

    BEHAVIOUR[key] = look
    outcome = FourPrimitives.run(key=key)
    assert outcome.is_success, outcome
    assert seen["lock"] == (outcome.context.root_id, 1)
    assert seen["root"] == outcome.execution_id
    assert seen["semaphore"] == 1
    assert seen["claim"] == 1
    assert seen["period_done"] is False
    assert seen["rate"] == {60: 1}
    held = [k for k in seen["held_keys"] if k.startswith(("lock:", "semaphore:"))]
    assert held == [f"lock:{key}", f"semaphore:{key}"]
    # Afterwards: everything released, the period marked, the call still counted.
    assert lock_is_free(key)
    assert semaphore_is_free(key)
    assert raw.keys(f"{keys.period(key).claim}:*") == []
    assert Period(key, every="day").is_done() is True
    assert RateLimit(key, limit=5, period="minute").usage() == {60: 1}
    assert outcome.context.held_keys == []


def test_a_busy_lock_does_not_spend_the_rate_limit(key: str, raw: redis.Redis) -> None:
    """The rate limit is taken after the lock: a run refused by the lock is not counted."""
    fresh_window(raw)
    hold = Lock(key).acquire()
    try:
        refused = LockedRated.run(key=key)
    finally:
        hold.release()
    assert isinstance(refused.error, LockAcquisitionError)
    admitted = LockedRated.run(key=key)
    assert admitted.is_success, admitted
    assert ran == [key]


def test_a_full_semaphore_does_not_spend_the_rate_limit(key: str, raw: redis.Redis) -> None:
    """The rate limit is taken after the semaphore: a run refused a slot is not counted."""
    fresh_window(raw)
    hold = Semaphore(key, limit=1).acquire()
    try:
        refused = SemaphoreRated.run(key=key)
    finally:
        hold.release()
    assert isinstance(refused.error, SemaphoreAcquisitionError)
    admitted = SemaphoreRated.run(key=key)
    assert admitted.is_success, admitted
    assert ran == [key]


def test_a_done_period_does_not_spend_the_rate_limit(key: str, raw: redis.Redis) -> None:
    """A run that halts on its period is not charged to the rate limit (limit=1 per minute)."""
    fresh_window(raw)
    first = DailyRated.run(key=key)
    assert first.is_success, first
    second = DailyRated.run(key=key)
    assert isinstance(second, HaltedResult), second
    assert second.reason == "period"
    assert ran == [key]


def test_a_done_period_halts_before_the_lock_is_even_tried(key: str) -> None:
    """The period's fast check comes before the lock: a busy lock does not matter once done."""
    assert LockedDaily.run(key=key).is_success
    rec = recorder()
    hold = Lock(key).acquire()
    try:
        outcome = LockedDaily.run(key=key)
    finally:
        hold.release()
    assert isinstance(outcome, HaltedResult), outcome
    assert outcome.reason == "period"
    assert rec.names("lock.") == []
    assert ran == [key]


def test_the_period_is_checked_again_under_the_lock(key: str) -> None:
    """A run that waited for the lock halts if the period was done while it waited."""
    from py_reactor.coordination.period import Period

    hold = Lock(key).acquire()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(LockedDaily.run, key=key)
        until(lambda: Lock(key).state().waiters == 1, "Lock(key).state().waiters == 1")
        claim = Period(key, every="day").claim()
        assert claim.due
        claim.release(mark=True)
        hold.release()
        outcome = future.result(timeout=10)
    assert isinstance(outcome, HaltedResult), outcome
    assert outcome.reason == "period"
    assert ran == []
    assert lock_is_free(key)


def test_the_ordered_lock_gate_comes_before_the_lock(key: str, raw: redis.Redis) -> None:
    """While a run waits for its ordered turn it holds nothing; it takes the lock once it passes."""
    from py_reactor.coordination.ordered_lock import OrderedLock

    reactor = ordered_reactors()["locked"]
    seen: list[Any] = []
    BEHAVIOUR[key] = lambda probe: seen.append(
        (Lock(key).state().owner, ordered_position(probe.context))
    )
    sequence = OrderedLock(key, ttl=60, poison_pill_timeout=600, strict=True, wait=None)
    first = sequence.take_position()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(reactor.run, key=key)
        until(lambda: ordered_issued(raw, key) == 2, "ordered_issued(raw, key) == 2")
        assert Lock(key).state().owner is None
        assert ran == []
        turn = sequence.wait_turn(first)
        assert not turn.short_circuit
        turn.release(failed=False)
        outcome = future.result(timeout=10)
    assert outcome.is_success, outcome
    assert len(seen) == 1
    owner, position = seen[0]
    assert owner == outcome.context.root_id
    assert position["number"] == 2
    assert position["key"] == key
    assert ordered_positions(outcome.context) == []
    assert lock_is_free(key)


# -- release in every outcome ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("ok", SuccessResult),
        ("fail", FailureResult),
        ("raise", FailureResult),
        ("halt", HaltedResult),
    ],
)
def test_holds_are_released_in_reverse_whatever_the_outcome(
    mode: str, expected: type, key: str
) -> None:
    """After success, Failure, a raised exception or Halt, the lock and the slot are free again."""
    rec = recorder()
    outcome = Guarded.run(key=key, mode=mode)
    assert isinstance(outcome, expected), outcome
    assert ran == [key]
    assert rec.names("lock.", "semaphore.")[-2:] == ["semaphore.released", "lock.released"]
    assert lock_is_free(key)
    assert semaphore_is_free(key)
    assert outcome.context.held_keys == []


def test_holds_are_released_when_a_step_raises_keyboard_interrupt(key: str) -> None:
    """Even an interrupt that aborts the run (and propagates) releases the lock and the slot."""
    with pytest.raises(KeyboardInterrupt):
        Guarded.run(key=key, mode="interrupt")
    assert lock_is_free(key)
    assert semaphore_is_free(key)


def test_a_refused_rate_limit_releases_the_lock_and_slot_taken_before_it(
    key: str, raw: redis.Redis
) -> None:
    """A run refused by its rate limit (taken last) gives back the lock and the slot it took."""
    fresh_window(raw)
    assert FourPrimitives.run(key=key, mode="fail").error is not None
    for _ in range(4):
        # failed runs leave the period due, and each is charged to the rate limit (5/min)
        assert FourPrimitives.run(key=key, mode="fail").error is not None
    rec = recorder()
    refused = FourPrimitives.run(key=key)
    assert isinstance(refused.error, RateLimitExceededError), refused
    assert rec.names("lock.", "semaphore.") == [
        "lock.acquired",
        "semaphore.acquired",
        "semaphore.released",
        "lock.released",
    ]
    assert len(ran) == 5
    assert lock_is_free(key)
    assert semaphore_is_free(key)
