"""``map_step(..., fan_out=True)`` on the thread worker: each element an execution of its own,
at most ``batch_size`` in flight, fail_fast and collect, rollback highest index first, each
element's coordination taken in its own job under its own owner, the hand-off deadlock guard,
and a map in a worker that parks on its window and resumes without dispatching again.

Real store (the session's private redis-server), real worker threads; the tests wait for
events, gates and stored statuses, never on timing. The park timer is 30 s, so a parked run
that resumes within seconds was woken by an element's end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from py_reactor import Lock, MapResult, Middleware, configure, find
from py_reactor.engine.context import Context
from py_reactor.engine.kinds.fan_out import element_id
from py_reactor.errors import HandoffRefusedError
from py_reactor.observability import events as ev
from py_reactor.storage import current_store
from py_reactor.storage.executions import ExecutionStore
from tests._wait import status, until
from tests.runtime import _map_fan_out_reactors as m

WOKEN_WITHIN = 10.0  # a resume this soon after the event can only be a wake (timer: 30 s)


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0)
    yield
    for gates in m.GATES.values():  # never leave an element blocked in a worker thread
        for opened in gates.values():
            opened.set()
    m.GATES.clear()
    m.LOG.clear()
    m.SPIES.clear()


class Dispatches(Middleware):
    """Every ``UnitDispatched`` event: one per element dispatched, in order."""

    def __init__(self) -> None:
        self.events: list[ev.UnitDispatched] = []
        self.failed: list[str | None] = []  # the step of every StepFailed

    def on_unit_dispatched(self, event: ev.UnitDispatched) -> None:
        self.events.append(event)

    def on_step_failed(self, event: ev.StepFailed) -> None:
        self.failed.append(event.step)

    def ids(self) -> list[str]:
        return [e.unit_execution_id for e in self.events]


@pytest.fixture
def dispatches() -> Dispatches:
    listener = Dispatches()
    configure(middleware=[listener])
    return listener


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` (a caller-side run that blocks in its map) on a thread of the test."""
    done: list[Any] = []
    runner = threading.Thread(target=lambda: done.append(call()), daemon=True)
    runner.start()
    return runner, done


def joined(runner: threading.Thread, done: list[Any]) -> Any:
    runner.join(30)
    assert not runner.is_alive(), "the run never ended"
    (outcome,) = done
    return outcome


def ids_of(execution_id: str, count: int, step: str = "charges") -> list[str]:
    """The execution ids elements ``0..count-1`` of ``step`` of run ``execution_id`` get."""
    run = Context(reactor="-", inputs={}, execution_id=execution_id)
    return [element_id(run, f"{step}[{i}]") for i in range(count)]


def dispatched(trace: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["step"], e["execution_id"]) for e in trace if e["type"] == "dispatched"]


def charged(key: str) -> list[str]:
    return [what for what in m.LOG.get(key, []) if what.startswith("charge ")]


def stored_ids() -> set[str]:
    return set(ExecutionStore(current_store()).ids(limit=100_000))


# -- values and executions -------------------------------------------------------------------


def test_each_element_is_an_execution_of_its_own_and_the_values_keep_element_order(
    key: str,
) -> None:
    outcome = m.Charges.run(key=key, items=[5, 7, 9, 11, 3])
    assert outcome.is_success, outcome
    assert outcome.value == ["5 eur", "7 eur", "9 eur", "11 eur", "3 eur"]
    assert sorted(charged(key)) == sorted(f"charge {n}" for n in (5, 7, 9, 11, 3))
    ids = ids_of(outcome.execution_id, 5)
    assert dispatched(outcome.trace) == [(f"charges[{i}]", ids[i]) for i in range(5)]
    assert set(outcome.context.children) == {f"charges[{i}]" for i in range(5)}
    for i, execution_id in enumerate(ids):
        element = find(execution_id)
        assert element is not None
        assert element.status == "completed"
        assert element.reactor == "tests.runtime._map_fan_out_reactors:ChargeOne"
        assert outcome.context.children[f"charges[{i}]"].execution_id == execution_id
    assert not outcome.context.fan_out  # bookkeeping dropped once it ended


def test_collect_runs_every_element_and_reports_failures_by_index(key: str) -> None:
    outcome = m.Collects.run(key=key, items=[1, 13, 3])
    assert outcome.is_success, outcome
    result = outcome.value
    assert isinstance(result, MapResult)
    assert result.values == ["1 eur", None, "3 eur"]
    assert result.successes == {0: "1 eur", 2: "3 eur"}
    assert list(result.failures) == [1]
    assert "declined 13" in result.failures[1]
    assert m.LOG[key].count("compensate 13") == 1  # in its own job, once
    failed = find(ids_of(outcome.execution_id, 3)[1])
    assert failed is not None
    assert failed.status == "failed"


def test_an_empty_source_dispatches_nothing(key: str, dispatches: Dispatches) -> None:
    outcome = m.Charges.run(key=key, items=[])
    assert outcome.is_success, outcome
    assert outcome.value == []
    assert dispatches.events == []


# -- fail_fast and rollback --------------------------------------------------------------------


def test_fail_fast_stops_dispatching_waits_for_those_in_flight_and_undoes_them(
    key: str, redis_url: str, dispatches: Dispatches
) -> None:
    """Window of 3: elements 0 (declined), 1 and 2 go out; 1 and 2 are held inside. Element
    0's failure stops the dispatching (3 and 4 never go out); the step waits for 1 and 2,
    then fails with element 0's error, and undoes 2 then 1 (highest index first)."""
    for amount in (2, 3):
        m.gate(key, amount)
    runner, done = in_thread(lambda: m.Threes.run(key=key, items=[13, 2, 3, 4, 5]))
    inside = m.overlap(key)
    until(lambda: "compensate 13" in m.LOG.get(key, []), "element 0 failed in its job")
    until(lambda: inside.current == 2, "elements 1 and 2 are inside their bodies")
    assert len(dispatches.events) == 3
    assert runner.is_alive()  # the map waits for the elements in flight
    for amount in (2, 3):
        m.gate(key, amount).set()
    outcome = joined(runner, done)
    assert outcome.status == "failed"
    assert outcome.step_name == "charges"
    assert isinstance(outcome.error, ValueError)
    assert str(outcome.error) == "declined 13"
    assert outcome.child is not None
    assert outcome.child.step_name == "charge"
    assert outcome.child.status == "failed"
    assert [e.step for e in dispatches.events] == ["charges[0]", "charges[1]", "charges[2]"]
    never = ids_of(outcome.execution_id, 5)[3:]
    assert all(find(i) is None for i in never)  # never stored, never sent
    assert "charge 4" not in m.LOG[key]
    assert "charge 5" not in m.LOG[key]
    assert m.LOG[key][-3:] == ["refund 3", "refund 2", "close"]
    assert m.LOG[key].count("compensate 13") == 1  # by itself; the map does not again
    assert outcome.context.children == {}  # undone, then forgotten


def test_a_later_failure_undoes_every_element_highest_index_first(key: str) -> None:
    outcome = m.Charges.run(key=key, items=[1, 2, 3, 4], fail_after=True)
    assert outcome.status == "failed"
    assert outcome.step_name == "settle"
    assert m.LOG[key][-5:] == ["refund 4", "refund 3", "refund 2", "refund 1", "close"]


# -- back pressure -----------------------------------------------------------------------------


def test_never_more_than_batch_size_elements_in_flight(
    key: str, redis_url: str, dispatches: Dispatches
) -> None:
    """Six elements, a window of 3, every element held inside until the test lets it go:
    three are inside and no fourth is dispatched; each one let go lets exactly the next one
    in. The recorder (in Redis) saw three inside at once, never more."""
    amounts = [1, 2, 3, 4, 5, 6]
    for amount in amounts:
        m.gate(key, amount)
    inside = m.overlap(key)
    runner, done = in_thread(lambda: m.Threes.run(key=key, items=amounts))
    until(lambda: inside.current == 3, "three elements are inside")
    assert len(dispatches.events) == 3
    assert sorted(charged(key)) == ["charge 1", "charge 2", "charge 3"]
    for amount in (1, 2, 3):
        m.gate(key, amount).set()
        until(lambda a=amount: f"charge {a + 3}" in charged(key), f"element {amount + 3} went in")
        until(lambda: inside.current == 3, "three elements are inside again")
        assert len(dispatches.events) == amount + 3
    for amount in (4, 5, 6):
        m.gate(key, amount).set()
    outcome = joined(runner, done)
    assert outcome.is_success, outcome
    assert outcome.value == [f"{n} eur" for n in amounts]
    assert inside.entries == 6
    assert inside.max_concurrency == 3
    assert inside.replayed_max() == 3
    assert [e.step for e in dispatches.events] == [f"charges[{i}]" for i in range(6)]


# -- coordination in each element's own job ------------------------------------------------------


def test_each_element_holds_its_lock_under_its_own_execution_id(key: str) -> None:
    owners: dict[int, str | None] = {}

    def spy(amount: int) -> None:
        owners[amount] = Lock(f"{key}:card:{amount}").state().owner

    m.SPIES[key] = spy
    outcome = m.Charges.run(key=key, items=[1, 2])
    assert outcome.is_success, outcome
    ids = ids_of(outcome.execution_id, 2)
    assert owners == {1: ids[0], 2: ids[1]}
    assert outcome.execution_id not in owners.values()


def test_a_contended_element_parks_in_its_own_job_and_the_collected_result_holds_it(
    key: str, dispatches: Dispatches
) -> None:
    """The test holds element 1's card: element 1's own execution parks on the lock (the
    caller's map waits for it) while 0 and 2 complete; the release wakes it."""
    held = Lock(f"{key}:card:2", ttl=30, wait=0).acquire()
    try:
        runner, done = in_thread(lambda: m.Collects.run(key=key, items=[1, 2, 3]))
        until(lambda: len(dispatches.events) == 3, "three elements were dispatched")
        first, second, third = dispatches.ids()
        until(lambda: status(second) == "waiting", "element 1 parked on the card")
        parked = find(second)
        assert parked is not None
        assert parked.waiting_on is not None
        assert parked.waiting_on["primitive"] == "lock"
        assert parked.waiting_on["key"] == f"{key}:card:2"
        assert parked.waiting_on["step"] == "charge"
        until(lambda: status(first) == status(third) == "completed", "0 and 2 completed")
        assert "charge 2" not in charged(key)
        assert runner.is_alive()
    finally:
        released = time.monotonic()
        held.release()
    outcome = joined(runner, done)
    assert time.monotonic() - released < WOKEN_WITHIN
    assert outcome.is_success, outcome
    assert outcome.value.values == ["1 eur", "2 eur", "3 eur"]
    assert outcome.value.failures == {}
    element = find(second)
    assert element is not None
    assert element.parks == 1
    assert [(e["type"], e["step"]) for e in element.trace] == [
        ("parked", "charge"),
        ("run", "charge"),
    ]


def test_the_guard_refuses_an_element_wanting_a_key_the_run_holds_before_dispatching(
    key: str, dispatches: Dispatches
) -> None:
    before = stored_ids()
    outcome = m.HoldsACard.run(key=key, items=[1, 2, 3])
    assert outcome.status == "failed"
    assert outcome.step_name == "charges"
    error = outcome.error
    assert isinstance(error, HandoffRefusedError), error
    assert error.key == f"{key}:card:2"
    assert error.primitive == "lock"
    assert error.holder.startswith("the reactor-level lock")
    text = str(error)
    assert "reactor HoldsACard, step 'charges'" in text
    assert "element 1" in text
    assert "leave fan_out out" in text
    assert "Nothing was dispatched" in text
    assert dispatches.events == []
    assert stored_ids() == before  # not one element stored, so none enqueued
    assert m.LOG[key] == ["open", "close"]
    assert Lock(f"{key}:card:2").state().owner is None  # the run's lock released too


# -- in a worker ---------------------------------------------------------------------------------


def test_a_map_in_a_worker_parks_on_its_full_window_and_an_elements_end_wakes_it(
    key: str,
) -> None:
    """The whole run is in a worker. Window of 2: elements 0 and 1 go out, 0 is held, so the
    run parks on element 0 (its thread given back; element 2 not dispatched); 0's end wakes
    it at once (timer 30 s), and it goes on to the end."""
    for amount in (1, 2):
        m.gate(key, amount)
    out = m.BgCharges.run(key=key, items=[1, 2, 3])
    ids = ids_of(out.execution_id, 3)
    until(lambda: status(out.execution_id) == "waiting", "the run parked on its window")
    parked = find(out.execution_id)
    assert parked is not None
    assert parked.waiting_on is not None
    assert parked.waiting_on["primitive"] == "async_unit"
    assert parked.waiting_on["key"] == ids[0]
    assert parked.waiting_on["step"] == "charges"
    assert parked.parks == 0  # waiting for an element is not contention
    assert find(ids[2]) is None  # the window is full
    released = time.monotonic()
    for amount in (1, 2):
        m.gate(key, amount).set()
    done = out.wait(timeout=20)
    assert time.monotonic() - released < WOKEN_WITHIN
    assert done.is_success, done
    assert done.value == ["1 eur", "2 eur", "3 eur"]
    assert dispatched(done.trace) == [(f"charges[{i}]", ids[i]) for i in range(3)]
    parks = [(e["step"], e["primitive"]) for e in done.trace if e["type"] == "parked"]
    assert parks
    assert set(parks) == {("charges", "async_unit")}


def test_a_resumed_map_never_dispatches_an_element_again(key: str, dispatches: Dispatches) -> None:
    """One element in flight at a time, each held: the run parks on each one in turn and
    resumes (from the stored context) when it ends; each element is dispatched and runs
    exactly once."""
    amounts = [1, 2, 3]
    for amount in amounts:
        m.gate(key, amount)
    out = m.BgOneAtATime.run(key=key, items=amounts)
    ids = ids_of(out.execution_id, 3)
    for i, amount in enumerate(amounts):

        def parked_on(element: str = ids[i]) -> bool:
            found = find(out.execution_id)
            return bool(found and found.status == "waiting" and found.waiting_on["key"] == element)

        until(parked_on, f"the run parked on element {i}")
        assert dispatches.ids() == ids[: i + 1]
        m.gate(key, amount).set()
    done = out.wait(timeout=20)
    assert done.is_success, done
    assert done.value == ["1 eur", "2 eur", "3 eur"]
    assert dispatches.ids() == ids
    assert dispatched(done.trace) == [(f"charges[{i}]", ids[i]) for i in range(3)]
    assert sorted(charged(key)) == ["charge 1", "charge 2", "charge 3"]
    parks = [e["key"] for e in done.trace if e["type"] == "parked"]
    assert parks == ids  # once on each element, then woken by its end
    assert stored_ids() >= set(ids)


def test_a_later_failure_in_a_worker_undoes_the_elements_highest_index_first(key: str) -> None:
    out = m.BgCharges.run(key=key, items=[1, 2, 3], fail_after=True)
    done = out.wait(timeout=20)
    assert done.status == "failed"
    assert done.step_name == "settle"
    assert m.LOG[key][-4:] == ["refund 3", "refund 2", "refund 1", "close"]


def test_a_caller_waiting_too_long_for_an_element_fails_the_step_naming_the_option(
    key: str, dispatches: Dispatches
) -> None:
    """In the caller the map waits up to async_wait_timeout for the oldest element; then the
    step fails (once in the trace), and the element goes on running on its own."""
    m.gate(key, 1)
    configure(async_wait_timeout=0.3)
    outcome = m.Charges.run(key=key, items=[1])
    (element,) = dispatches.ids()
    m.gate(key, 1).set()
    assert outcome.status == "failed"
    assert outcome.step_name == "charges"
    text = str(outcome.error)
    assert "reactor Charges, step 'charges'" in text
    assert "'charges[0]'" in text
    assert element in text
    assert "async_wait_timeout" in text
    failed = [e["step"] for e in outcome.trace if e["type"] == "failed"]
    assert failed == ["charges"]
    assert dispatches.failed == ["charges"]  # and told to middleware once
    assert not outcome.context.fan_out
    until(lambda: status(element) == "completed", "the element went on and ended")


def test_a_failed_elements_own_rollback_failures_reach_the_runs_outcome(key: str) -> None:
    outcome = m.BrokenUndo.run(key=key, items=[7])
    assert outcome.status == "failed"
    assert outcome.step_name == "charges"
    assert str(outcome.error) == "declined 7"
    (failure,) = outcome.rollback_failures
    assert failure["step"] == "charges[0].reserve"
    assert failure["kind"] == "undo"
    assert failure["reason"] == "raised"
    assert "could not release hold 7" in failure["message"]
