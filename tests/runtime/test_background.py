"""Background execution on the thread worker: hand-off, parking instead of failing, waking on
release, the park cap, holds kept across a park, rate limits and retries in a worker.

Real store (the session's private redis-server), real threads; every park is observed through
the stored record, never assumed from timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from py_reactor import (
    Execution,
    HaltedResult,
    Lock,
    Middleware,
    RateLimit,
    Reactor,
    background,
    configure,
    find,
    step,
    workers,
)
from py_reactor.errors import DefinitionError, LockAcquisitionError
from py_reactor.observability import events as ev
from tests._overlap import OverlapRecorder
from tests._wait import status, until
from tests.engine.coordination._helpers import fresh_window
from tests.runtime import _reactors as r

#: The park timer of this module's runs (the tests of the cap set their own): far longer than
#: WOKEN_WITHIN, so a run that completes within WOKEN_WITHIN of a release was woken by it.
PARK_DELAY = 30.0

#: How long after a release a woken run may take to complete (a loaded 2-core box included).
WOKEN_WITHIN = 10.0


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=PARK_DELAY, park_jitter=0.0)
    yield
    r.HOOKS.clear()


def ran(key: str) -> list[str]:
    calls: list[str] = []
    r.HOOKS[key] = lambda name, **_: calls.append(name)
    return calls


# -- hand-off ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reactor", "in_caller"), [(r.Whole, {}), (r.After, {"first": 4}), (r.Before, {"first": 4})]
)
def test_run_returns_dispatched_at_once_and_wait_returns_the_outcome(
    reactor: type[Reactor], in_caller: dict[str, int], key: str
) -> None:
    """@background, after= and before=: the caller gets a DispatchedResult with the results of
    the steps that ran in it; wait() returns the terminal outcome; find() reads it back."""
    calls = ran(key)
    out = reactor.run(key=key, n=3)
    assert out.status == "dispatched"
    assert dict(out.results) == in_caller
    done = out.wait(timeout=10)
    assert done.is_success, done
    assert done.value == 8
    assert calls == ["first", "second"]
    found = find(out.execution_id)
    assert found is not None
    assert found.status == "completed"
    assert found.results == {"first": 4, "second": 8}
    assert found.outcome is not None
    assert found.outcome.value == 8
    assert reactor.find(out.execution_id) is not None


def test_bad_inputs_fail_in_the_caller_and_dispatch_nothing(key: str) -> None:
    outcome = r.Whole.run(key=key, n="not a number")
    assert outcome.status == "failed"
    assert find(outcome.execution_id) is None


def test_hand_off_mistakes_are_refused_at_class_definition() -> None:
    with pytest.raises(DefinitionError, match="after= or before="):
        background(after="a", before="b")
    with pytest.raises(DefinitionError, match="no step 'nope'"):
        background(before="nope")(_module_level_copy())
    with pytest.raises(DefinitionError, match="already has a hand-off"):
        background(r.Whole)
    with pytest.raises(DefinitionError, match="inside a function"):

        @background
        class Local(Reactor):
            @step
            def a() -> int:
                return 1


def _module_level_copy() -> type[Reactor]:
    cls = type("Copy", (Reactor,), {"a": step(lambda: 1)})
    cls.__qualname__ = "Copy"
    return cls


# -- park instead of fail, wake on release -------------------------------------------------------


class Recorder(Middleware):
    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    def on_step_parked(self, event: ev.StepParked) -> None:
        self.events.append(event)

    def on_reactor_parked(self, event: ev.ReactorParked) -> None:
        self.events.append(event)

    def on_step_failed(self, event: ev.StepFailed) -> None:
        self.events.append(event)

    def on_reactor_failed(self, event: ev.ReactorFailed) -> None:
        self.events.append(event)


def test_a_step_that_meets_a_held_lock_parks_and_the_release_wakes_it(key: str) -> None:
    """Status "waiting" with waiting_on, a "parked" trace entry and a StepParked event (no
    failure event); the release of the key resumes it at once (well before the 30 s backstop);
    the step before it is not re-run."""
    recorder = Recorder()
    configure(middleware=[recorder])
    calls = ran(key)
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    out = r.LockedStep.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    parked = find(out.execution_id)
    assert parked is not None
    assert parked.waiting_on is not None
    assert parked.waiting_on["step"] == "charge"
    assert parked.waiting_on["primitive"] == "lock"
    assert parked.waiting_on["key"] == key
    assert parked.waiting_on["attempt"] == 1
    assert [e["type"] for e in parked.trace] == ["run", "parked"]
    assert [type(e) for e in recorder.events] == [ev.StepParked]
    released = time.monotonic()
    held.release()
    done = out.wait(timeout=WOKEN_WITHIN)
    assert time.monotonic() - released < WOKEN_WITHIN  # woken by the release, not the timer
    assert done.is_success, done
    assert calls == ["reserve", "charge"]
    assert [type(e) for e in recorder.events] == [ev.StepParked]
    assert Lock(key).state().owner is None


def test_two_contending_runs_both_complete_only_the_loser_parks_nothing_overlaps(
    key: str, redis_url: str
) -> None:
    """Two background runs want one step lock: both complete, one parks once, no compensate
    or undo runs, and the two bodies never overlap."""
    charges = OverlapRecorder(redis_url, f"charge:{key}")
    calls: list[str] = []

    def body(name: str, **_: Any) -> None:
        calls.append(name)
        if name == "charge":
            with charges.inside(threading.current_thread().name):
                time.sleep(0.3)

    r.HOOKS[key] = body
    first, second = r.LockedStep.run(key=key), r.LockedStep.run(key=key)
    done = [first.wait(timeout=20), second.wait(timeout=20)]
    assert all(o.is_success for o in done), done
    parks = sorted(find(o.execution_id).parks for o in (first, second))  # type: ignore[union-attr]
    assert parks == [0, 1]
    assert calls.count("charge") == 2
    assert "compensate charge" not in calls
    assert "undo reserve" not in calls
    assert (charges.entries, charges.max_concurrency, charges.overlaps) == (2, 1, 0)


def test_holds_taken_before_a_park_stay_held_while_parked(key: str) -> None:
    """The reactor's own lock stays held while its step is parked: nobody else takes it."""
    ran(key)
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    out = r.LockedBoth.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    with pytest.raises(LockAcquisitionError):
        Lock(f"outer:{key}", owner="another").acquire()
    outer = Lock(f"outer:{key}").state()
    assert outer.owner == out.execution_id
    held.release()
    assert out.wait(timeout=WOKEN_WITHIN).is_success
    assert Lock(f"outer:{key}").state().owner is None
    trace = find(out.execution_id).trace  # type: ignore[union-attr]
    assert [e["type"] for e in trace] == ["parked", "run"]


def test_reactor_level_contention_parks_with_step_none(key: str) -> None:
    recorder = Recorder()
    configure(middleware=[recorder])
    ran(key)
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    out = r.LockedReactor.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    waiting = find(out.execution_id).waiting_on  # type: ignore[union-attr]
    assert waiting is not None
    assert waiting["step"] is None
    assert waiting["primitive"] == "lock"
    assert [type(e) for e in recorder.events] == [ev.ReactorParked]
    held.release()
    assert out.wait(timeout=WOKEN_WITHIN).is_success


def test_the_park_cap_fails_the_run_naming_key_primitive_and_parks(key: str) -> None:
    """park_max_attempts=2 with the key held throughout: the third contention fails the run
    with LockAcquisitionError naming the lock, the key and the parks; reserve is undone, the
    failed charge is not compensated (its work never ran) and nothing is left held."""
    configure(park_max_attempts=2, park_delay=0.05, park_jitter=0.0)
    calls = ran(key)
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    try:
        done = r.LockedStep.run(key=key).wait(timeout=10)
    finally:
        held.release()
    assert not done.is_success
    assert done.exception_class == "py_reactor.errors.LockAcquisitionError"
    assert isinstance(done.error, LockAcquisitionError)
    assert key in str(done.error)
    assert "2 park(s)" in str(done.error)
    assert calls == ["reserve", "undo reserve"]
    found = find(done.execution_id)
    assert found is not None
    assert found.holds == []


class ReleaseAfterParks(Middleware):
    """Records each step park; releases a step's held key at its ``after[step]``-th park (the
    free key then makes the park due at once)."""

    def __init__(self, holds: dict[str, Any], after: dict[str, int]) -> None:
        self.holds, self.after = holds, after
        self.parks: list[tuple[str | None, int]] = []

    def on_step_parked(self, event: ev.StepParked) -> None:
        self.parks.append((event.step, event.attempt))
        if event.step is not None and self.after.get(event.step) == event.attempt:
            self.holds.pop(event.step).release()


def _two_held_keys(key: str) -> dict[str, Any]:
    return {
        step: Lock(f"{key}:{part}", owner="someone-else", ttl=30).acquire()
        for step, part in (("first", "a"), ("second", "b"))
    }


def test_the_park_cap_counts_per_step_and_resets_when_the_step_gets_in(key: str) -> None:
    """park_max_attempts=2: each of two locked steps parks twice before it gets in, four parks
    in all, and the run completes (the count of the first does not carry to the second)."""
    holds = _two_held_keys(key)
    watcher = ReleaseAfterParks(holds, {"first": 2, "second": 2})
    configure(park_max_attempts=2, park_delay=0.05, park_jitter=0.0, middleware=[watcher])
    calls = ran(key)
    try:
        done = r.TwoLocked.run(key=key).wait(timeout=20)
    finally:
        for hold in holds.values():
            hold.release()
    assert done.is_success, done
    assert calls == ["first", "second"]
    parks = [("first", 1), ("first", 2), ("second", 1), ("second", 2)]
    assert watcher.parks == parks
    found = find(done.execution_id)
    assert found is not None
    assert [(e["step"], e["attempt"]) for e in found.trace if e["type"] == "parked"] == parks
    assert found.parks == 4  # the total, for display


def test_a_step_that_parks_past_the_cap_fails_naming_primitive_key_and_its_parks(
    key: str,
) -> None:
    """park_max_attempts=2: ``first`` parks once and gets in; ``second`` parks twice (its own
    count), and its third contention fails the run with the cap's message."""
    holds = _two_held_keys(key)
    watcher = ReleaseAfterParks(holds, {"first": 1})
    configure(park_max_attempts=2, park_delay=0.05, park_jitter=0.0, middleware=[watcher])
    calls = ran(key)
    try:
        done = r.TwoLocked.run(key=key).wait(timeout=20)
    finally:
        for hold in holds.values():
            hold.release()
    assert not done.is_success
    assert isinstance(done.error, LockAcquisitionError)
    message = str(done.error)
    assert f"the lock '{key}:b' was still busy after 2 park(s)" in message, message
    assert watcher.parks == [("first", 1), ("second", 1), ("second", 2)]
    assert calls == ["first"]


def test_a_rate_limited_step_parks_for_retry_after_and_is_charged_once(
    key: str, raw: redis.Redis
) -> None:
    """1 call per 2 s: the second run parks until the window reopens (not the 30 s timer), and
    each run is counted once."""
    from py_reactor.storage import keys

    calls = ran(key)

    def charged(value: float) -> str | None:
        """The count of the window ``value`` (a call's time) fell in (read before it expires)."""
        return raw.get(keys.rate_limit_counter(key, 2, int(value // 2)))

    fresh_window(raw, 2, margin=1.5)  # both runs start in one window: the second must park
    first = r.Limited.run(key=key).wait(timeout=10)
    assert first.is_success, first
    assert charged(first.value) == "1"
    second = r.Limited.run(key=key)
    until(lambda: status(second.execution_id) == "waiting", "the park")
    waiting = find(second.execution_id).waiting_on  # type: ignore[union-attr]
    assert waiting is not None
    assert waiting["primitive"] == "rate_limit"
    assert waiting["until"] - time.time() <= 2.5
    done = second.wait(timeout=10)
    assert done.is_success, done
    assert charged(done.value) == "1"
    assert int(done.value // 2) == int(first.value // 2) + 1  # ran in the very next window
    assert calls == ["call", "call"]
    trace = find(second.execution_id).trace  # type: ignore[union-attr]
    assert [e["type"] for e in trace if e["type"] == "parked"] == ["parked"], trace


def test_a_rate_limit_parks_instead_of_sleeping_its_wait_on_the_worker_thread(
    key: str, raw: redis.Redis
) -> None:
    """A full window with a declared wait=30: the run parks (primitive "rate_limit") for its
    retry_after instead of sleeping on the worker's one thread, which serves another run
    meanwhile; it completes once the window rolls over."""
    workers.stop()
    configure(worker_threads=1)
    calls = ran(key)
    other = f"{key}-other"
    ran(other)
    window = 4  # as SlowLimited declares: the test spends the window's one call first
    fresh_window(raw, window, margin=3.0)  # room for the park and the quick run, on its clock
    RateLimit(key, limit=1, period=window).acquire()
    out = r.SlowLimited.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    waiting = find(out.execution_id).waiting_on  # type: ignore[union-attr]
    assert waiting is not None
    assert (waiting["step"], waiting["primitive"], waiting["key"]) == ("call", "rate_limit", key)
    assert waiting["until"] - time.time() <= window
    quick = r.Whole.run(key=other, n=1).wait(timeout=5)
    assert quick.is_success, quick
    assert status(out.execution_id) == "waiting"  # the thread was free: it is still parked
    done = out.wait(timeout=window + 10)
    assert done.is_success, done
    assert calls == ["call"]
    workers.stop()


def test_a_busy_period_claim_parks_and_the_claims_end_wakes_it(key: str) -> None:
    """A run of a daily period step holds the bucket's claim: a second run parks on it
    (primitive "period", not blocking a thread up to the period's 60 s wait); the first run's
    success ends the claim and wakes it at once (a 30 s park timer), and it skips the step."""
    inside, leave = threading.Event(), threading.Event()
    calls: list[str] = []

    def body(name: str, **_: Any) -> None:
        calls.append(name)
        inside.set()
        assert leave.wait(timeout=30)

    r.HOOKS[key] = body
    try:
        first = r.Nightly.run(key=key)
        until(inside.is_set, "the first run inside its claim")
        second = r.Nightly.run(key=key)
        until(lambda: status(second.execution_id) == "waiting", "the park")
        waiting = find(second.execution_id).waiting_on  # type: ignore[union-attr]
        assert waiting is not None
        assert (waiting["step"], waiting["primitive"]) == ("report", "period")
        assert waiting["key"] == f"nightly:{key}"
        released = time.monotonic()
    finally:
        leave.set()
    assert first.wait(timeout=10).is_success
    done = second.wait(timeout=WOKEN_WITHIN)
    assert time.monotonic() - released < WOKEN_WITHIN  # woken by the claim's end, not the timer
    assert done.status == "completed", done
    assert calls == ["report"]
    trace = find(second.execution_id).trace  # type: ignore[union-attr]
    kinds = [(e["type"], e.get("reason")) for e in trace]
    assert kinds == [("parked", None), ("skipped", "period")]


def test_a_retry_in_a_worker_waits_in_the_parked_set_not_in_a_thread(key: str) -> None:
    """One worker thread: while Flaky waits out its 1 s backoff, another run is served."""
    workers.stop()
    configure(worker_threads=1)
    tries: list[str] = []
    r.HOOKS[key] = r.fail_first(tries)
    other = f"{key}-other"
    ran(other)
    flaky = r.Flaky.run(key=key)
    until(lambda: status(flaky.execution_id) == "waiting", "the retry's park")
    quick = r.Whole.run(key=other, n=1).wait(timeout=5)
    assert quick.is_success
    assert status(flaky.execution_id) == "waiting"  # still waiting out its backoff
    done = flaky.wait(timeout=10)
    assert done.is_success, done
    assert tries == ["attempt", "attempt"]
    trace = [e["type"] for e in find(flaky.execution_id).trace]  # type: ignore[union-attr]
    assert trace == ["retry", "run"]
    workers.stop()


# -- ordered locks -------------------------------------------------------------------------------


def test_out_of_turn_in_the_caller_fails_at_once_without_poisoning_the_chain(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step-level ordered lock with no wait=, in the calling process: out of turn it fails
    at once with OrderedLockWaitError (never retried, never waited for: one turn check and no
    wait on the store); once the line moves on, the next run passes normally (strict mode did
    not short-circuit it)."""
    from py_reactor import OrderedLock
    from py_reactor.errors import OrderedLockWaitError
    from py_reactor.storage import current_store

    calls = ran(key)
    line = OrderedLock(f"seq:{key}")
    first = line.take_position()
    store = current_store()
    asked: list[str] = []
    for name in ("ordered_lock_turn", "ordered_lock_wait"):
        real = getattr(store, name)
        spy = lambda *a, _name=name, _real=real, **k: (asked.append(_name), _real(*a, **k))[1]  # noqa: E731
        monkeypatch.setattr(store, name, spy)
    refused = r.OrderedInCaller.run(key=key)
    monkeypatch.undo()
    assert asked == ["ordered_lock_turn"]
    assert not refused.is_success
    assert isinstance(refused.error, OrderedLockWaitError)
    assert calls == []
    line.wait_turn(first).release(failed=False)
    passed = r.OrderedInCaller.run(key=key)
    assert passed.is_success, passed
    assert passed.value == "passed"
    assert calls == ["ordered"]


def test_an_ordered_step_in_a_worker_parks_uncapped_until_its_turn(key: str) -> None:
    """Out of turn in a worker: it parks (primitive "ordered_lock") without spending the park
    cap (a cap of 1 would fail a second counted park), keeps its position, and passes when the
    turn comes."""
    from py_reactor import OrderedLock

    configure(park_max_attempts=1, park_delay=0.1, park_jitter=0.0)
    ran(key)
    line = OrderedLock(f"seq:{key}")
    first = line.take_position()
    out = r.OrderedStep.run(key=key)

    def parked_rounds() -> int:
        found = find(out.execution_id)
        return 0 if found is None else sum(e["type"] == "parked" for e in found.trace)

    # Several backstop rounds: each woke the run, which met the turn still taken and parked
    # again; none counted.
    until(lambda: parked_rounds() >= 3, "three rounds of parks on the ordered lock")
    found = find(out.execution_id)
    assert found is not None
    assert found.status == "waiting"
    assert found.waiting_on is not None
    assert found.waiting_on["primitive"] == "ordered_lock"
    assert found.parks == 0
    positions = [h["data"]["number"] for h in found.holds if h["primitive"] == "ordered_lock"]
    assert positions == [2]
    line.wait_turn(first).release(failed=False)
    done = out.wait(timeout=10)
    assert done.is_success, done
    assert line.state().drained


def test_reactor_level_ordered_positions_follow_dispatch_order(key: str) -> None:
    """Five background runs of a reactor-level ordered lock run in the order run() dispatched
    them, whatever order the worker threads pick them up in."""
    seen: list[str] = []
    r.HOOKS[key] = lambda name, label, **_: seen.append(label)
    outs = [r.OrderedReactor.run(key=key, label=str(n)) for n in range(5)]
    # Each position was taken by run() itself, in dispatch order, before any worker ran it.
    taken = [
        (rec.data["epoch"], rec.data["number"])
        for out in outs
        for rec in out.context.holds
        if rec.primitive == "ordered_lock"
    ]
    assert len(taken) == 5
    assert taken == sorted(taken)
    for out in outs:
        assert out.wait(timeout=20).is_success
    assert seen == ["0", "1", "2", "3", "4"]


TERMINAL = ("completed", "failed", "halted", "aborted", "cancelled")


def settled(execution_id: str, timeout: float) -> Execution:
    """The stored execution once it reached a terminal status."""
    until(lambda: status(execution_id) in TERMINAL, f"{execution_id} ended", timeout=timeout)
    found = find(execution_id)
    assert found is not None
    return found


def test_an_ordered_step_whose_position_lapsed_while_parked_is_skipped_not_parked_again(
    key: str,
) -> None:
    """The first run parks for its retry (4 s) past poison_pill_timeout (1 s); the second run
    skips the silent position, passes and ends the batch. Back in a worker, the first run's
    ordered step is skipped (reason "ordered_lock_stale_batch") and the run goes on: it never
    parks on the ordered lock (it used to park there every park_delay, for ever)."""
    from py_reactor import OrderedLock

    configure(park_delay=0.1, park_jitter=0.0)
    tries: list[str] = []
    r.HOOKS[key] = r.fail_first(tries)
    first = r.OrderedRetry.run(key=key)
    until(lambda: status(first.execution_id) == "waiting", "the retry's park")
    second = r.OrderedRetry.run(key=key).wait(timeout=10)
    assert second.is_success, second
    assert OrderedLock(f"seq:{key}").state().drained  # the first run's batch has ended
    found = settled(first.execution_id, timeout=10)
    parks = [e for e in found.trace if e["type"] == "parked"]
    assert (found.status, len(parks)) == ("completed", 0)
    skips = [(e["step"], e["reason"]) for e in found.trace if e["type"] == "skipped"]
    assert skips == [("ordered", "ordered_lock_stale_batch")]
    assert tries == ["ordered", "ordered", "after", "after"]  # its retry never ran unordered
    assert not found.holds


def test_a_reactor_whose_ordered_position_lapsed_while_parked_halts_not_parked_again(
    key: str,
) -> None:
    """The same at reactor level: the first run, back from its retry's park after its batch
    ended, halts with reason "ordered_lock_stale_batch" and parks no more."""
    from py_reactor import OrderedLock

    configure(park_delay=0.1, park_jitter=0.0)
    tries: list[str] = []
    r.HOOKS[key] = r.fail_first(tries)
    first = r.OrderedReactorRetry.run(key=key)
    until(lambda: status(first.execution_id) == "waiting", "the retry's park")
    second = r.OrderedReactorRetry.run(key=key).wait(timeout=10)
    assert second.is_success, second
    assert OrderedLock(f"seq:{key}").state().drained
    found = settled(first.execution_id, timeout=10)
    parks = [e for e in found.trace if e["type"] == "parked"]
    assert (found.status, len(parks)) == ("halted", 0)
    assert isinstance(found.outcome, HaltedResult)
    assert found.outcome.reason == "ordered_lock_stale_batch"
    assert tries == ["attempt", "attempt"]  # the first run's retry never ran
    assert not found.holds


def test_a_composed_child_parks_the_whole_execution_and_resumes_inside_the_child(
    key: str,
) -> None:
    """The child's step meets a held lock in a worker: the execution parks with step
    "kid.charge" (in waiting_on and the root trace); on release it resumes inside the child,
    whose first step is not run again."""
    calls = ran(key)
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    out = r.Parent.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    found = find(out.execution_id)
    assert found is not None
    assert found.waiting_on is not None
    assert found.waiting_on["step"] == "kid.charge"
    assert [e["step"] for e in found.trace if e["type"] == "parked"] == ["kid.charge"]
    held.release()
    done = out.wait(timeout=10)
    assert done.is_success, done
    assert done.value == "charged"
    assert calls == ["before", "kid prepare", "kid charge", "after"]


def test_a_step_raising_systemexit_in_a_worker_ends_aborted_not_rerun(
    key: str, raw: redis.Redis
) -> None:
    """An interrupt inside a worker's step is stored as aborted (no rollback ran), once."""
    from py_reactor.storage.executions import LEASES_KEY

    calls: list[str] = []

    def leave(name: str, **_: Any) -> None:
        calls.append(name)
        if name == "second":
            raise SystemExit(3)

    r.HOOKS[key] = leave
    configure(execution_lease=0.5)
    out = r.Whole.run(key=key, n=1)
    until(lambda: status(out.execution_id) == "aborted", "the abort")
    assert raw.zscore(LEASES_KEY, out.execution_id) is None  # no lease left to lapse
    time.sleep(1.0)  # two leases: a lease left behind would have lapsed by now
    # Two recovery passes, the ones that would re-run a run left "running": neither takes it.
    for _ in range(2):
        due, recovered = workers.sweep()
        assert out.execution_id not in due + recovered
    assert calls == ["first", "second"]
    assert status(out.execution_id) == "aborted"


def test_a_hand_off_reports_the_reactor_started_once(key: str) -> None:
    class Starts(Middleware):
        def __init__(self) -> None:
            self.count = 0

        def on_reactor_started(self, event: ev.ReactorStarted) -> None:
            self.count += 1

    starts = Starts()
    configure(middleware=[starts])
    ran(key)
    assert r.After.run(key=key, n=1).wait(timeout=10).is_success
    assert starts.count == 1


def test_a_renewal_that_comes_after_the_park_puts_no_lease_back(key: str) -> None:
    """The thread worker renews the leases it saw running; one that parked meanwhile must not
    get its lease back (wakes could not claim it until the lease lapsed)."""
    from py_reactor import workers
    from py_reactor.storage import current_store, keys
    from py_reactor.storage.executions import (
        INDEX_KEY,
        LEASES_KEY,
        ExecutionStore,
        record_key,
    )

    DUE_KEY, READY_KEY = keys.due("tests"), keys.ready("tests")

    # This test plays the worker by hand: a live thread worker would claim the record first
    # (and fail it, since ``tests:Nothing`` cannot be imported).
    workers.stop()
    executions = ExecutionStore(current_store())
    execution_id = f"renew-{key}"
    client = current_store().client  # type: ignore[attr-defined]
    assert executions.create(execution_id, "tests:Nothing", "{}", "pending", namespace="tests")
    try:
        epoch = executions.claim(execution_id, "me", 30)
        assert epoch == 1
        assert executions.renew(execution_id, epoch, 30)
        assert executions.checkpoint(execution_id, epoch, "{}", "waiting", due_in=5)
        assert not executions.renew(execution_id, epoch, 30)
        assert client.zscore(LEASES_KEY, execution_id) is None
    finally:
        client.delete(record_key(execution_id))
        client.zrem(DUE_KEY, execution_id)
        client.zrem(INDEX_KEY, execution_id)
        client.lrem(READY_KEY, 0, execution_id)


@pytest.mark.parametrize("reactor", [r.Unstorable, r.UnstorableBeforeHandOff])
def test_a_result_json_cannot_hold_fails_the_run_and_rolls_it_back(
    reactor: type[Reactor], key: str
) -> None:
    """In a worker (or at the hand-off, in the caller) a result that cannot be stored fails
    the run with SerializationError, and the completed steps, that one included, are undone."""
    from py_reactor.errors import SerializationError

    calls = ran(key)
    out = reactor.run(key=key)
    done = out.wait(timeout=10) if out.status == "dispatched" else out
    assert not done.is_success
    assert isinstance(done.error, SerializationError)
    assert "'opaque'" in str(done.error)
    assert calls == ["first", "opaque", "undo opaque", "undo first"]


def test_a_full_semaphore_parks_the_step_and_a_freed_slot_wakes_it_period_marked_once(
    key: str,
) -> None:
    """The one slot is taken: ``send`` parks on the semaphore (not a failure) and the slot's
    release wakes it; ``digest``, done before the park, ran once and its daily bucket was
    marked once: the resumed run is not charged the period again."""
    from py_reactor import Period, Semaphore

    calls = ran(key)
    slot = Semaphore(key, limit=1, owner="someone-else").acquire()
    out = r.Mailer.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    waiting = find(out.execution_id).waiting_on  # type: ignore[union-attr]
    assert waiting is not None
    assert (waiting["step"], waiting["primitive"], waiting["key"]) == ("send", "semaphore", key)
    released = time.monotonic()
    slot.release()
    done = out.wait(timeout=WOKEN_WITHIN)
    assert time.monotonic() - released < WOKEN_WITHIN  # woken by the release, not the timer
    assert done.is_success, done
    assert calls == ["digest", "send"]
    assert Period(f"daily:{key}", every="day").is_done()
    again = r.Mailer.run(key=key).wait(timeout=10)
    assert again.is_success
    assert calls == ["digest", "send", "send"]  # the bucket is done: digest is skipped


def test_every_outcome_waits_so_run_then_wait_reads_the_same_either_way(key: str) -> None:
    """A run that fails before its hand-off returns its failure, whose ``wait()`` is itself; a
    dispatched one waits for its worker."""
    from py_reactor.engine.results import DispatchedResult, FailureResult

    failed = r.After.run(key=key, n="not a number")  # invalid inputs: nothing dispatched
    assert isinstance(failed, FailureResult)
    assert failed.wait(timeout=1) is failed
    dispatched = r.After.run(key=key, n=1)
    assert isinstance(dispatched, DispatchedResult)
    assert dispatched.wait(timeout=10).value == 4
