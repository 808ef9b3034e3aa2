"""Every step-level primitive parks and is woken on real Celery worker processes, and a locked
step's rollback runs under its lock inside a worker.

Two ``py-reactor worker`` processes (prefork, two pool processes each) serve a queue of this
module's own for the whole module, on the session's private redis-server as store and broker.
Their park timer is 60 s with no jitter, so a parked execution that completes within
``WOKEN_WITHIN`` of the event was woken (by a release, or by its rate limit's ``retry_after``),
never re-sent by the timer. The reactors (``_celery_primitive_reactors``) report through Redis
and enter an overlap recorder (``tests._overlap``) while they work under a primitive; the tests
wait for what they report, or for stored statuses.

A rate limit declared with a long ``wait`` and a busy period claim park too (issue 19, bug 5:
they used to hold the worker thread for their ``wait``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from py_reactor import Lock, Period, Reactor, Semaphore, find
from tests._overlap import OverlapRecorder
from tests._wait import until
from tests.engine.coordination._helpers import fresh_window
from tests.transport import _celery_primitive_reactors as p
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

QUEUE = "py_reactor_primitives"
PARK_DELAY = 60.0  # the workers' park timer: far longer than any wake may take
WOKEN_WITHIN = 15.0  # a run that ends this soon after the event was woken, not timed


@pytest.fixture(scope="module")
def primitive_workers(redis_url: str) -> Iterator[list[Worker]]:
    with serving(
        redis_url, QUEUE, "tests.transport._celery_primitive_reactors", p.Ping, None, PARK_DELAY
    ) as started:
        yield started


@pytest.fixture(autouse=True)
def _on_celery(_default_settings: None, primitive_workers: list[Worker], redis_url: str) -> None:
    on_queue(redis_url, QUEUE, PARK_DELAY)


def recorder(redis_url: str, account: str) -> OverlapRecorder:
    return OverlapRecorder(redis_url, f"celery-primitives:{account}")


def parks(execution_id: str) -> list[tuple[str, str, str]]:
    """The ``(step, primitive, key)`` of every park in the stored trace, in order."""
    trace = stored(execution_id).trace
    return [(e["step"], e["primitive"], e["key"]) for e in trace if e["type"] == "parked"]


def in_workers(raw: redis.Redis, key: str) -> None:
    """Every step of the run keyed ``key`` ran in a worker process, none in this one."""
    ran = records(raw, key)
    assert ran, f"nothing ran for {key}"
    assert all(pid != os.getpid() for _, pid in ran), ran


# ----------------------------------------------------------------------------- semaphore


@pytest.mark.parametrize(("reactor", "limit"), [(p.OneSlot, 1), (p.TwoSlots, 2)])
def test_a_step_semaphore_parks_the_run_beyond_its_limit_and_a_release_wakes_it(
    reactor: type[Reactor], limit: int, raw: redis.Redis, redis_url: str, key: str
) -> None:
    """``limit`` runs hold every slot (they wait for the test inside); one more parks (status
    waiting on the semaphore's key, holding no slot); one holder's release wakes it and it
    completes within seconds (park timer 60 s); never more than ``limit`` were inside."""
    account = f"acct-{key}"
    holders = [f"{key}-h{i}" for i in range(limit)]
    outs = [reactor.run(key=holder, account=account) for holder in holders]
    inside = recorder(redis_url, account)
    until(lambda: inside.current == limit, f"{limit} holder(s) are inside")

    late = f"{key}-late"
    go(raw, late)  # once in, it goes straight through
    out = reactor.run(key=late, account=account)
    parked = waiting(out.execution_id, "semaphore")
    assert parked.waiting_on["key"] == p.slot_key(account)
    assert parked.waiting_on["step"] == "work"
    assert whats(raw, late) == []  # the body did not run
    assert Semaphore(p.slot_key(account), limit=limit).state().held == limit  # none is its
    assert inside.current == limit

    released = go(raw, holders[0])
    done = finished(out, raw, late)
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the parked run"
    assert done.value == late
    for holder in holders[1:]:
        go(raw, holder)
    for holder, held in zip(holders, outs, strict=True):
        assert finished(held, raw, holder).is_success
    assert parks(out.execution_id) == [("work", "semaphore", p.slot_key(account))]
    assert all(parks(held.execution_id) == [] for held in outs)
    assert inside.entries == limit + 1
    assert inside.max_concurrency == limit
    assert inside.replayed_max() == limit
    events = inside.events
    assert events.index(("enter", late)) > events.index(("leave", holders[0]))
    for run in [*holders, late]:
        in_workers(raw, run)
    assert Semaphore(p.slot_key(account), limit=limit).state().held == 0  # all given back


# ----------------------------------------------------------------------------- ordered lock


def test_a_step_ordered_lock_parks_out_of_turn_runs_and_passes_them_in_arrival_order(
    raw: redis.Redis, redis_url: str, key: str
) -> None:
    """The first run to arrive at ``book`` waits inside; three more arrive one after the
    other and park out of turn (primitive ordered_lock, never counted as contention parks);
    once the first is told, each release wakes the next: all four book in arrival order
    within seconds (park timer 60 s), one at a time."""
    account = f"acct-{key}"
    runs = [f"{key}-{i}" for i in range(4)]
    outs = [p.Booking.run(key=runs[0], account=account, position=0)]
    inside = recorder(redis_url, account)
    until(lambda: inside.current == 1, "the first run is inside book")
    for position, run in enumerate(runs[1:], start=1):
        go(raw, run)  # once its turn comes, it goes straight through
        outs.append(p.Booking.run(key=run, account=account, position=position))
        parked = waiting(outs[-1].execution_id, "ordered_lock")  # arrived: its place taken
        assert parked.waiting_on["key"] == p.sequence_key(account)
        assert parked.waiting_on["step"] == "book"
        assert parked.parks == 0, "an ordered lock's turn must not count toward the park cap"
    assert raw.lrange(f"celery-primitives:{account}:order", 0, -1) == ["0"]

    released = go(raw, runs[0])
    done = [finished(out, raw, run) for run, out in zip(runs, outs, strict=True)]
    assert time.monotonic() - released < WOKEN_WITHIN, "the releases did not wake the line"
    assert [d.value for d in done] == [0, 1, 2, 3], [(d, getattr(d, "error", None)) for d in done]
    assert raw.lrange(f"celery-primitives:{account}:order", 0, -1) == ["0", "1", "2", "3"]
    assert parks(outs[0].execution_id) == []
    for out in outs[1:]:
        seen = parks(out.execution_id)
        assert seen, "an out-of-turn run must have parked"
        assert set(seen) == {("book", "ordered_lock", p.sequence_key(account))}
    assert inside.entries == 4
    assert inside.overlaps == 0
    assert [label for kind, label in inside.events if kind == "enter"] == runs
    for run in runs:
        assert whats(raw, run) == ["arrive"]
        in_workers(raw, run)


# ----------------------------------------------------------------------------- rate limit


def key_of(out: Any) -> str:
    """The ``key`` input of the run ``out``."""
    return str(stored(out.execution_id).inputs["key"])


def _two_in_one_window(reactor: type[Reactor], raw: redis.Redis, key: str) -> list[Any]:
    """Two runs of ``reactor`` dispatched at the start of a rate-limit window (one call per
    ``WINDOW``): both reach the step before it ends, so one of them is refused."""
    api = f"api-{key}"
    fresh_window(raw, p.WINDOW, margin=p.WINDOW - 1)
    return [reactor.run(key=f"{key}-{i}", api=api) for i in range(2)]


def _one_parked(outs: list[Any]) -> tuple[Any, Any]:
    """``(the run admitted, the run parked)``, once one of ``outs`` completed and the other
    is stored parked."""

    def settled() -> Any:
        found = [find(out.execution_id) for out in outs]
        if any(f is None or f.status not in {"waiting", "completed"} for f in found):
            return None
        return found if {f.status for f in found} != {"completed"} else None

    first, _ = until(settled, "one run completed and the other parked", timeout=p.WINDOW)
    return (outs[0], outs[1]) if first.status == "completed" else (outs[1], outs[0])


def test_the_second_run_in_a_rate_limit_window_parks_for_its_retry_after_then_completes(
    raw: redis.Redis, key: str
) -> None:
    """One call a window (``wait=0``): of two runs in one window, one calls and the other
    parks (primitive rate_limit) until the window rolls over — its own retry_after, not the
    60 s park timer — then calls in the next window and completes."""
    admitted, late = _one_parked(_two_in_one_window(p.Metered, raw, key))
    seen_parked = time.monotonic()
    parked = stored(late.execution_id)
    assert parked.status == "waiting"
    assert parked.waiting_on["primitive"] == "rate_limit"
    assert parked.waiting_on["key"] == p.api_key(f"api-{key}")
    assert parked.waiting_on["step"] == "call"
    late_key = key_of(late)
    done = finished(late, raw, late_key)
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - seen_parked < p.WINDOW + WOKEN_WITHIN, "parked for the timer?"
    first = finished(admitted, raw, key_of(admitted))
    assert first.is_success
    # The late run called in a later window than the admitted one, once its park ended.
    assert math.floor(done.value / p.WINDOW) > math.floor(first.value / p.WINDOW)
    (entry,) = [e for e in stored(late.execution_id).trace if e["type"] == "parked"]
    assert (entry["step"], entry["primitive"]) == ("call", "rate_limit")
    assert 0 < entry["until"] - entry["started_at"] <= p.WINDOW + 0.5  # its retry_after
    assert done.value >= entry["until"] - 0.5
    assert parks(admitted.execution_id) == []
    assert whats(raw, late_key) == ["call"]
    in_workers(raw, late_key)


def test_a_rate_limit_with_a_long_wait_parks_in_a_worker_instead_of_sleeping(
    raw: redis.Redis, key: str
) -> None:
    """Declared with ``wait`` longer than its window: in a worker the refused run still
    parks (primitive rate_limit) for its retry_after instead of sleeping it on the worker
    thread, then calls in the next window and completes."""
    outs = _two_in_one_window(p.PatientMetered, raw, key)
    done = [finished(out, raw, key_of(out), p.WINDOW + WOKEN_WITHIN) for out in outs]
    assert all(d.is_success for d in done), [(d, getattr(d, "error", None)) for d in done]
    (first, admitted), (second, late) = sorted(
        zip(done, outs, strict=True), key=lambda pair: pair[0].value
    )
    # The second call had to wait for the next window ...
    assert math.floor(second.value / p.WINDOW) > math.floor(first.value / p.WINDOW)
    # ... and it waited parked, not asleep on the worker thread.
    assert parks(late.execution_id) == [("call", "rate_limit", p.api_key(f"api-{key}"))], (
        "the refused run waited for the next window without parking (slept in the worker)"
    )
    assert parks(admitted.execution_id) == []


# ----------------------------------------------------------------------------- period


def test_a_second_run_in_the_same_period_skips_the_step_and_goes_on(
    raw: redis.Redis, key: str
) -> None:
    """The first run marks the day's bucket; a second one in the same day skips ``digest``
    (trace: skipped, reason period) and runs the rest; the body ran once."""
    job = f"job-{key}"
    first, second = f"{key}-first", f"{key}-second"
    go(raw, first)
    go(raw, second)
    done = finished(p.Digest.run(key=first, job=job), raw, first)
    assert done.is_success, (done, getattr(done, "error", None))
    assert Period(p.digest_key(job), every="day").is_done()
    out = p.Digest.run(key=second, job=job)
    again = finished(out, raw, second)
    assert again.is_success, (again, getattr(again, "error", None))
    assert whats(raw, first) == ["digest", "after"]
    assert whats(raw, second) == ["after"]
    found = stored(out.execution_id)
    skipped = [(e["step"], e.get("reason")) for e in found.trace if e["type"] == "skipped"]
    assert skipped == [("digest", "period")]
    assert found.results == {"digest": None, "after": "after"}  # a skipped step's value
    assert parks(out.execution_id) == []
    in_workers(raw, second)


def test_a_busy_period_claim_parks_the_second_run_and_the_claims_end_wakes_it(
    raw: redis.Redis, key: str
) -> None:
    """The first run holds the bucket's claim (inside ``digest``, waiting for the test); a
    second run reaching ``digest`` parks on it (status waiting, primitive period) instead of
    blocking a worker thread; the first run's success ends the claim and wakes it within
    seconds (park timer 60 s): the bucket is then done, so it skips ``digest``."""
    job = f"job-{key}"
    first, second = f"{key}-first", f"{key}-second"
    holder = p.Digest.run(key=first, job=job)
    try:
        until(lambda: "digest" in whats(raw, first), "the first run holds the claim")
        go(raw, second)
        out = p.Digest.run(key=second, job=job)
        parked = waiting(out.execution_id, "period", timeout=10)
        assert parked.waiting_on["key"] == p.digest_key(job)
        assert parked.waiting_on["step"] == "digest"
        assert whats(raw, second) == []
    finally:
        released = go(raw, first)
    assert finished(holder, raw, first).is_success
    done = finished(out, raw, second)
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - released < WOKEN_WITHIN, "the claim's end did not wake the run"
    assert whats(raw, second) == ["after"]
    assert [(s, prim) for s, prim, _ in parks(out.execution_id)] == [("digest", "period")]
    found = stored(out.execution_id)
    skipped = [(e["step"], e.get("reason")) for e in found.trace if e["type"] == "skipped"]
    assert skipped == [("digest", "period")]


# ----------------------------------------------------------------------------- rollback


def test_an_undo_in_a_worker_re_takes_the_steps_lock_and_never_overlaps_its_holders(
    raw: redis.Redis, redis_url: str, key: str
) -> None:
    """``charge`` (locked on the account) completes; while ``ship`` waits, another run takes
    the lock and waits inside. ``ship`` fails: the undo of ``charge`` waits for the lock (it
    is queued on it, and has not run) until that run lets go, then runs holding the lock
    under the execution's own id; a third run arriving meanwhile parks on the lock and is
    woken by the undo's release. Nobody was ever inside with anybody else."""
    account = f"acct-{key}"
    lock = p.lock_key(account)
    a, b, c = f"{key}-a", f"{key}-b", f"{key}-c"
    out_a = p.ChargeThenFail.run(key=a, account=account)
    until(lambda: "ship" in whats(raw, a), "the charge is done and ship waits")
    assert Lock(lock).state().owner is None  # charge gave the lock back when it completed

    out_b = p.HoldAccount.run(key=b, account=account)
    until(lambda: recorded(raw, b, "hold owner="), "the other run holds the lock")
    assert Lock(lock).state().owner == out_b.execution_id
    go(raw, a)  # ship fails: the rollback starts, and its undo needs the lock
    until(lambda: Lock(lock).state().waiters == 1, "the undo waits for the lock")
    assert not recorded(raw, a, "undo")

    go(raw, b)
    until(lambda: recorded(raw, a, "undo owner="), "the undo runs")
    assert f"undo owner={out_a.execution_id}" in whats(raw, a)  # seen from inside the undo
    assert Lock(lock).state().owner == out_a.execution_id  # and from here
    go(raw, c)  # once in, it goes straight through
    out_c = p.HoldAccount.run(key=c, account=account)
    parked = waiting(out_c.execution_id, "lock")
    assert parked.waiting_on["key"] == lock
    assert parked.waiting_on["step"] == "hold"

    released = go(raw, f"{a}:undo")
    failed = finished(out_a, raw, a)
    done_c = finished(out_c, raw, c)
    assert time.monotonic() - released < WOKEN_WITHIN, "the undo's release did not wake C"
    assert not failed.is_success
    assert "shipping failed" in str(failed.error)
    assert failed.rollback_failures == []
    assert finished(out_b, raw, b).is_success
    assert done_c.is_success, (done_c, getattr(done_c, "error", None))
    assert f"hold owner={out_c.execution_id}" in whats(raw, c)
    assert whats(raw, a) == ["charge", "ship", f"undo owner={out_a.execution_id}"]
    undo = [e for e in stored(out_a.execution_id).trace if e["type"] == "undo"]
    assert [(e["step"], e["ok"], e.get("key")) for e in undo] == [("charge", True, lock)]
    assert parks(out_a.execution_id) == []
    inside = recorder(redis_url, account)
    assert inside.overlaps == 0
    assert inside.events == [
        (kind, f"{label}")
        for label in (f"{a} charge", f"{b} hold", f"{a} undo", f"{c} hold")
        for kind in ("enter", "leave")
    ]
    for run in (a, b, c):
        in_workers(raw, run)
    assert Lock(lock).state().owner is None  # given back at the end


def test_a_compensate_in_a_worker_runs_under_the_lock_its_failed_work_kept(
    raw: redis.Redis, redis_url: str, key: str
) -> None:
    """``charge`` holds the account's lock and waits; another run arrives and parks on it.
    The work fails: its compensate runs still holding the lock (owner: the execution), and
    the parked run stays parked until the compensate is done; then the release wakes it.
    Nobody got in between the failed work and its compensate."""
    account = f"acct-{key}"
    lock = p.lock_key(account)
    a, b = f"{key}-a", f"{key}-b"
    out_a = p.ChargeFails.run(key=a, account=account)
    until(lambda: "charge" in whats(raw, a), "the charge holds the lock")
    go(raw, b)  # once in, it goes straight through
    out_b = p.HoldAccount.run(key=b, account=account)
    parked = waiting(out_b.execution_id, "lock")
    assert parked.waiting_on["key"] == lock

    go(raw, a)  # the work fails
    until(lambda: recorded(raw, a, "compensate owner="), "the compensate runs")
    assert f"compensate owner={out_a.execution_id}" in whats(raw, a)  # seen from inside it
    assert Lock(lock).state().owner == out_a.execution_id  # and from here
    assert stored(out_b.execution_id).status == "waiting"
    assert whats(raw, b) == []

    released = go(raw, f"{a}:compensate")
    failed = finished(out_a, raw, a)
    done_b = finished(out_b, raw, b)
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake B"
    assert not failed.is_success
    assert "card declined" in str(failed.error)
    assert failed.rollback_failures == []
    assert done_b.is_success, (done_b, getattr(done_b, "error", None))
    assert whats(raw, a) == ["charge", f"compensate owner={out_a.execution_id}"]
    compensate = [e for e in stored(out_a.execution_id).trace if e["type"] == "compensate"]
    assert [(e["step"], e["ok"], e.get("key")) for e in compensate] == [("charge", True, lock)]
    assert parks(out_b.execution_id) == [("hold", "lock", lock)]
    inside = recorder(redis_url, account)
    assert inside.overlaps == 0
    assert inside.events == [
        (kind, label)
        for label in (f"{a} charge", f"{a} compensate", f"{b} hold")
        for kind in ("enter", "leave")
    ]
    for run in (a, b):
        in_workers(raw, run)
    assert Lock(lock).state().owner is None
