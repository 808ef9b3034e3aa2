"""``map_step(..., fan_out=True)`` on real Celery worker processes.

Two ``py-reactor worker`` processes (prefork, two pool processes each) serve a queue of this
module's own for the whole module, on the session's private redis-server as store and broker;
their park timer is 30 s without jitter, so a run that resumes within seconds was woken (by a
release, or by an element's end). The reactors (``_celery_map_reactors``) report through
Redis; the tests wait for what they report, or for stored statuses.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from py_reactor import Lock, MapResult, Middleware, configure, find
from py_reactor.engine.context import Context
from py_reactor.engine.kinds.fan_out import element_id
from py_reactor.observability import events as ev
from tests._overlap import OverlapRecorder
from tests._wait import status, until
from tests.transport import _celery_map_reactors as c
from tests.transport._harness import (
    Worker,
    explain,
    finished,
    on_queue,
    records,
    serving,
    stored,
    waiting,
    whats,
)

QUEUE = "py_reactor_map_fan_out"
PARK_DELAY = 30.0  # the workers' park timer: far longer than any wake may take
WOKEN_WITHIN = 15.0  # a resume this soon after the event can only be a wake


@pytest.fixture(scope="module")
def map_workers(redis_url: str) -> Iterator[list[Worker]]:
    with serving(
        redis_url, QUEUE, "tests.transport._celery_map_reactors", c.Ping, None, PARK_DELAY
    ) as started:
        yield started


@pytest.fixture(autouse=True)
def _on_celery(_default_settings: None, map_workers: list[Worker], redis_url: str) -> None:
    on_queue(redis_url, QUEUE, PARK_DELAY)


class Dispatches(Middleware):
    """The execution id of every element the runs of this process dispatch, in order."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def on_unit_dispatched(self, event: ev.UnitDispatched) -> None:
        self.ids.append(event.unit_execution_id)


def ids_of(execution_id: str, count: int) -> list[str]:
    run = Context(reactor="-", inputs={}, execution_id=execution_id)
    return [element_id(run, f"charges[{i}]") for i in range(count)]


def test_both_modes_fan_out_to_worker_processes(raw: redis.Redis, key: str) -> None:
    """The run is here; its elements run in worker processes, each under its own execution
    id. collect: the values by index, the declined one reported (it compensated itself, in
    its job, once). fail_fast: the step fails with the element's error, and the elements that
    completed are undone here, highest index first."""
    collected = c.Collects.run(key=key, items=[1, 13, 3])
    assert collected.is_success, collected
    result = collected.value
    assert isinstance(result, MapResult)
    assert result.values == ["1 eur", None, "3 eur"]
    assert list(result.failures) == [1]
    assert "declined 13" in result.failures[1]
    ids = ids_of(collected.execution_id, 3)
    ran = records(raw, key)
    charges = {what.split(" owner=")[0]: (what, pid) for what, pid in ran if " owner=" in what}
    assert set(charges) == {"charge 1", "charge 13", "charge 3"}
    for amount, execution_id in zip((1, 13, 3), ids, strict=True):
        what, pid = charges[f"charge {amount}"]
        assert what == f"charge {amount} owner={execution_id}"  # its own owner, in its job
        assert pid != os.getpid()
    compensations = [pid for what, pid in ran if what == "compensate 13"]
    assert len(compensations) == 1
    assert compensations[0] != os.getpid()

    failing = f"{key}-fail"
    failed = c.Charges.run(key=failing, items=[1, 2, 13])
    assert failed.status == "failed"
    assert failed.step_name == "charges"
    assert str(failed.error) == "declined 13"
    assert isinstance(failed.error, ValueError)
    assert failed.child is not None
    assert failed.child.step_name == "charge"
    ran = records(raw, failing)
    assert [what for what, _ in ran][-3:] == ["refund 2", "refund 1", "close"]
    assert all(pid == os.getpid() for what, pid in ran if what.startswith("refund"))
    assert [what for what, _ in ran].count("compensate 13") == 1
    assert "settle" not in [what for what, _ in ran]


def test_back_pressure_holds_across_processes_and_the_parked_run_is_woken(
    raw: redis.Redis, redis_url: str, key: str
) -> None:
    """The whole run is in a worker process; five elements, two in flight at most, each held
    in its body: two are inside (four pool processes could take more) and the third is not
    dispatched; the run parked on the oldest. Once told, every element goes through, never
    more than two inside at once, and the run is woken by the elements' ends."""
    inside = c.overlap(key)
    out = c.BgPairs.run(key=key, items=[1, 2, 3, 4, 5], hold=True)
    ids = ids_of(out.execution_id, 5)
    try:
        until(lambda: inside.current == 2, "two elements are inside")

        def parked() -> Any:
            found = find(out.execution_id)
            return found if found is not None and found.status == "waiting" else None

        waiting = until(parked, "the run parked on its full window")
        assert waiting.waiting_on["primitive"] == "async_unit"
        assert waiting.waiting_on["key"] == ids[0]
        assert waiting.waiting_on["step"] == "charges"
        assert find(ids[2]) is None  # the window is full: not stored, not sent
        assert inside.current == 2
    finally:
        told = time.monotonic()
        raw.rpush(f"celery-test:{key}:go", "go")
    try:
        done = out.wait(timeout=60)
    except TimeoutError as exc:
        raise AssertionError(explain(raw, key, [out.execution_id, *ids])) from exc
    assert done.is_success, (done, getattr(done, "error", None))
    assert done.value == ["1 eur", "2 eur", "3 eur", "4 eur", "5 eur"]
    assert time.monotonic() - told < WOKEN_WITHIN, "the parked run was left to its 30 s timer"
    assert inside.entries == 5
    assert inside.max_concurrency == 2
    assert inside.replayed_max() == 2
    found = find(out.execution_id)
    assert found is not None
    steps = [e["step"] for e in found.trace if e["type"] == "dispatched"]
    assert steps == [f"charges[{i}]" for i in range(5)]  # each once, in index order
    parks = {(e["step"], e["primitive"]) for e in found.trace if e["type"] == "parked"}
    assert parks == {("charges", "async_unit")}
    assert all(pid != os.getpid() for _, pid in records(raw, key))


def test_a_contended_element_parks_in_its_job_and_the_release_wakes_it(
    raw: redis.Redis, key: str
) -> None:
    """This process holds element 1's card: that element's own execution parks on the lock
    in its worker process while the others complete (the run, here, waits for it); the
    release here wakes it within seconds, and the collected result holds its value."""
    listener = Dispatches()
    configure(middleware=[listener])
    held = Lock(c.card({"key": key, "amount": 2}), ttl=30, wait=0).acquire()
    with ThreadPoolExecutor(1) as pool:
        try:
            future = pool.submit(c.Collects.run, key=key, items=[1, 2, 3])
            until(lambda: len(listener.ids) == 3, "the three elements were dispatched")
            first, second, third = listener.ids
            until(lambda: status(second) == "waiting", "element 1 parked on its card")
            parked = find(second)
            assert parked is not None
            assert parked.waiting_on is not None
            assert parked.waiting_on["primitive"] == "lock"
            assert parked.waiting_on["key"] == c.card({"key": key, "amount": 2})
            assert parked.waiting_on["step"] == "charge"
            until(
                lambda: status(first) == "completed" and status(third) == "completed",
                "elements 0 and 2 completed",
            )
            assert not any(what.startswith("charge 2 ") for what in whats(raw, key))
            assert not future.done()  # the map waits for element 1
        finally:
            released = time.monotonic()
            held.release()
        try:
            outcome = future.result(timeout=60)
        except TimeoutError as exc:
            raise AssertionError(explain(raw, key, listener.ids)) from exc
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the element"
    assert outcome.is_success, outcome
    assert outcome.value.values == ["1 eur", "2 eur", "3 eur"]
    assert outcome.value.failures == {}
    assert listener.ids == ids_of(outcome.execution_id, 3)
    element = find(second)
    assert element is not None
    assert element.parks == 1
    trace = [(e["type"], e["step"]) for e in element.trace]
    assert trace == [("parked", "charge"), ("run", "charge")]
    assert f"charge 2 owner={second}" in whats(raw, key)


def test_fanned_out_elements_on_one_lock_take_turns_each_in_its_own_job(
    raw: redis.Redis, redis_url: str, key: str
) -> None:
    """Four elements in flight at once, each in a job of its own, need one card: with this
    process holding it, all four park on it (in their own executions); once released, they
    take it one at a time, each under its own execution id (never the run's), each release
    waking the next; the run, parked on its elements in a worker, completes within seconds
    (park timer 30 s)."""
    n = 4
    card = c.shared_card({"key": key})
    inside = OverlapRecorder(redis_url, f"celery-map:{key}")
    held = Lock(card, ttl=30, wait=0).acquire()
    try:
        out = c.BgShared.run(key=key, items=list(range(1, n + 1)))
        ids = ids_of(out.execution_id, n)
        for element in ids:
            parked = waiting(element, "lock")
            assert (parked.waiting_on["key"], parked.waiting_on["step"]) == (card, "charge")
        assert whats(raw, key) == []  # no body ran while this process held the card
        assert inside.entries == 0
    finally:
        released = time.monotonic()
        held.release()
    done = finished(out, raw, key, timeout=60)
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - released < WOKEN_WITHIN, "the releases did not wake the elements"
    assert done.value == [f"{i} eur" for i in range(1, n + 1)]
    assert inside.entries == n
    assert inside.max_concurrency == 1
    assert inside.overlaps == 0
    assert inside.replayed_max() == 1
    owners = {what.split(" owner=")[0]: what.split(" owner=")[1] for what in whats(raw, key)}
    assert owners == {f"charge {i + 1}": element for i, element in enumerate(ids)}
    assert out.execution_id not in owners.values()
    assert all(pid != os.getpid() for _, pid in records(raw, key))
    for element in ids:
        found = stored(element)
        assert found.status == "completed"
        parks = {
            (e["step"], e["primitive"], e["key"]) for e in found.trace if e["type"] == "parked"
        }
        assert parks == {("charge", "lock", card)}
    assert Lock(card).state().owner is None  # given back by the last one
