"""map_step: a reactor run once per element, in order; fail_fast and collect; rollback of the
elements highest index first; a contended element parks the run in a worker and completes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from py_reactor import (
    Element,
    Input,
    Lock,
    MapResult,
    Middleware,
    Reactor,
    configure,
    find,
    map_step,
    step,
)
from py_reactor.dsl.map import fans_out
from py_reactor.errors import DefinitionError
from py_reactor.observability import events as ev
from tests._overlap import OverlapRecorder
from tests._wait import status, until
from tests.engine import _map_reactors as m


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0)
    yield
    m.LOG.clear()
    m.WITHIN.clear()


def test_each_element_runs_the_child_and_the_values_keep_element_order(key: str) -> None:
    outcome = m.Charges.run(key=key, items=[5, 7, 9])
    assert outcome.is_success, outcome
    assert outcome.value == ["5 eur", "7 eur", "9 eur"]
    assert m.LOG[key] == ["open", "charge 5", "charge 7", "charge 9"]
    assert set(outcome.context.children) == {"charges[0]", "charges[1]", "charges[2]"}


def test_elements_from_a_function_with_fields_and_transforms(key: str) -> None:
    outcome = m.FromRecords.run(key=key, count=2)
    assert outcome.is_success, outcome
    assert outcome.value == ["1 usd", "2 usd"]


def test_an_empty_source_gives_an_empty_list(key: str) -> None:
    outcome = m.Charges.run(key=key, items=[])
    assert outcome.is_success
    assert outcome.value == []


def test_fail_fast_undoes_the_done_elements_highest_index_first(key: str) -> None:
    outcome = m.Charges.run(key=key, items=[1, 2, 3, 13, 4])
    assert outcome.status == "failed"
    assert outcome.step_name == "charges"
    assert "declined 13" in str(outcome.error)
    assert outcome.child is not None
    assert outcome.child.step_name == "charge"
    assert m.LOG[key] == [
        "open", "charge 1", "charge 2", "charge 3", "charge 13",
        "refund 3", "refund 2", "refund 1", "close",
    ]  # fmt: skip


def test_a_later_failure_undoes_every_element_highest_index_first(key: str) -> None:
    outcome = m.Charges.run(key=key, items=[1, 2, 3], fail_after=True)
    assert outcome.status == "failed"
    assert outcome.step_name == "settle"
    assert m.LOG[key][-4:] == ["refund 3", "refund 2", "refund 1", "close"]


def test_collect_runs_every_element_and_reports_failures_by_index(key: str) -> None:
    outcome = m.Collects.run(key=key, items=[1, 13, 3])
    assert outcome.is_success, outcome
    result = outcome.value
    assert isinstance(result, MapResult)
    assert result.values == ["1 eur", None, "3 eur"]
    assert result.successes == {0: "1 eur", 2: "3 eur"}
    assert list(result.failures) == [1]
    assert "declined 13" in result.failures[1]
    assert m.LOG[key] == ["charge 1", "charge 13", "charge 3"]


def test_a_contended_element_parks_the_run_and_completes_once_free(key: str) -> None:
    with Lock(f"{key}:card", ttl=30, wait=0):
        out = m.BgCharges.run(key=key, items=[1, 2])
        until(lambda: status(out.execution_id) == "waiting", "the element parked", timeout=10)
        found = _stored(out.execution_id)
        assert found.waiting_on is not None
        assert found.waiting_on["step"] == "charges[0].charge"
        assert found.waiting_on["key"] == f"{key}:card"
        assert "charge 1" not in m.LOG.get(key, [])
    done = out.wait(timeout=10)  # the release woke it (park_delay is 30 s)
    assert done.is_success, done
    assert done.value == ["1 eur", "2 eur"]
    assert m.LOG[key].count("charge 1") == 1


def test_map_mistakes_are_refused_at_definition() -> None:
    with pytest.raises(DefinitionError, match="mode= takes"):
        map_step(m.ChargeOne, source=Input("items"), mode="all")
    with pytest.raises(DefinitionError, match="source= takes"):
        map_step(m.ChargeOne, source=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="fan_out= takes True or False"):
        map_step(m.ChargeOne, source=lambda i: [], fan_out="yes")  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="batch_size"):
        map_step(m.ChargeOne, source=lambda i: [], batch_size=0)
    with pytest.raises(DefinitionError, match="Element names the current element of a map_step"):

        class Wrong(Reactor):
            key: str

            @step(amount=Element("elsewhere"))
            def one(key: str, amount: int) -> int:
                return amount


def test_a_collected_result_is_stored_as_a_plain_mapping(key: str) -> None:
    done = m.BgCollects.run(key=key, items=[2, 13]).wait(timeout=10)
    assert done.is_success, done
    assert done.value["values"] == ["2 eur", None]
    assert done.value["successes"] == {"0": "2 eur"}
    assert list(done.value["failures"]) == ["1"]


def test_fan_out_is_recorded_on_the_declaration() -> None:
    assert fans_out(map_step(m.ChargeOne, source=Input("items"), fan_out=True, batch_size=5))
    assert not fans_out(map_step(m.ChargeOne, source=Input("items")))


def test_fan_out_refuses_a_child_defined_inside_a_function() -> None:
    """A worker imports each element's reactor by module:qualname: a local class cannot be."""

    class LocalChild(Reactor):
        amount: int

        @step
        def one(amount: int) -> int:
            return amount

    with pytest.raises(DefinitionError) as refused:
        map_step(LocalChild, source=Input("items"), fan_out=True, amount=Element("x"))
    text = str(refused.value)
    assert "map_step('test_fan_out_refuses_a_child_defined_inside_a_function.<locals>." in text
    assert "fan_out=True" in text
    assert "defined inside a function" in text
    assert "define it at module level" in text
    map_step(LocalChild, source=Input("items"), amount=Element("x"))  # in place: fine


class Dispatches(Middleware):
    """The execution id of every element dispatched, in order."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def on_unit_dispatched(self, event: ev.UnitDispatched) -> None:
        self.ids.append(event.unit_execution_id)


def _stored(execution_id: str) -> Any:
    found = find(execution_id)
    assert found is not None, execution_id
    return found


def test_fanned_out_elements_on_one_lock_take_turns_in_their_own_jobs(
    key: str, redis_url: str
) -> None:
    """Each element runs as its own execution and takes the card lock under its own owner (not
    the map's), so they do not re-enter each other's lock as in-place elements would: they take
    turns, one inside at a time, and the map's value keeps element order.

    The test holds the card first, so the three elements in flight all park on it; its release
    and each element's end wake the next. The park timer is 60 s and the run must end within
    15 s of the release, so a lost wake fails the test instead of being covered by the timer."""
    dispatches = Dispatches()
    configure(park_delay=60.0, park_jitter=0.0, middleware=[dispatches])
    inside = OverlapRecorder(redis_url, f"map-card:{key}")
    owners: dict[int, str | None] = {}

    @contextmanager
    def turn(amount: int) -> Iterator[None]:
        owners[amount] = Lock(f"{key}:card").state().owner
        with inside.inside(f"charge {amount}"):
            yield

    m.WITHIN[key] = turn
    done: list[Any] = []
    held = Lock(f"{key}:card", ttl=30, wait=0).acquire()
    try:
        runner = threading.Thread(
            target=lambda: done.append(m.FanCharges.run(key=key, items=[1, 2, 3, 4])), daemon=True
        )
        runner.start()
        until(lambda: len(dispatches.ids) == 3, "three elements were dispatched")
        first_three = list(dispatches.ids)
        until(
            lambda: all(status(i) == "waiting" for i in first_three),
            "the three elements in flight parked on the held card",
        )
        assert inside.entries == 0
    finally:
        released = time.monotonic()
        held.release()
    runner.join(30)
    assert not runner.is_alive(), "the map never ended"
    assert time.monotonic() - released < 15.0  # woken, not the 60 s timer
    (outcome,) = done
    assert outcome.is_success, outcome
    assert outcome.value == ["1 eur", "2 eur", "3 eur", "4 eur"]
    assert sorted(m.LOG[key][1:]) == ["charge 1", "charge 2", "charge 3", "charge 4"]
    dispatched = [
        (e["step"], e["execution_id"]) for e in outcome.trace if e["type"] == "dispatched"
    ]
    assert [step for step, _ in dispatched] == [
        "charges[0]", "charges[1]", "charges[2]", "charges[3]",
    ]  # fmt: skip
    ids = [execution_id for _, execution_id in dispatched]
    assert inside.entries == 4
    assert inside.max_concurrency == 1
    assert inside.replayed_max() == 1
    assert owners == {1: ids[0], 2: ids[1], 3: ids[2], 4: ids[3]}
    assert outcome.execution_id not in owners.values()
    assert ids == dispatches.ids
    parked = [i for i in ids if any(e["type"] == "parked" for e in _stored(i).trace)]
    assert len(parked) >= 1
    assert set(first_three) <= set(parked)
    undone = m.FanCharges.run(key=f"{key}-undo", items=[1, 2], fail_after=True)
    assert undone.status == "failed"
    assert m.LOG[f"{key}-undo"][-3:] == ["refund 2", "refund 1", "close"]
