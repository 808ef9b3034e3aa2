"""Async units on the thread worker: dispatch and read, readers waiting and parking, failures
read and unread, undo with the parent's rollback, coordination taken where the unit runs (own
owner, contention parks the unit), the hand-off deadlock guard, and a nested invoke inside a
unit.

Real store (the session's private redis-server), real threads; waits are on stored statuses
and events, never on timing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from py_reactor import Lock, Middleware, Reactor, async_reactor, async_step, configure, find, step
from py_reactor.errors import (
    AsyncUnitTimeoutError,
    CoordinationKeyError,
    DefinitionError,
    HandoffRefusedError,
)
from py_reactor.observability import events as ev
from py_reactor.storage import current_store
from py_reactor.storage.executions import ExecutionStore
from tests._overlap import OverlapRecorder
from tests._wait import status, until
from tests.engine.coordination._helpers import fresh_window
from tests.runtime import _async_reactors as r


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0)
    yield
    r.HOOKS.clear()


def calls(key: str, *, block: dict[str, threading.Event] | None = None) -> list[str]:
    """Record every hook call of ``key``'s test; a name in ``block`` waits for its event."""
    seen: list[str] = []
    gates = block or {}

    def action(name: str, **values: Any) -> Any:
        seen.append(name)
        gate = gates.get(name)
        if gate is not None and not gate.wait(20):
            raise AssertionError(f"{name} was never released")
        return None

    r.HOOKS[key] = action
    return seen


def units_of(outcome: Any) -> dict[str, str]:
    """The execution id of each unit an outcome's run dispatched, by step name."""
    return {e["step"]: e["execution_id"] for e in outcome.trace if e["type"] == "dispatched"}


def stored_ids() -> set[str]:
    return set(ExecutionStore(current_store()).ids(limit=100_000))


# -- dispatch and read -------------------------------------------------------------------------


def test_the_unit_runs_apart_and_the_parent_goes_on_until_it_reads(key: str) -> None:
    """The unit is its own execution, in a worker thread; the parent's next step runs while
    the unit is still inside its body; the reader gets the unit's value."""
    release = threading.Event()
    seen = calls(key, block={"work": release})
    threads: list[str] = []
    r.HOOKS[key] = _also(r.HOOKS[key], lambda name, **_: threads.append(
        threading.current_thread().name))  # fmt: skip
    done: list[Any] = []
    runner = threading.Thread(target=lambda: done.append(r.Fan.run(key=key, n=4)))
    runner.start()
    until(lambda: "meanwhile" in seen and "work" in seen, "the parent went on past the unit")
    assert "read" not in seen  # the reader waits for the unit
    release.set()
    runner.join(20)
    (outcome,) = done
    assert outcome.is_success, outcome
    assert outcome.value == 41
    unit = units_of(outcome)["work"]
    assert unit != outcome.execution_id
    found = find(unit)
    assert found is not None
    assert found.status == "completed"
    assert found.results == {"work": 40}
    worker_thread = threads[seen.index("work")]
    assert worker_thread != runner.name  # the unit ran on a worker thread, not the caller's


def _also(first: Callable[..., Any], second: Callable[..., Any]) -> Callable[..., Any]:
    def both(name: str, **values: Any) -> Any:
        second(name, **values)
        return first(name, **values)

    return both


def test_inline_units_and_async_reactors_give_their_values(key: str) -> None:
    outcome = r.Forms.run(key=key, n=5)
    assert outcome.is_success, outcome
    assert outcome.value == [10, 6]
    units = units_of(outcome)
    assert set(units) == {"inline", "kid"}
    kid = find(units["kid"])
    assert kid is not None
    assert kid.reactor == "tests.runtime._async_reactors:Child"


def test_a_reactor_may_return_a_units_value(key: str) -> None:
    outcome = r.ReturnsUnit.run(key=key, n=2)
    assert outcome.is_success
    assert outcome.value == 20


def test_dispatch_is_an_event(key: str) -> None:
    seen: list[ev.UnitDispatched] = []

    class Listen(Middleware):
        def on_unit_dispatched(self, event: ev.UnitDispatched) -> None:
            seen.append(event)

    configure(middleware=[Listen()])
    outcome = r.ReturnsUnit.run(key=key, n=1)
    assert outcome.is_success
    (event,) = seen
    assert event.step == "work"
    assert event.unit_execution_id == units_of(outcome)["work"]


def test_a_reader_in_the_caller_gives_up_after_async_wait_timeout(key: str) -> None:
    release = threading.Event()
    seen = calls(key, block={"work": release})
    configure(async_wait_timeout=0.3)
    try:
        outcome = r.Fan.run(key=key, n=1)
    finally:
        release.set()
    assert outcome.status == "failed"
    assert isinstance(outcome.error, AsyncUnitTimeoutError)
    unit = units_of(outcome)["work"]
    assert outcome.error.unit == "work"
    assert outcome.error.execution_id == unit
    text = str(outcome.error)
    assert "'read'" in text
    assert "'work'" in text
    assert unit in text
    assert "async_wait_timeout" in text
    assert outcome.step_name == "read"
    until(lambda: status(unit) == "completed", "the unit went on and ended")
    assert "read" not in seen


def test_a_reader_in_a_worker_parks_and_the_units_end_wakes_it(key: str) -> None:
    """In a worker the reader parks (status waiting, on the unit's execution); the unit's end
    wakes it at once (park_delay is 30 s: only the wake explains the resume)."""
    release = threading.Event()
    calls(key, block={"work": release})
    out = r.BgFan.run(key=key, n=3)
    until(lambda: status(out.execution_id) == "waiting", "the reader parked")
    found = find(out.execution_id)
    assert found is not None
    assert found.waiting_on is not None
    unit = units_of(found)["work"]
    assert found.waiting_on["primitive"] == "async_unit"
    assert found.waiting_on["key"] == unit
    assert found.waiting_on["step"] == "read"
    assert found.parks == 0  # waiting for a unit is not contention
    released_at = time.monotonic()
    release.set()
    done = out.wait(timeout=20)
    assert done.is_success, done
    assert done.value == 31
    assert time.monotonic() - released_at < 10
    parked = [e for e in done.trace if e["type"] == "parked"]
    assert [(e["step"], e["primitive"]) for e in parked] == [("read", "async_unit")]


def test_a_worker_returning_a_units_value_parks_for_it_too(key: str) -> None:
    release = threading.Event()
    calls(key, block={"work": release})
    out = r.BgReturnsUnit.run(key=key, n=6)
    until(lambda: status(out.execution_id) == "waiting", "the run parked on its returns")
    release.set()
    done = out.wait(timeout=20)
    assert done.is_success
    assert done.value == 60


def test_a_parked_reader_gives_up_after_async_park_timeout(key: str) -> None:
    release = threading.Event()
    calls(key, block={"work": release})
    configure(async_park_timeout=0.5)
    try:
        out = r.BgFan.run(key=key, n=1)
        done = out.wait(timeout=20)
    finally:
        release.set()
    assert done.status == "failed"
    assert isinstance(done.error, AsyncUnitTimeoutError), done.error
    assert "async_park_timeout" in str(done.error)
    assert done.step_name == "read"


# -- failures --------------------------------------------------------------------------------


def test_an_unread_unit_that_fails_never_rolls_the_parent_back(key: str) -> None:
    seen = calls(key)
    outcome = r.Unread.run(key=key)
    assert outcome.is_success
    assert outcome.value == "fine"
    unit = units_of(outcome)["boom"]
    until(lambda: status(unit) == "failed", "the unit failed in its own job")
    assert seen.count("compensate boom") == 1  # it compensated itself, once
    found = find(unit)
    assert found is not None
    assert found.outcome is not None
    assert found.outcome.step_name == "boom"


def test_a_read_unit_that_failed_fails_the_reader_and_rolls_back_earlier_steps(
    key: str,
) -> None:
    seen = calls(key)
    outcome = r.ReadsFailure.run(key=key)
    assert outcome.status == "failed"
    assert outcome.step_name == "boom"
    assert str(outcome.error) == "boom"
    assert outcome.child is not None
    assert outcome.child.step_name == "boom"
    assert seen.count("undo first") == 1
    assert seen.count("compensate boom") == 1  # by itself, in its job; not again by the parent
    assert "read" not in seen


def test_a_failed_child_reactor_names_its_inner_step(key: str) -> None:
    r.HOOKS[key] = lambda name, **_: "fail" if name == "child check" else None
    outcome = r.ReadsChildFailure.run(key=key, n=1)
    assert outcome.status == "failed"
    assert outcome.step_name == "kid"
    assert outcome.child is not None
    assert outcome.child.step_name == "check"
    assert "child check failed" in str(outcome.error)


def test_units_that_were_read_are_undone_with_the_parents_rollback(key: str) -> None:
    seen = calls(key)
    outcome = r.ReadThenFail.run(key=key, n=2)
    assert outcome.status == "failed"
    assert outcome.step_name == "explode"
    assert seen.count("undo work") == 1
    assert seen.count("undo child add") == 1
    # newest first: the child was read (so tracked) after the step unit
    assert seen.index("undo child add") < seen.index("undo work")


# -- coordination where the unit runs ----------------------------------------------------------


def test_the_unit_holds_its_lock_under_an_owner_of_its_own(key: str) -> None:
    release = threading.Event()
    seen = calls(key, block={"locked": release})
    done: list[Any] = []
    runner = threading.Thread(target=lambda: done.append(r.Locking.run(key=key, n=1)))
    runner.start()
    until(lambda: "locked" in seen, "the unit's body started")
    owner = current_store().lock_state(key).owner
    release.set()
    runner.join(20)
    (outcome,) = done
    assert outcome.is_success, outcome
    unit = units_of(outcome)["unit"]
    assert owner == unit  # the unit's own execution id, never the dispatcher's root id
    assert owner != outcome.execution_id
    assert current_store().lock_state(key).owner is None


def test_two_dispatched_units_on_one_key_never_overlap(key: str, redis_url: str) -> None:
    overlap = OverlapRecorder(redis_url, key)

    def body(name: str, **_: Any) -> None:
        if name == "locked":
            with overlap.inside(threading.current_thread().name):
                time.sleep(0.15)

    r.HOOKS[key] = body
    outcomes: list[Any] = []
    runners = [
        threading.Thread(target=lambda n=n: outcomes.append(r.Locking.run(key=key, n=n)))
        for n in range(4)
    ]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(30)
    assert len(outcomes) == 4
    assert all(o.is_success for o in outcomes), outcomes
    assert overlap.entries == 4
    assert overlap.overlaps == 0
    assert overlap.max_concurrency == 1


def test_the_parents_later_step_on_the_key_waits_for_the_unit(key: str) -> None:
    """The unit holds ``key`` under its own owner, so the parent's own later step on ``key``
    does not re-enter it: it waits until the unit released it."""
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def body(name: str, **_: Any) -> None:
        order.append(name)
        if name == "locked":
            started.set()
            release.wait(20)
            order.append("unit left")
        elif name == "gate":
            assert started.wait(20)
            threading.Timer(0.3, release.set).start()

    r.HOOKS[key] = body
    outcome = r.LaterLock.run(key=key, n=1)
    assert outcome.is_success, outcome
    assert order.index("mine") > order.index("unit left")


def test_a_unit_parks_on_contention_and_the_release_wakes_it(key: str) -> None:
    seen = calls(key)
    with Lock(key, ttl=30, wait=0):
        out = r.BgLocking.run(key=key, n=7)
        until(lambda: units_of(find(out.execution_id) or out), "the unit was dispatched")
        unit = units_of(find(out.execution_id) or out)["unit"]
        until(lambda: status(unit) == "waiting", "the unit parked on the lock")
        found = find(unit)
        assert found is not None
        assert found.waiting_on is not None
        assert found.waiting_on["primitive"] == "lock"
        assert found.waiting_on["key"] == key
        assert "locked" not in seen  # nothing of the unit's work ran
        released_at = time.monotonic()
    done = out.wait(timeout=20)
    assert done.is_success, done
    assert done.value == 7
    assert time.monotonic() - released_at < 10  # woken by the release, not the 30 s timer
    assert seen.count("locked") == 1
    unit_record = find(unit)
    assert unit_record is not None
    assert unit_record.parks == 1
    assert "compensate locked" not in seen


def test_a_unit_takes_the_same_park_cap(key: str) -> None:
    configure(park_max_attempts=0)
    with Lock(key, ttl=30, wait=0):
        outcome = r.Locking.run(key=key, n=1)
    assert outcome.status == "failed"
    assert outcome.step_name == "unit"
    assert "park_max_attempts" in str(outcome.error)


def test_a_child_reactor_takes_its_reactor_level_lock_in_its_worker(key: str) -> None:
    owners: list[str | None] = []
    r.HOOKS[key] = lambda name, **_: owners.append(current_store().lock_state(key).owner)
    outcome = r.ReadsLockedChild.run(key=key)
    assert outcome.is_success, outcome
    assert outcome.value == "child done"
    unit = units_of(outcome)["kid"]
    assert owners == [unit]  # held while its step ran, by the child's own execution
    assert current_store().lock_state(key).owner is None


def test_a_units_period_is_claimed_where_it_runs(key: str) -> None:
    """The second unit in the same day skips its work (its value None flows on)."""
    seen = calls(key)
    first = r.DailyUnit.run(key=key)
    second = r.DailyUnit.run(key=key)
    assert first.is_success, first
    assert first.value == "sent"
    assert second.is_success, second
    assert second.value is None
    assert seen == ["daily"]
    unit = find(units_of(second)["daily"])
    assert unit is not None
    assert [e["reason"] for e in unit.trace if e["type"] == "skipped"] == ["period"]


def test_a_units_rate_limit_parks_it_for_retry_after(key: str, raw: redis.Redis) -> None:
    """Two units within one 2 s window: the second parks (rate limit) and runs in the next."""
    seen = calls(key)
    fresh_window(raw, 2, margin=1.5)  # both units start in one window (server clock)
    first = r.LimitedUnit.run(key=key, n=1)
    second = r.LimitedUnit.run(key=key, n=2)
    assert first.is_success, first
    assert second.is_success, second
    assert second.value == 2
    assert seen.count("limited") == 2
    ahead = find(units_of(first)["limited"])
    assert ahead is not None
    assert [e for e in ahead.trace if e["type"] == "parked"] == []
    unit = find(units_of(second)["limited"])
    assert unit is not None
    parks = [e["primitive"] for e in unit.trace if e["type"] == "parked"]
    assert parks == ["rate_limit"]


# -- the hand-off deadlock guard ---------------------------------------------------------------


def _refused(outcome: Any, key: str, before: set[str]) -> HandoffRefusedError:
    assert outcome.status == "failed", outcome
    error = outcome.error
    assert isinstance(error, HandoffRefusedError), error
    assert error.key == key
    assert key in str(error)
    assert not units_of(outcome)  # nothing was dispatched
    assert stored_ids() == before  # nothing was stored, so nothing could be enqueued
    return error


def test_a_unit_wanting_a_reactor_level_lock_is_refused_before_enqueue(key: str) -> None:
    seen = calls(key)
    before = stored_ids()
    outcome = r.GuardedByReactor.run(key=key)
    error = _refused(outcome, key, before)
    text = str(error)
    assert "reactor-level lock" in text
    assert "step(...) instead of async_step(...)" in text
    assert "inside the unit only" in text
    assert error.holder.startswith("the reactor-level lock")
    assert outcome.step_name == "unit"
    assert seen.count("undo first") == 1  # earlier steps rolled back, once
    assert "compensate locked" not in seen
    assert "locked" not in seen
    assert current_store().lock_state(key).owner is None  # and the reactor's lock released


def test_a_unit_wanting_an_enclosing_steps_lock_is_refused(key: str) -> None:
    nested: list[Any] = []
    r.HOOKS[key] = lambda name, **values: (
        nested.append(values["outcome"]) if name == "nested" else None
    )
    before = stored_ids()
    outcome = r.GuardedByStep.run(key=key)
    assert outcome.status == "failed"
    (inner,) = nested
    error = _refused(inner, key, before)
    assert "step 'outer'" in error.holder


def test_a_unit_wanting_a_composed_parents_lock_is_refused(key: str) -> None:
    before = stored_ids()
    outcome = r.GuardedByComposedParent.run(key=key)
    assert outcome.status == "failed"
    assert outcome.step_name == "inner"
    assert outcome.child is not None
    _refused(outcome.child, key, before)
    assert isinstance(outcome.error, HandoffRefusedError)


def test_a_limit_one_semaphore_is_refused_and_a_wider_one_is_not(key: str) -> None:
    before = stored_ids()
    refused = r.GuardedBySemaphore.run(key=key)
    error = _refused(refused, key, before)
    assert error.primitive == "semaphore"
    wider = r.NotGuardedTwoSlots.run(key=f"{key}-wide")
    assert wider.is_success, wider
    assert wider.value == "two"


def test_a_child_reactor_wanting_a_held_lock_is_refused(key: str) -> None:
    before = stored_ids()
    outcome = r.GuardedChildReactor.run(key=key)
    error = _refused(outcome, key, before)
    assert "compose(...) instead of async_reactor(...)" in str(error)
    assert "LockedChild" in str(error)


def test_a_key_function_that_raises_fails_the_dispatch_naming_the_cause(key: str) -> None:
    before = stored_ids()
    outcome = r.GuardedKeyError.run(key=key)
    assert outcome.status == "failed"
    assert outcome.step_name == "broken"
    assert isinstance(outcome.error, CoordinationKeyError)
    assert "no such field: account" in str(outcome.error)
    assert stored_ids() == before


def test_an_inline_unit_without_wiring_is_keyed_from_the_reactor_inputs(key: str) -> None:
    before = stored_ids()
    outcome = r.GuardedInlineUnwired.run(key=key)
    _refused(outcome, key, before)


def test_a_key_not_known_yet_skips_the_guard_and_says_so(
    key: str, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    calls(key, block={"work": release})
    threading.Timer(0.3, release.set).start()
    with caplog.at_level(logging.INFO, logger="py_reactor"):
        outcome = r.Deferred.run(key=key, n=3)
    assert outcome.is_success, outcome
    assert outcome.value == 30
    skipped = [m for m in caplog.messages if "dispatch guard skipped" in m]
    assert len(skipped) == 1
    assert "'second'" in skipped[0]


# -- a nested invoke inside a unit -------------------------------------------------------------


def test_a_nested_invoke_that_contends_inside_a_unit_fails_the_unit(key: str) -> None:
    invoked: list[Any] = []
    r.HOOKS[key] = lambda name, **values: invoked.append(values["outcome"])
    with Lock(key, ttl=30, wait=0):
        outcome = r.NestedInvoke.run(key=key)
    assert outcome.status == "failed"
    assert outcome.step_name == "unit"
    (nested,) = invoked
    assert nested.status == "failed"
    unit = find(units_of(outcome)["unit"])
    assert unit is not None
    assert unit.status == "failed"
    assert unit.parks == 0
    assert not [e for e in unit.trace if e["type"] == "parked"]


# -- definitions ---------------------------------------------------------------------------------


def test_units_of_reactors_defined_in_functions_are_refused() -> None:
    with pytest.raises(DefinitionError, match="inside a function"):

        class Local(Reactor):
            @async_step
            def unit() -> int:
                return 1

    class LocalChild(Reactor):
        @step
        def a() -> int:
            return 1

    with pytest.raises(DefinitionError, match="inside a function"):
        async_reactor(LocalChild)
