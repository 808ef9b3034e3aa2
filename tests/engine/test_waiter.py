"""What a Wait means where the run is: the caller blocks, a worker parks (engine.waiter).

The engine never asks whether it runs in a worker; these are the decisions it leaves to the
run's waiter, checked one by one. The behaviour they make (a run that parks and is woken, a
retry that waits in the parked set) is proved end to end in tests/runtime and tests/transport.
"""

from __future__ import annotations

import pytest

from py_reactor import configure
from py_reactor.coordination.gates import Busy
from py_reactor.engine import waiter
from py_reactor.engine.answers import STORE, WaitKind
from py_reactor.engine.context import Context
from py_reactor.engine.run import Run
from py_reactor.engine.waiter import BLOCKING, Parking
from py_reactor.errors import (
    CoordinationKeyError,
    LockAcquisitionError,
    OrderedLockWaitError,
    RateLimitExceededError,
    StoreUnavailableError,
)


@pytest.fixture(autouse=True)
def _timer() -> None:
    configure(park_delay=5.0, park_jitter=0.0)


def _run(waits: waiter.Waiter) -> Run:
    return Run("Checkout", Context(reactor="shop:Checkout", inputs={}), (), waiter=waits)


def _busy() -> Busy:
    return Busy(
        LockAcquisitionError(
            "busy", primitive="lock", key="order:7", reactor="Checkout", step="charge"
        )
    )


def test_blocking_waits_what_was_declared_and_fails_on_contention() -> None:
    run = _run(BLOCKING)
    assert not BLOCKING.parks
    assert BLOCKING.gate_wait(2.5) == 2.5
    assert BLOCKING.gate_wait(None) is None
    assert BLOCKING.busy(run, "charge", _busy()) is None
    assert BLOCKING.outage(run, "charge") is None
    assert BLOCKING.nested("payment") is BLOCKING
    assert run.context.trace == []


def test_blocking_sleeps_a_retry_backoff_here(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(waiter, "_sleep", slept.append)
    assert BLOCKING.backoff(_run(BLOCKING), "charge", 1, 0.25) is None
    assert slept == [0.25]


def test_parking_never_waits_on_a_key_and_parks_on_it_instead() -> None:
    parking = Parking(park_max_attempts=3)
    run = _run(parking)
    assert parking.parks
    assert parking.gate_wait(30) == 0
    parked = parking.busy(run, "charge", _busy())
    assert parked is not None
    assert (parked.step, parked.primitive, parked.key, parked.attempt) == (
        "charge",
        "lock",
        "order:7",
        1,
    )
    assert parked.kind is WaitKind.KEY
    assert parked.delay == 5.0  # the park timer: a release wakes it sooner
    assert run.context.step_parks == {"charge": 1}
    assert [(e["type"], e["step"], e["key"]) for e in run.context.trace] == [
        ("parked", "charge", "order:7")
    ]


def test_the_park_cap_counts_per_step_and_resets_when_the_step_gets_in() -> None:
    parking = Parking(park_max_attempts=2)
    run = _run(parking)
    assert parking.busy(run, "charge", _busy()) is not None
    assert parking.busy(run, "charge", _busy()) is not None
    assert parking.busy(run, "ship", _busy()) is not None  # another step: its own count
    spent = _busy()
    assert parking.busy(run, "charge", spent) is None  # the cap: fail the step
    assert spent.error.parks == 2
    assert "still busy after 2 park(s)" in str(spent.error)
    assert "'order:7'" in str(spent.error)
    parking.entered(run, "charge")
    assert run.context.step_parks == {"ship": 1}
    assert parking.busy(run, "charge", _busy()) is not None


def test_an_ordered_turn_parks_uncounted_and_a_rate_limit_for_its_retry_after() -> None:
    parking = Parking(park_max_attempts=1)
    run = _run(parking)
    for _ in range(3):
        turn = OrderedLockWaitError("not yet", turn="4:2", primitive="ordered_lock", key="acct")
        parked = parking.busy(run, "book", Busy(turn))
        assert parked is not None
        assert parked.turn == "4:2"
    assert run.context.step_parks == {}
    limited = RateLimitExceededError("full", primitive="rate_limit", key="api", retry_after=12.5)
    parked = parking.busy(run, "call", Busy(limited))
    assert parked is not None
    assert parked.delay == 12.5


def test_a_store_outage_suspends_a_worker_run_and_a_bad_key_fails_it() -> None:
    parking = Parking(park_max_attempts=1)
    run = _run(parking)
    down = StoreUnavailableError("down", primitive="lock", key="order:7")
    parked = parking.refused(run, "charge", down)
    assert parked is not None
    assert parked.primitive == STORE
    assert parked.key is None
    assert parked.kind is WaitKind.STORE
    assert run.context.step_parks == {}  # never counted toward the cap
    bad = CoordinationKeyError("no key", primitive="lock", key=None)
    assert parking.refused(run, "charge", bad) is None
    assert BLOCKING.refused(run, "charge", down) is None  # the caller fails the step


def test_a_worker_parks_a_retry_backoff_and_keeps_its_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(waiter, "_sleep", pytest.fail)
    parking = Parking(park_max_attempts=1)
    run = _run(parking)
    parked = parking.backoff(run, "charge", 2, 4.0)
    assert parked is not None
    assert parked.delay == 4.0
    assert parked.kind is WaitKind.UNTIL
    assert run.context.attempts == {"charge": 2}
    assert parking.backoff(run, "charge", 3, 0) is None  # no delay: go on at once


def test_nested_and_branch_waiters_name_parks_from_the_root() -> None:
    root = Context(reactor="shop:Checkout", inputs={})
    saved: list[Context] = []
    parking = Parking(park_max_attempts=3, checkpoint=saved.append, root=root)
    child = parking.nested("payment").nested("items[2]")
    assert isinstance(child, Parking)
    assert child.path("charge") == "payment.items[2].charge"
    assert child.path(None) == "payment.items[2]"
    copy = Context(reactor="shop:Checkout", inputs={})
    branch = parking.branch(copy)
    assert isinstance(branch, Parking)
    assert branch.checkpoint is None  # the scheduler checkpoints after merging the branch
    assert branch.root is copy
    run = _run(child)
    child.busy(run, "charge", _busy())
    assert root.step_parks == {"payment.items[2].charge": 1}
