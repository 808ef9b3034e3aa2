"""A release that comes between a step's busy answer and the write of its park wakes the run.

The release of a key wakes the executions in its parked list; one whose park is written only
after that release was not in the list yet. The park's write therefore looks at the key: if it
is free by then, the run is due at once. These tests release the key at exactly that moment
(from a middleware hook on ``StepParked``, which the engine calls before the park is written),
with a 30 s park timer: a run that completes within seconds was woken, not timed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from py_reactor import Lock, Middleware, OrderedLock, Period, Semaphore, configure, find
from py_reactor.coordination.period import PeriodClaim
from py_reactor.observability import events as ev
from tests.runtime import _reactors as r

PARK_DELAY = 30.0
WOKEN_WITHIN = 10.0  # far inside the park timer


class ReleaseOnPark(Middleware):
    """Releases ``hold`` when the run parks: after its busy answer, before its park is stored."""

    def __init__(self, hold: Any) -> None:
        self.hold = hold
        self.parks = 0

    def on_step_parked(self, event: ev.StepParked) -> None:
        self.parks += 1
        if self.hold is not None:
            hold, self.hold = self.hold, None
            hold.release()


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=PARK_DELAY, park_jitter=0.0)
    yield
    r.HOOKS.clear()


def test_a_lock_released_before_the_park_is_written_wakes_the_run(key: str) -> None:
    watcher = ReleaseOnPark(Lock(key, owner="test-holder", ttl=30).acquire())
    configure(middleware=[watcher])
    started = time.monotonic()
    done = r.LockedStep.run(key=key).wait(timeout=PARK_DELAY + 10)
    assert done.status == "completed", done
    assert watcher.parks == 1  # it did park, and the release came before the park was stored
    assert time.monotonic() - started < WOKEN_WITHIN


def test_a_semaphore_released_before_the_park_is_written_wakes_the_run(key: str) -> None:
    watcher = ReleaseOnPark(Semaphore(key, limit=1, owner="test-holder").acquire())
    configure(middleware=[watcher])
    started = time.monotonic()
    done = r.Mailer.run(key=key).wait(timeout=PARK_DELAY + 10)
    assert done.status == "completed", done
    assert watcher.parks == 1
    assert time.monotonic() - started < WOKEN_WITHIN


class _ClaimEnd:
    """A period claim as ``ReleaseOnPark`` releases it: its work succeeded (bucket marked)."""

    def __init__(self, claim: PeriodClaim) -> None:
        self.claim = claim

    def release(self) -> None:
        self.claim.release(mark=True)


def test_a_period_claim_ended_before_the_park_is_written_wakes_the_run(key: str) -> None:
    claim = Period(f"nightly:{key}", every="day").claim(owner="test-holder")
    assert claim.due
    watcher = ReleaseOnPark(_ClaimEnd(claim))
    configure(middleware=[watcher])
    started = time.monotonic()
    try:
        done = r.Nightly.run(key=key).wait(timeout=PARK_DELAY + 10)
    finally:
        claim.release(mark=False)  # a no-op once the watcher ended it
    assert done.status == "completed", done
    assert watcher.parks == 1
    assert time.monotonic() - started < WOKEN_WITHIN
    trace = find(done.execution_id).trace  # type: ignore[union-attr]
    assert [e["type"] for e in trace] == ["parked", "skipped"]  # the bucket was done


class _TurnEnd:
    """An ordered position's turn as ``ReleaseOnPark`` releases it: its work done."""

    def __init__(self, turn: Any) -> None:
        self.turn = turn

    def release(self) -> None:
        self.turn.release(failed=False)


def test_an_ordered_turn_passed_on_before_the_park_is_written_wakes_the_run(key: str) -> None:
    """The run takes the position after the test's and parks out of turn; the test's turn ends
    between that answer and the park's write, so nobody is in the parked list to be woken: the
    write itself sees the turn has come."""
    lock = OrderedLock(f"seq:{key}")
    turn = lock.wait_turn(lock.take_position())  # position 1: in progress
    watcher = ReleaseOnPark(_TurnEnd(turn))
    configure(middleware=[watcher])
    started = time.monotonic()
    done = r.OrderedStep.run(key=key).wait(timeout=PARK_DELAY + 10)
    assert done.status == "completed", done
    assert watcher.parks == 1
    assert time.monotonic() - started < WOKEN_WITHIN
