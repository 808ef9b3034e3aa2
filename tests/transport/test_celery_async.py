"""Async units (``async_step``, ``async_reactor``) on real Celery worker processes.

Two ``py-reactor worker`` processes (prefork, two pool processes each) serve a queue of this
module's own for the whole module, on the session's private redis-server as store and broker.
Their park timer is 30 s with no jitter, so a parked execution that resumes within seconds
was woken (by a release, or by the end of the unit it reads), never re-sent by the timer. The
reactors (``_celery_async_reactors``) report through Redis; the tests wait for what they
report, or for stored statuses.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
import redis

from py_reactor import Lock, find
from tests._overlap import OverlapRecorder
from tests._wait import until
from tests.transport import _celery_async_reactors as a
from tests.transport._harness import (
    Worker,
    finished,
    go,
    on_queue,
    recorded,
    records,
    serving,
    stored,
    waiting,
    whats,
)

QUEUE = "py_reactor_async_units"
PARK_DELAY = 30.0  # the workers' park timer: far longer than any wake may take
WOKEN_WITHIN = 15.0  # a resume this soon after the event can only be a wake


@pytest.fixture(scope="module")
def unit_workers(redis_url: str) -> Iterator[list[Worker]]:
    with serving(
        redis_url, QUEUE, "tests.transport._celery_async_reactors", a.Ping, None, PARK_DELAY
    ) as started:
        yield started


@pytest.fixture(autouse=True)
def _on_celery(_default_settings: None, unit_workers: list[Worker], redis_url: str) -> None:
    on_queue(redis_url, QUEUE, PARK_DELAY)


def unit_of(execution_id: str, step: str) -> str:
    """The execution id of the unit ``step`` that ``execution_id`` dispatched (from the
    ``dispatched`` entry of its stored trace, once checkpointed)."""

    def dispatched() -> str | None:
        found = find(execution_id)
        for entry in found.trace if found is not None else []:
            if entry["type"] == "dispatched" and entry["step"] == step:
                return str(entry["execution_id"])
        return None

    return str(until(dispatched, f"{execution_id} dispatched its unit {step!r}"))


# ----------------------------------------------------------------------------- a reader


def test_an_async_step_runs_in_a_worker_and_its_reader_parks_until_the_unit_ends(
    raw: redis.Redis, key: str
) -> None:
    """The unit runs in a worker process while the parent goes on (``sibling`` runs, and the
    reader parks on the unit: status waiting, primitive async_unit, key the unit's id); the
    unit's end wakes the reader at once (park timer 30 s), which gets the unit's value."""
    out = a.Relay.run(key=key, n=1)
    assert out.status == "dispatched"
    unit = unit_of(out.execution_id, "unit")
    assert unit != out.execution_id
    parked = waiting(out.execution_id, "async_unit")
    assert parked.waiting_on["key"] == unit
    assert parked.waiting_on["step"] == "after"
    # The unit is still in its body (it waits for the word): the parent went on without it.
    ran = whats(raw, key)
    assert "sibling" in ran
    assert "unit" in ran
    assert "after" not in ran
    assert stored(unit).status == "running"
    told = go(raw, key)
    done = finished(out, raw, key)
    resumed = time.monotonic() - told
    assert done.is_success, (done, getattr(done, "error", None))
    assert done.value == (1 + 1) * 10 + 1
    assert resumed < WOKEN_WITHIN, f"the reader resumed {resumed:.1f} s after the unit's end"
    found = stored(out.execution_id)
    assert found.results["unit"] == 20
    assert found.results["after"] == 21
    parks = [e for e in found.trace if e["type"] == "parked"]
    assert [(e["step"], e["primitive"], e["key"]) for e in parks] == [("after", "async_unit", unit)]
    assert found.parks == 0, "waiting for a unit must not count toward park_max_attempts"
    ran = records(raw, key)
    assert [what for what, _ in ran].count("unit") == 1, "the unit was dispatched twice?"
    assert dict(ran)["unit"] != os.getpid(), "the unit ran in the test process"
    assert stored(unit).status == "completed"
    assert stored(unit).results == {"unit": 20}


# ----------------------------------------------------------------------------- owners


def test_an_async_steps_lock_is_held_by_the_units_own_execution_and_never_overlaps(
    raw: redis.Redis, redis_url: str, key: str
) -> None:
    """Unit A holds the lock (owner: A's own execution id, not its parent's) while its body
    waits; unit B, dispatched by another execution on the same key, parks on the lock; A's
    release wakes B; nobody was ever inside together and both parents complete."""
    account = f"acct-{key}"
    first, second = f"{key}-a", f"{key}-b"
    go(raw, second)  # B goes straight through once it has the lock
    out_a = a.LockedUnit.run(key=first, account=account, hold=0.0)
    unit_a = unit_of(out_a.execution_id, "work")
    until(lambda: recorded(raw, first, "work owner="), "unit A is inside its body")
    assert Lock(a.lock_key(account)).state().owner == unit_a  # read from this process
    assert f"work owner={unit_a}" in whats(raw, first)  # and from the worker, inside
    assert unit_a != out_a.execution_id

    out_b = a.LockedUnit.run(key=second, account=account, hold=0.0)
    unit_b = unit_of(out_b.execution_id, "work")
    blocked = waiting(unit_b, "lock")
    assert blocked.waiting_on["key"] == a.lock_key(account)
    assert blocked.waiting_on["step"] == "work"
    assert not recorded(raw, second, "work owner=")

    released = go(raw, first)
    done_a, done_b = finished(out_a, raw, first), finished(out_b, raw, second)
    assert done_a.is_success, (done_a, getattr(done_a, "error", None))
    assert done_b.is_success, (done_b, getattr(done_b, "error", None))
    assert (done_a.value, done_b.value) == (f"worked {first}", f"worked {second}")
    assert time.monotonic() - released < WOKEN_WITHIN, "A's release did not wake B"
    assert f"work owner={unit_b}" in whats(raw, second)
    assert out_b.execution_id not in {unit_a, unit_b}
    recorder = OverlapRecorder(redis_url, a.lock_key(account))
    assert recorder.entries == 2
    assert recorder.overlaps == 0
    assert recorder.replayed_max() == 1
    assert [kind for kind, _ in recorder.events] == ["enter", "leave", "enter", "leave"]
    assert [label for _, label in recorder.events] == [first, first, second, second]
    for run in (first, second):
        assert all(pid != os.getpid() for _, pid in records(raw, run))
        assert "compensate work" not in whats(raw, run)
    assert Lock(a.lock_key(account)).state().owner is None  # given back at the end


def test_a_burst_of_units_on_one_lock_never_overlaps_and_all_complete(
    raw: redis.Redis, redis_url: str, key: str
) -> None:
    """Four executions on four pool processes dispatch units on one key at once: the units
    contend (some park on the lock), every unit runs its body alone (the overlap recorder,
    across processes) under its own owner, and every parent completes."""
    account = f"acct-{key}"
    runs = [f"{key}-{i}" for i in range(4)]
    for run in runs:
        go(raw, run)
    outs = [a.LockedUnit.run(key=run, account=account, hold=0.15) for run in runs]
    done = [finished(out, raw, run, 60) for run, out in zip(runs, outs, strict=True)]
    assert all(d.is_success for d in done), [(d, getattr(d, "error", None)) for d in done]
    recorder = OverlapRecorder(redis_url, a.lock_key(account))
    assert recorder.entries == 4
    assert recorder.overlaps == 0
    assert recorder.max_concurrency == 1
    owners = {run: next(w for w in whats(raw, run) if w.startswith("work owner=")) for run in runs}
    units = {run: unit_of(out.execution_id, "work") for run, out in zip(runs, outs, strict=True)}
    assert owners == {run: f"work owner={units[run]}" for run in runs}
    parks = [e for u in units.values() for e in stored(u).trace if e["type"] == "parked"]
    assert parks, "with four units on one key at once, some must have parked (contention)"
    assert {(e["step"], e["primitive"]) for e in parks} == {("work", "lock")}


# ----------------------------------------------------------------------------- parked unit


def test_a_unit_parks_on_a_lock_held_here_and_the_release_wakes_it(
    raw: redis.Redis, key: str
) -> None:
    """This process holds the key: the unit's own execution parks (waiting on the lock, the
    key), its parent parks reading it; the release here wakes the unit, whose end wakes the
    parent, within seconds (park timer 30 s)."""
    account = f"acct-{key}"
    held = Lock(a.lock_key(account), ttl=30, wait=0).acquire()
    try:
        go(raw, key)  # the body goes straight through once it has the lock
        out = a.LockedUnit.run(key=key, account=account, hold=0.0)
        unit = unit_of(out.execution_id, "work")
        blocked = waiting(unit, "lock")
        assert blocked.waiting_on["key"] == a.lock_key(account)
        assert blocked.waiting_on["step"] == "work"
        assert blocked.parks == 1
        assert whats(raw, key) == []  # the body did not run
        reader = waiting(out.execution_id, "async_unit")
        assert reader.waiting_on["key"] == unit
    finally:
        released = time.monotonic()
        held.release()
    done = finished(out, raw, key)
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the unit"
    assert done.value == f"worked {key}"
    assert [w for w in whats(raw, key) if not w.startswith("work owner=")] == ["after"]
    assert f"work owner={unit}" in whats(raw, key)
    parks = [e for e in stored(unit).trace if e["type"] == "parked"]
    assert [(e["step"], e["primitive"]) for e in parks] == [("work", "lock")]
    assert stored(unit).status == "completed"


# ----------------------------------------------------------------------------- the guard


def test_the_guard_refuses_a_unit_on_a_key_its_execution_holds_before_enqueueing_it(
    raw: redis.Redis, key: str
) -> None:
    """In the worker, the run holds its reactor-level lock on the key when it reaches the
    unit declaring the same lock: the step fails with HandoffRefusedError naming the key;
    no unit execution was stored or sent; ``reserve`` is undone once; the refused unit is
    not compensated."""
    from py_reactor.engine.async_units import unit_id
    from py_reactor.engine.context import Context
    from py_reactor.errors import HandoffRefusedError
    from py_reactor.storage import current_store
    from py_reactor.storage.executions import ExecutionStore

    executions = ExecutionStore(current_store())
    before = set(executions.ids())
    account = f"acct-{key}"
    out = a.SelfLocked.run(key=key, account=account, hold=0.0)
    done = finished(out, raw, key)
    assert not done.is_success
    assert isinstance(done.error, HandoffRefusedError), (done.exception_class, done.error)
    assert done.step_name == "work"
    assert a.lock_key(account) in str(done.error)
    assert "async_step" in str(done.error)  # it says how to restructure
    found = stored(out.execution_id)
    assert found.status == "failed"
    assert "dispatched" not in [e["type"] for e in found.trace]
    assert set(executions.ids()) - before == {out.execution_id}
    # Nor under the id the unit would have had (derived from the parent's id and the step).
    would_be = unit_id(Context(reactor="-", inputs={}, execution_id=out.execution_id), "work")
    assert find(would_be) is None
    ran = records(raw, key)
    assert [what for what, _ in ran] == ["reserve", "undo reserve"]
    assert all(pid != os.getpid() for _, pid in ran)  # refused in the worker, not here
    assert found.holds == []
    assert Lock(a.lock_key(account)).state().owner is None


# ----------------------------------------------------------------------------- unread


def test_an_unread_unit_that_fails_compensates_itself_once_and_the_parent_completes(
    raw: redis.Redis, key: str
) -> None:
    """Nobody reads ``doomed``: it fails in its own job and compensates there, once; the
    parent (still in ``last`` when the unit ended) completes, and undoes nothing."""
    out = a.Unread.run(key=key)
    unit = unit_of(out.execution_id, "doomed")
    failed = until(
        lambda: (f := find(unit)) is not None and f.status == "failed" and f,
        "the unit failed",
    )
    assert "the unit fails" in str(failed.outcome.error)
    until(lambda: "last" in whats(raw, key), "the parent is in last")
    go(raw, key)
    done = finished(out, raw, key)
    assert done.is_success, (done, getattr(done, "error", None))
    assert done.value == "done"
    ran = records(raw, key)
    compensations = [pid for what, pid in ran if what == "compensate doomed"]
    assert len(compensations) == 1, ran
    assert compensations[0] != os.getpid()
    assert [what for what, _ in ran].count("doomed") == 1
    assert "undo first" not in [what for what, _ in ran]
    assert stored(out.execution_id).status == "completed"
    assert "doomed" not in stored(out.execution_id).results


# ----------------------------------------------------------------------------- async_reactor


def test_an_async_reactor_with_a_reactor_level_lock_runs_in_a_worker_and_its_value_is_read(
    raw: redis.Redis, key: str
) -> None:
    """The child runs as its own execution in a worker process, under its own reactor-level
    lock (owner: the child's execution id); its ``returns`` value reaches the parent."""
    account = f"acct-{key}"
    out = a.Composer.run(key=key, account=account)
    done = finished(out, raw, key)
    assert done.is_success, (done, getattr(done, "error", None))
    assert done.value == 43
    child = unit_of(out.execution_id, "child")
    assert child != out.execution_id
    ran = records(raw, key)
    assert [what for what, _ in ran] == [f"book owner={child}", "after"]
    assert all(pid != os.getpid() for _, pid in ran)
    found = stored(child)
    assert found.status == "completed"
    assert found.reactor == "tests.transport._celery_async_reactors:LockedChild"
    assert found.results == {"book": 42}
    assert stored(out.execution_id).results["child"] == 42
    assert Lock(a.lock_key(account)).state().owner is None
