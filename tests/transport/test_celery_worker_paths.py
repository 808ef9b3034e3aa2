"""Worker-path claims proven on real Celery worker processes (until now only on the thread
worker): the park-write race, ``@parallel`` branch parks, and semaphore parks (a step's after
a period step, and a reactor's own).

Two ``py-reactor worker`` processes (prefork, two pool processes each) serve a queue of this
module's own, on the session's private redis-server as store and broker. Their park timer is
60 s with no jitter, so a parked run that completes within ``WOKEN_WITHIN`` of a release was
woken by it, never re-sent by the timer. The reactors (``_celery_worker_path_reactors``) report
through Redis; their middleware counts every park and, for the race tests, holds the worker
between a step's busy answer and the write of its park until the test has released the key
from this process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from py_reactor import Lock, OrderedLock, Period, Reactor, Semaphore
from py_reactor.storage import keys
from tests._wait import until
from tests.transport import _celery_worker_path_reactors as w
from tests.transport._harness import (
    Worker,
    finished,
    on_queue,
    records,
    serving,
    stored,
    waiting,
    whats,
)

QUEUE = "py_reactor_worker_paths"
PARK_DELAY = 60.0  # the workers' park timer: far longer than any wake may take
WOKEN_WITHIN = 15.0  # a run that ends this soon after the release was woken, not timed


@pytest.fixture(scope="module")
def path_workers(redis_url: str) -> Iterator[list[Worker]]:
    with serving(
        redis_url, QUEUE, "tests.transport._celery_worker_path_reactors", w.Ping,
        park_delay=PARK_DELAY,
    ) as started:  # fmt: skip
        yield started


@pytest.fixture(autouse=True)
def _on_celery(_default_settings: None, path_workers: list[Worker], redis_url: str) -> None:
    on_queue(redis_url, QUEUE, PARK_DELAY)


def parks(execution_id: str) -> list[tuple[str | None, str, str]]:
    """The ``(step, primitive, key)`` of every park in the stored trace, in order."""
    trace = stored(execution_id).trace
    return [(e["step"], e["primitive"], e["key"]) for e in trace if e["type"] == "parked"]


def park_events(raw: redis.Redis, key: str) -> list[str]:
    """The step paths of the parks the workers' middleware saw on ``key``."""
    return [entry.rpartition(":")[0] for entry in raw.lrange(w.parks_list(key), 0, -1)]


def in_workers(raw: redis.Redis, key: str) -> None:
    """Every step of the run keyed ``key`` ran in a worker process, none in this one."""
    ran = records(raw, key)
    assert ran, f"nothing ran for {key}"
    assert all(pid != os.getpid() for _, pid in ran), ran


# ----------------------------------------------------------------------------- park-write race


def race(
    raw: redis.Redis,
    reactor: type[Reactor],
    key: str,
    primitive: str,
    busy: str,
    release: Callable[[], object],
) -> tuple[Any, float]:
    """Run ``reactor`` keyed ``key`` while ``busy`` (a key of ``primitive``) is held by this
    process; when the worker has the busy answer and is about to write the park (its
    middleware says so and waits), release ``busy`` from here, then let the worker write the
    park. ``(the run, when the key was released)``; the run completed within
    ``WOKEN_WITHIN`` of the release."""
    raw.set(w.race_arm(busy), "1")
    out = reactor.run(key=key)
    until(lambda: raw.lpop(w.race_parked(busy)), "the worker at the park, before its write")
    # The busy answer is in, the park not written: the run is running, in no parked list.
    assert stored(out.execution_id).status == "running"
    assert out.execution_id not in raw.lrange(keys.parked(primitive, busy), 0, -1)
    release()
    released = time.monotonic()
    raw.rpush(w.race_done(busy), "done")  # now the worker writes the park
    done = finished(out, raw, key, timeout=WOKEN_WITHIN)  # far inside the park timer
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - released < WOKEN_WITHIN, (
        "a release between the busy answer and the park's write did not wake the run"
    )
    assert stored(out.execution_id).status == "completed"
    return out, released


def test_a_lock_released_before_the_park_is_written_wakes_the_run(
    raw: redis.Redis, key: str
) -> None:
    """The test holds the lock; ``charge`` meets it busy and, before its park is written, the
    test releases it (nobody is parked to be woken): the park's write sees the lock free and
    the run completes within seconds (park timer 60 s), parked once."""
    busy = w.lock_key(key)
    held = Lock(busy, owner="test-holder", ttl=60).acquire()
    out, _ = race(raw, w.LockedStep, key, "lock", busy, held.release)
    assert parks(out.execution_id) == [("charge", "lock", busy)]
    assert park_events(raw, busy) == ["charge"]
    assert whats(raw, key) == ["charge"]
    in_workers(raw, key)
    assert Lock(busy).state().owner is None


def test_a_semaphore_released_before_the_park_is_written_wakes_the_run(
    raw: redis.Redis, key: str
) -> None:
    """The test holds the only slot; ``send`` meets it full and, before its park is written,
    the test gives the slot back: the run completes within seconds, parked once."""
    busy = w.slot_key(key)
    held = Semaphore(busy, limit=1, owner="test-holder").acquire()
    out, _ = race(raw, w.SlotStep, key, "semaphore", busy, held.release)
    assert parks(out.execution_id) == [("send", "semaphore", busy)]
    assert park_events(raw, busy) == ["send"]
    assert whats(raw, key) == ["send"]
    in_workers(raw, key)
    assert Semaphore(busy, limit=1).state().held == 0


def test_a_period_claim_ended_before_the_park_is_written_wakes_the_run(
    raw: redis.Redis, key: str
) -> None:
    """The test holds the day's claim; ``report`` meets it busy and, before its park is
    written, the test's work succeeds (bucket marked, claim ended): the run is woken within
    seconds, parked once, and skips ``report`` (the bucket is done)."""
    busy = w.period_key(key)
    claim = Period(busy, every="day").claim(owner="test-holder")
    assert claim.due
    try:
        out, _ = race(raw, w.Nightly, key, "period", busy, lambda: claim.release(mark=True))
    finally:
        claim.release(mark=False)  # a no-op once the race ended it
    assert parks(out.execution_id) == [("report", "period", busy)]
    assert park_events(raw, busy) == ["report"]
    trace = stored(out.execution_id).trace
    assert [(e["type"], e["step"]) for e in trace] == [("parked", "report"), ("skipped", "report")]
    assert whats(raw, key) == []  # the body never ran: the test's work was the day's
    assert raw.lrange(w.period_claims(busy), 0, -1) == []  # no run claimed the bucket


def test_an_ordered_turn_passed_on_before_the_park_is_written_wakes_the_run(
    raw: redis.Redis, key: str
) -> None:
    """The test holds the first position, in progress; the run takes the second and parks out
    of turn; the test's turn ends between that answer and the park's write (nobody is parked
    to be woken): the write sees the turn has come and the run books within seconds."""
    busy = w.sequence_key(key)
    line = OrderedLock(busy)
    turn = line.wait_turn(line.take_position())
    out, _ = race(raw, w.OrderedStep, key, "ordered_lock", busy, lambda: turn.release(failed=False))
    assert parks(out.execution_id) == [("book", "ordered_lock", busy)]
    assert park_events(raw, busy) == ["book"]
    assert whats(raw, key) == ["book"]
    in_workers(raw, key)
    assert line.state().drained


# ----------------------------------------------------------------------------- parallel


def test_a_branch_parks_while_its_siblings_finish_and_a_release_wakes_the_run(
    raw: redis.Redis, key: str
) -> None:
    """a, b and c meet at a barrier while ``locked`` meets a lock the test holds and parks; a
    goes on only once that park was told, so the siblings finish after it. The run parks with
    their results, holding nothing; the release wakes it within seconds (park timer 60 s);
    ``locked`` and ``join`` run, a, b and c are not run again."""
    busy = w.lock_key(key)
    held = Lock(busy, owner="someone-else", ttl=60).acquire()
    out = w.Fanout.run(key=key)
    parked = waiting(out.execution_id, "lock")
    assert (parked.waiting_on["step"], parked.waiting_on["key"]) == ("locked", busy)
    assert parked.results == {"a": "a-value", "b": "b-value", "c": "c-value"}
    assert parks(out.execution_id) == [("locked", "lock", busy)]
    assert park_events(raw, busy) == ["locked"]
    assert parked.holds == []
    assert sorted(whats(raw, key)) == ["a", "b", "c"]

    held.release()
    released = time.monotonic()
    done = finished(out, raw, key)
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the run"
    assert done.is_success, (done, getattr(done, "error", None))
    assert done.value == "a-value+b-value+c-value+locked-value"
    assert sorted(whats(raw, key)) == ["a", "b", "c", "join", "locked"]  # nothing ran twice
    found = stored(out.execution_id)
    assert found.status == "completed"
    assert set(found.results) == {"a", "b", "c", "locked", "join"}
    assert found.holds == []
    assert parks(out.execution_id) == [("locked", "lock", busy)]
    assert Lock(busy).state().owner is None
    in_workers(raw, key)


def test_a_composed_child_parks_in_its_branch_and_resumes_where_it_stopped(
    raw: redis.Redis, key: str
) -> None:
    """The child's locked step parks (step ``pay.charge``); the stored run keeps ``side``'s
    result and the child's progress (``prepare`` done); the release wakes it within seconds,
    the child goes on from ``charge``, and nothing runs twice."""
    busy = w.lock_key(key)
    held = Lock(busy, owner="someone-else", ttl=60).acquire()
    out = w.ComposedPark.run(key=key)
    parked = waiting(out.execution_id, "lock")
    assert (parked.waiting_on["step"], parked.waiting_on["key"]) == ("pay.charge", busy)
    assert parked.results == {"side": "side-value"}
    assert parked.holds == []
    assert sorted(whats(raw, key)) == ["prepare", "side"]

    held.release()
    released = time.monotonic()
    done = finished(out, raw, key)
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the run"
    assert done.is_success, (done, getattr(done, "error", None))
    assert done.value == "charge-value+side-value"
    assert sorted(whats(raw, key)) == ["charge", "finish", "prepare", "side"]
    child = done.context.children["pay"]  # the stored child context, as the worker ended it
    assert child.status == "completed"
    assert child.results == {"prepare": "prepare-value", "charge": "charge-value"}
    assert parks(out.execution_id) == [("pay.charge", "lock", busy)]
    assert park_events(raw, busy) == ["pay.charge"]
    in_workers(raw, key)


def test_a_failure_overtaking_a_parked_branch_gives_back_its_ordered_position(
    raw: redis.Redis, key: str
) -> None:
    """After ``done``, ``ordered`` parks out of turn (the test holds the first position),
    keeping its own; ``boom``, started with it, fails after that park (it waits for the park
    event). The run fails and undoes
    ``done``; the parked branch's position is given back and nothing stays held: once the
    test's turn ends, the next position taken gets its turn at once."""
    busy = w.sequence_key(key)
    line = OrderedLock(busy, wait=10)  # a blocked line raises instead of waiting 600 s
    first = line.take_position()
    out = w.ParkThenFail.run(key=key)
    done = finished(out, raw, key)
    assert done.status == "failed"
    assert done.step_name == "boom"
    assert park_events(raw, busy) == ["ordered"]  # it did park, before the failure
    ran = whats(raw, key)
    assert "ordered" not in ran
    assert ran == ["done", "boom", "undo done"]
    found = stored(out.execution_id)
    assert found.status == "failed"
    assert found.holds == []
    line.wait_turn(first).release(failed=False)
    later = line.take_position()  # the abandoned position does not hold the line
    line.wait_turn(later).release(failed=False)
    assert line.state().drained
    in_workers(raw, key)


# ----------------------------------------------------------------------------- semaphore


def test_a_semaphore_park_after_a_period_step_is_woken_by_the_release_and_marks_the_period_once(
    raw: redis.Redis, key: str
) -> None:
    """``digest`` (daily period) runs and marks the bucket; ``send`` meets the full semaphore
    (another process holds its one slot) and parks, holding no slot. The holder's release wakes
    it within seconds (park timer 60 s): ``send`` runs, ``digest`` is neither run nor claimed
    again. A second run skips ``digest``: the bucket was marked."""
    slot = w.slot_key(key)
    daily = w.period_key(key)
    held = Semaphore(slot, limit=1, owner="someone-else").acquire()
    out = w.Mailer.run(key=key)
    parked = waiting(out.execution_id, "semaphore")
    assert (parked.waiting_on["step"], parked.waiting_on["key"]) == ("send", slot)
    assert parked.holds == []
    assert Semaphore(slot, limit=1).state().held == 1  # the holder's, none is the run's
    assert whats(raw, key) == ["digest"]
    assert Period(daily, every="day").is_done()

    held.release()
    released = time.monotonic()
    done = finished(out, raw, key)
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the run"
    assert done.is_success, (done, getattr(done, "error", None))
    assert whats(raw, key) == ["digest", "send"]
    assert parks(out.execution_id) == [("send", "semaphore", slot)]
    assert park_events(raw, slot) == ["send"]
    assert len(raw.lrange(w.period_claims(daily), 0, -1)) == 1  # claimed once, not on resume
    assert Period(daily, every="day").is_done()
    assert Semaphore(slot, limit=1).state().held == 0
    in_workers(raw, key)

    again = finished(w.Mailer.run(key=key), raw, key)
    assert again.is_success, (again, getattr(again, "error", None))
    assert whats(raw, key) == ["digest", "send", "send"]  # the bucket is done: no digest
    assert len(raw.lrange(w.period_claims(daily), 0, -1)) == 1


def test_a_reactor_level_semaphore_parks_the_run_holding_nothing_and_a_release_wakes_it(
    raw: redis.Redis, key: str
) -> None:
    """``@with_semaphore`` on the ``@background`` reactor itself, one slot, taken by another
    process: the run parks before any step (its own coordination), holding nothing; the
    holder's release wakes it within seconds (park timer 60 s) and it completes, giving the
    slot back."""
    slot = w.slot_key(key)
    held = Semaphore(slot, limit=1, owner="someone-else").acquire()
    out = w.SlotReactor.run(key=key)
    parked = waiting(out.execution_id, "semaphore")
    assert (parked.waiting_on["step"], parked.waiting_on["key"]) == (None, slot)
    assert parked.holds == []
    assert Semaphore(slot, limit=1).state().held == 1  # the holder's, none is the run's
    assert whats(raw, key) == []

    held.release()
    released = time.monotonic()
    done = finished(out, raw, key)
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the run"
    assert done.is_success, (done, getattr(done, "error", None))
    assert done.value == "worked"
    assert whats(raw, key) == ["work"]
    assert parks(out.execution_id) == [(None, "semaphore", slot)]
    assert park_events(raw, slot) == ["None"]
    assert Semaphore(slot, limit=1).state().held == 0
    in_workers(raw, key)
