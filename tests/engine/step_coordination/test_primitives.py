"""Semaphore, rate limit, period and ordered lock declared on one step, run in threads.

Each primitive behaves as its reactor-level form narrowed to the step: a semaphore bounds the
step's concurrency, a rate limit is charged per attempt of the step's work, a period skips the
step (and only the step) once its bucket is done, and an ordered lock sequences executions at
the step in the order they reached it while the rest of their workflow is unaffected. Lock and
semaphore together are taken lock first and released semaphore first; rollback never re-takes
an ordered lock.
"""

from __future__ import annotations

import functools
import multiprocessing
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import redis

from py_reactor import (
    Failure,
    FailureResult,
    Lock,
    OrderedLock,
    RateLimit,
    Reactor,
    Result,
    Step,
    configure,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.errors import CoordinationError, RateLimitExceededError
from py_reactor.observability import events as ev
from tests._holds import ordered_position
from tests._overlap import OverlapRecorder
from tests._wait import until
from tests.engine.coordination._helpers import fresh_window, lock_is_free, recorder

#: (key, step, label) of every step body that ran, in order (cleared around every test).
ran: list[tuple[str, str, str]] = []

#: (key, step, label) of every undo that ran (cleared around every test).
undone: list[tuple[str, str, str]] = []

#: What a step body does for (key, step), instead of returning its label (cleared per test).
BEHAVIOUR: dict[tuple[str, str], Callable[[Step], Any]] = {}


@pytest.fixture(autouse=True)
def _records() -> Iterator[None]:
    ran.clear()
    undone.clear()
    BEHAVIOUR.clear()
    yield
    ran.clear()
    undone.clear()
    BEHAVIOUR.clear()


def by_key(values: Mapping[str, Any]) -> str:
    """The key of most declarations here: the step's ``key`` argument."""
    return str(values["key"])


def sequence_of(values: Mapping[str, Any]) -> str:
    """The ordered lock's key: ``seq-<key>``."""
    return f"seq-{values['key']}"


def act(name: str, unit: Step) -> Any:
    """A step body: record that it ran, then do what BEHAVIOUR (or its ``mode``) says."""
    inputs = unit.inputs
    label = str(getattr(inputs, "label", ""))
    ran.append((inputs.key, name, label))
    behaviour = BEHAVIOUR.get((inputs.key, name))
    if behaviour is not None:
        return behaviour(unit)
    if getattr(inputs, "mode", "ok") == "fail":
        return Failure(f"{name} failed", retryable=False)
    return f"{name} {label}".strip()


def runs_of(key: str, name: str) -> list[str]:
    """Labels of the runs whose step ``name`` body ran for ``key``, in order."""
    return [label for k, n, label in ran if k == key and n == name]


def entry(outcome: Any, name: str) -> dict[str, Any]:
    """The last trace entry of step ``name`` (a run, skip or failure)."""
    entries = [e for e in outcome.context.trace if e["step"] == name]
    assert entries, f"no trace entry for {name!r}: {outcome.context.trace}"
    found: dict[str, Any] = entries[-1]
    return found


def in_threads(calls: list[Callable[[], Any]], timeout: float = 20) -> list[Any]:
    """Run each call in its own thread at once; their results, in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result(timeout=timeout) for future in futures]


# -- steps and reactors ------------------------------------------------------------------------


class Before(Step):
    """A first step with an undo, so a later failure shows up as its undo."""

    key: str
    label: str = ""

    def run(self) -> Any:
        return act("before", self)

    def undo(self, result: Any) -> None:
        undone.append((self.inputs.key, "before", self.inputs.label))


class Tail(Step):
    """A step after the coordinated one, with no coordination of its own."""

    key: str
    label: str = ""
    previous: Any = None

    def run(self) -> Any:
        act("tail", self)
        return {"previous": self.inputs.previous}


@with_semaphore(by_key, limit=2, wait=10)
class Slotted(Step):
    key: str

    def run(self) -> Any:
        return act("slotted", self)


class SemaphoreRun(Reactor):
    key: str
    slotted = step(Slotted)
    returns = "slotted"


@with_rate_limit(by_key, limit=2, period="minute")
class Limited(Step):
    key: str
    label: str = ""

    def run(self) -> Any:
        return act("limited", self)


class RateLimitedRun(Reactor):
    key: str
    label: str = ""
    before = step(Before)
    limited = step(Limited, wait_for="before")


@retries(max_attempts=3, backoff="fixed", base_delay=0)
@with_rate_limit(by_key, limit=2, period="minute")
class RetriedLimited(Step):
    key: str

    def run(self) -> Any:
        return act("limited", self)


class RetriedRateLimitedRun(Reactor):
    key: str
    limited = step(RetriedLimited)


@with_period(by_key, every="hour")
class Hourly(Step):
    key: str
    label: str = ""
    mode: str = "ok"

    def run(self) -> Any:
        return act("hourly", self)


class PeriodRun(Reactor):
    key: str
    label: str = ""
    mode: str = "ok"
    hourly = step(Hourly)
    tail = step(Tail, previous=Result("hourly"))
    returns = "tail"


@with_period(by_key, every="hour")
@with_lock(by_key, wait=5)
class HourlyLocked(Step):
    key: str
    label: str = ""

    def run(self) -> Any:
        return act("hourly", self)


class PeriodLockRun(Reactor):
    key: str
    label: str = ""
    hourly = step(HourlyLocked)
    tail = step(Tail, previous=Result("hourly"))


@with_lock(by_key, wait=10)
@with_semaphore(by_key, limit=1, wait=10)
class PairFirst(Step):
    key: str

    def run(self) -> Any:
        return act("first", self)


@with_semaphore(by_key, limit=1, wait=10)  # the other way round: the order taken is fixed
@with_lock(by_key, wait=10)
class PairSecond(Step):
    key: str

    def run(self) -> Any:
        return act("second", self)


class PairRun(Reactor):
    key: str
    first = step(PairFirst)
    second = step(PairSecond, wait_for="first")


class PairReversed(Reactor):
    key: str
    second = step(PairSecond)
    first = step(PairFirst, wait_for="second")


@with_ordered_lock(sequence_of, wait=20)
class Sequenced(Step):
    key: str
    label: str = ""
    mode: str = "ok"

    def run(self) -> Any:
        return act("ordered", self)


@with_ordered_lock(sequence_of, strict=False, wait=20)
class LenientSequenced(Sequenced):
    pass


class OrderedRun(Reactor):
    key: str
    label: str = ""
    mode: str = "ok"
    ordered = step(Sequenced)
    tail = step(Tail, previous=Result("ordered"))


class LenientRun(Reactor):
    key: str
    label: str = ""
    mode: str = "ok"
    ordered = step(LenientSequenced)
    tail = step(Tail, previous=Result("ordered"))


@with_ordered_lock(sequence_of, poison_pill_timeout=1, wait=8)
class QuickToSkip(Step):
    key: str

    def run(self) -> Any:
        return act("ordered", self)


class PoisonRun(Reactor):
    key: str
    ordered = step(QuickToSkip)


@with_ordered_lock(sequence_of, wait=3)
class SequencedWithUndo(Step):
    key: str

    def run(self) -> Any:
        return act("ordered", self)

    def undo(self, result: Any) -> None:
        key = self.inputs.key
        held = list(self.context.held_keys)
        state = OrderedLock(f"seq-{key}").state()
        undone.append((key, "ordered", repr((held, state.in_flight))))


class Boom(Step):
    key: str

    def run(self) -> Any:
        return act("boom", self)


class OrderedThenBoom(Reactor):
    key: str
    ordered = step(SequencedWithUndo)
    boom = step(Boom, wait_for="ordered")


# -- semaphore ---------------------------------------------------------------------------------


def test_a_step_semaphore_lets_limit_runs_into_the_step_at_once(
    key: str, overlap: OverlapRecorder
) -> None:
    """limit=2, wait=10, five runs at once: two at a time inside the step, all of them succeed."""

    def body(unit: Step) -> str:
        with overlap.inside("slotted"):
            time.sleep(0.3)  # the body's duration, not synchronisation
        return "done"

    BEHAVIOUR[(key, "slotted")] = body
    outcomes = in_threads([lambda: SemaphoreRun.run(key=key) for _ in range(5)])
    assert all(o.is_success for o in outcomes), outcomes
    assert overlap.entries == 5
    assert overlap.max_concurrency == 2  # above 1, so the step ran concurrently; never 3
    assert overlap.replayed_max() == 2


def test_a_step_semaphore_is_listed_in_held_keys_while_the_body_runs(key: str) -> None:
    """The body sees ``semaphore:<key>`` in the execution's held keys; it is gone afterwards."""

    def body(unit: Step) -> list[str]:
        return list(unit.context.held_keys)

    BEHAVIOUR[(key, "slotted")] = body
    outcome = SemaphoreRun.run(key=key)
    assert outcome.is_success, outcome
    assert outcome.value == [f"semaphore:{key}"]
    assert outcome.context.held_keys == []


# -- rate limit --------------------------------------------------------------------------------


def test_a_step_rate_limit_admits_limit_runs_then_fails_the_step(
    key: str, raw: redis.Redis
) -> None:
    """limit=2/minute: two runs pass; the third fails at the step, its body never runs, and
    the step before it is undone."""
    fresh_window(raw)
    outcomes = [RateLimitedRun.run(key=key, label=str(n)) for n in range(3)]
    assert [o.is_success for o in outcomes] == [True, True, False], outcomes
    third = outcomes[2]
    assert isinstance(third, FailureResult)
    error = third.error
    assert isinstance(error, RateLimitExceededError)
    assert 0 < error.retry_after <= 60
    assert (error.key, error.step, error.reactor) == (key, "limited", "RateLimitedRun")
    assert third.step_name == "limited"
    assert third.retryable is False
    assert runs_of(key, "limited") == ["0", "1"]
    assert runs_of(key, "before") == ["0", "1", "2"]
    assert undone == [(key, "before", "2")]
    failed = entry(third, "limited")
    assert failed["type"] == "failed"
    assert (failed["refused_by"], failed["primitive"], failed["key"]) == (
        "coordination",
        "rate_limit",
        key,
    )


def test_a_step_rate_limit_is_charged_on_every_attempt(key: str, raw: redis.Redis) -> None:
    """With @retries, a body that fails once then succeeds uses two charges of limit=2/minute."""
    fresh_window(raw)
    attempts: list[int] = []

    def flaky(unit: Step) -> Any:
        attempts.append(1)
        return Failure("first attempt fails") if len(attempts) == 1 else "ok"

    BEHAVIOUR[(key, "limited")] = flaky
    outcome = RetriedRateLimitedRun.run(key=key)
    assert outcome.is_success, outcome
    assert len(attempts) == 2
    assert [e["type"] for e in outcome.context.trace if e["step"] == "limited"] == ["retry", "run"]
    assert RateLimit(key, limit=2, period="minute").usage() == {60: 2}
    after = RetriedRateLimitedRun.run(key=key)  # the window is spent: refused before the body
    assert isinstance(after.error, RateLimitExceededError), after
    assert len(attempts) == 2


def test_a_step_can_use_a_registered_rate_limit_by_name(key: str, raw: redis.Redis) -> None:
    """``with_rate_limit("<name>")`` uses ``configure(rate_limits={name: {"minute": 1}})``."""
    name = f"limit-{key}"
    configure(rate_limits={name: {"minute": 1}})

    @with_rate_limit(name)
    class Named(Step):
        key: str

        def run(self) -> Any:
            return act("named", self)

    class NamedRun(Reactor):
        key: str
        named = step(Named)

    fresh_window(raw)
    first, second = NamedRun.run(key=key), NamedRun.run(key=key)
    assert first.is_success, first
    assert isinstance(second, FailureResult)
    assert isinstance(second.error, RateLimitExceededError)
    assert second.error.key == name
    assert runs_of(key, "named") == [""]


def test_an_unknown_rate_limit_name_fails_the_step_for_good_without_running_it(
    key: str,
) -> None:
    """An unregistered name is a non-retryable failure (even with @retries); the body never runs."""
    name = f"nobody-{key}"

    @retries(max_attempts=3, backoff="fixed", base_delay=0)
    @with_rate_limit(name)
    class Unknown(Step):
        key: str

        def run(self) -> Any:
            return act("unknown", self)

    class UnknownRun(Reactor):
        key: str
        before = step(Before)
        unknown = step(Unknown, wait_for="before")

    rec = recorder()
    outcome = UnknownRun.run(key=key)
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.retryable is False
    assert outcome.step_name == "unknown"
    error = outcome.error
    assert isinstance(error, CoordinationError)
    assert not isinstance(error, RateLimitExceededError)
    assert name in str(error)
    assert "registered" in str(error)
    assert runs_of(key, "unknown") == []
    assert rec.of(ev.StepRetried) == []  # not retried, whatever @retries allows
    assert [e.step for e in rec.of(ev.StepFailed)] == ["unknown"]
    assert [e["type"] for e in outcome.context.trace if e["step"] == "unknown"] == ["failed"]
    assert undone == [(key, "before", "")]


# -- period ------------------------------------------------------------------------------------


def test_a_step_period_skips_the_step_and_the_run_continues(key: str, raw: redis.Redis) -> None:
    """every="hour": the second run skips the step (reason "period"), later steps still run,
    and the run completes."""
    fresh_window(raw, 3600)
    first = PeriodRun.run(key=key, label="0")
    second = PeriodRun.run(key=key, label="1")
    assert first.status == "completed", first
    assert first.value == {"previous": "hourly 0"}
    assert second.status == "completed", second
    assert second.is_success
    assert second.value == {"previous": None}  # the skipped step's value is None
    assert second.results["hourly"] is None
    skipped = entry(second, "hourly")
    assert skipped["type"] == "skipped"
    assert skipped["reason"] == "period"
    assert skipped["coordination"] == {"period": key}
    assert runs_of(key, "hourly") == ["0"]
    assert runs_of(key, "tail") == ["0", "1"]


def test_a_failed_step_does_not_mark_its_period(key: str, raw: redis.Redis) -> None:
    """The bucket is marked only by a success: after a failure the next run does the work."""
    fresh_window(raw, 3600)
    failed = PeriodRun.run(key=key, label="0", mode="fail")
    assert isinstance(failed, FailureResult), failed
    done = PeriodRun.run(key=key, label="1")
    assert done.value == {"previous": "hourly 1"}, done
    skipped = PeriodRun.run(key=key, label="2")
    assert entry(skipped, "hourly")["type"] == "skipped"
    assert runs_of(key, "hourly") == ["0", "1"]


def test_a_run_skipped_by_the_period_recheck_under_the_lock_releases_the_lock(
    key: str, raw: redis.Redis
) -> None:
    """Run B passes the fast period check while run A works, waits for the lock, then finds
    the bucket done: B skips the step and gives the lock back."""
    fresh_window(raw, 3600)
    a_inside, release_a = threading.Event(), threading.Event()

    def body(unit: Step) -> str:
        if unit.inputs.label == "A":
            a_inside.set()
            assert release_a.wait(timeout=10)
        return str(unit.inputs.label)

    BEHAVIOUR[(key, "hourly")] = body
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(PeriodLockRun.run, key=key, label="A")
        assert a_inside.wait(timeout=10)
        second = pool.submit(PeriodLockRun.run, key=key, label="B")
        until(
            lambda: Lock(key).state().waiters == 1, "Lock(key).state().waiters == 1"
        )  # B waits for the lock
        release_a.set()
        done, skipped = first.result(timeout=20), second.result(timeout=20)
    assert done.status == "completed", done
    assert skipped.status == "completed", skipped
    assert (entry(skipped, "hourly")["type"], entry(skipped, "hourly")["reason"]) == (
        "skipped",
        "period",
    )
    assert runs_of(key, "hourly") == ["A"]
    assert skipped.context.held_keys == []
    assert lock_is_free(key)


def test_period_and_lock_let_exactly_one_racing_run_do_the_work(key: str, raw: redis.Redis) -> None:
    """Four runs released together into the same bucket: one body runs, three skip the step."""
    fresh_window(raw, 3600, margin=15)
    start = threading.Barrier(4)

    def body(unit: Step) -> str:
        time.sleep(0.2)  # widens the race: the others arrive while the work is in progress
        return "worked"

    BEHAVIOUR[(key, "hourly")] = body

    def racer(n: int) -> Any:
        start.wait(timeout=10)
        return PeriodLockRun.run(key=key, label=str(n))

    outcomes = in_threads([functools.partial(racer, n) for n in range(4)])
    assert all(o.status == "completed" for o in outcomes), outcomes
    assert len(runs_of(key, "hourly")) == 1
    kinds = sorted(entry(o, "hourly")["type"] for o in outcomes)
    assert kinds == ["run", "skipped", "skipped", "skipped"]
    assert all(
        entry(o, "hourly")["reason"] == "period"
        for o in outcomes
        if entry(o, "hourly")["type"] == "skipped"
    )
    assert len(runs_of(key, "tail")) == 4


# -- lock and semaphore together ---------------------------------------------------------------


def test_lock_and_semaphore_on_steps_run_concurrently_without_deadlock(
    key: str, overlap: OverlapRecorder
) -> None:
    """Two steps declaring the same lock and semaphore (in either decorator order), in runs that
    reach them in opposite orders, all finish, never overlap, and each step takes lock then
    semaphore and releases semaphore then lock."""
    rec = recorder()

    def body(unit: Step) -> str:
        with overlap.inside("pair"):
            time.sleep(0.02)
        return "ok"

    BEHAVIOUR[(key, "first")] = body
    BEHAVIOUR[(key, "second")] = body
    runs = [PairRun, PairReversed] * 3
    outcomes = in_threads([functools.partial(r.run, key=key) for r in runs], timeout=30)
    assert all(o.is_success for o in outcomes), outcomes
    assert overlap.entries == 12
    assert overlap.max_concurrency == 1
    wanted = (ev.LockAcquired, ev.SemaphoreAcquired, ev.SemaphoreReleased, ev.LockReleased)
    for outcome in outcomes:
        for name in ("first", "second"):
            seen = [
                type(e)
                for e in rec.events
                if isinstance(e, wanted)
                and e.execution_id == outcome.execution_id
                and e.step == name
            ]
            assert seen == list(wanted), (name, seen)
            keys = {
                e.key
                for e in rec.events
                if isinstance(e, wanted) and e.execution_id == outcome.execution_id
            }
            assert keys == {key}


# -- ordered lock ------------------------------------------------------------------------------


def _issued(sequence: str) -> int:
    """Positions handed out in the ordered lock's current epoch."""
    return OrderedLock(sequence).state().next_position - 1


def _wait_issued(sequence: str, count: int) -> None:
    """Wait until the ordered lock has handed out ``count`` positions in its current epoch."""
    until(lambda: _issued(sequence) == count, "_issued(sequence) == count")


def test_ordered_step_bodies_pass_one_at_a_time_in_arrival_order(
    key: str, overlap: OverlapRecorder
) -> None:
    """Five runs reach the ordered first step one after the other while the test holds the first
    position; released, their bodies (random 0-0.2 s) never overlap and pass in arrival order."""
    sequence = f"seq-{key}"
    positions: dict[str, int] = {}

    def body(unit: Step) -> str:
        label = unit.inputs.label
        positions[label] = ordered_position(unit.context, "ordered")["number"]
        with overlap.inside(label):
            time.sleep(random.uniform(0, 0.2))
        return str(label)

    BEHAVIOUR[(key, "ordered")] = body
    gate_lock = OrderedLock(sequence)
    gate = gate_lock.take_position()
    labels = [str(n) for n in range(5)]
    with ThreadPoolExecutor(5) as pool:
        futures: list[Future[Any]] = []
        for n, label in enumerate(labels):
            futures.append(pool.submit(OrderedRun.run, key=key, label=label))
            _wait_issued(sequence, n + 2)  # it arrived: its position is taken
        assert ran == []
        gate_lock.wait_turn(gate).release(failed=False)
        outcomes = [f.result(timeout=20) for f in futures]
    assert all(o.is_success for o in outcomes), outcomes
    assert [label for kind, label in overlap.events if kind == "enter"] == labels
    assert overlap.max_concurrency == 1
    assert positions == {label: n + 2 for n, label in enumerate(labels)}
    assert runs_of(key, "tail") != []
    assert OrderedLock(sequence).state().drained


def test_a_later_unordered_step_may_overlap_the_next_runs_ordered_step(key: str) -> None:
    """Run 0 waits in its unordered tail until run 1 is inside the ordered step: only the
    ordered step is sequenced, not the whole run."""
    in_tail = threading.Event()
    next_inside = threading.Event()
    overlapped: list[bool] = []

    def tail(unit: Step) -> Any:
        if unit.inputs.label == "0":
            in_tail.set()
            overlapped.append(next_inside.wait(timeout=3))
        return None

    def ordered(unit: Step) -> str:
        if unit.inputs.label == "1":
            next_inside.set()
        return "ordered"

    BEHAVIOUR[(key, "tail")] = tail
    BEHAVIOUR[(key, "ordered")] = ordered
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(OrderedRun.run, key=key, label="0")
        assert in_tail.wait(timeout=10)
        second = pool.submit(OrderedRun.run, key=key, label="1")
        outcomes = [first.result(timeout=20), second.result(timeout=20)]
    assert all(o.is_success for o in outcomes), outcomes
    assert overlapped == [True]


def _queue_three(reactor: type[Reactor], key: str) -> list[Any]:
    """Hold position 1, queue runs "A" (failing), "B" and "C" as positions 2-4, then let go."""
    sequence = f"seq-{key}"
    gate_lock = OrderedLock(sequence)
    gate = gate_lock.take_position()
    with ThreadPoolExecutor(3) as pool:
        futures: list[Future[Any]] = []
        for n, (label, mode) in enumerate([("A", "fail"), ("B", "ok"), ("C", "ok")]):
            futures.append(pool.submit(reactor.run, key=key, label=label, mode=mode))
            _wait_issued(sequence, n + 2)
        assert ran == []
        gate_lock.wait_turn(gate).release(failed=False)
        outcomes = [f.result(timeout=20) for f in futures]
    assert OrderedLock(sequence).state().drained
    return outcomes


def test_a_strict_ordered_step_is_skipped_after_an_earlier_failure(key: str) -> None:
    """Position 2 fails the ordered step: positions 3 and 4 skip it (reason "ordered_lock"),
    their later steps run and their runs complete."""
    failed, *later = _queue_three(OrderedRun, key)
    assert isinstance(failed, FailureResult), failed
    assert failed.step_name == "ordered"
    for outcome in later:
        assert outcome.status == "completed", outcome
        skipped = entry(outcome, "ordered")
        assert skipped["type"] == "skipped"
        assert skipped["reason"] == "ordered_lock"
        assert outcome.results["ordered"] is None
    assert runs_of(key, "ordered") == ["A"]
    # "tail" is not ordered: B's and C's may run in either order once they passed the gate.
    assert sorted(runs_of(key, "tail")) == ["B", "C"]


def test_a_lenient_ordered_step_runs_every_position(key: str) -> None:
    """With strict=False, the positions after a failed one still run the ordered step."""
    failed, *later = _queue_three(LenientRun, key)
    assert isinstance(failed, FailureResult), failed
    assert all(o.status == "completed" for o in later), later
    assert all(entry(o, "ordered")["type"] == "run" for o in later)
    assert runs_of(key, "ordered") == ["A", "B", "C"]
    assert sorted(runs_of(key, "tail")) == ["B", "C"]  # tail is not ordered: any order


def _take_and_exit(url: str, sequence: str, taken: Any) -> None:
    """Child process: take a position (it heartbeats only while this process lives), exit."""
    configure(redis_url=url)
    position = OrderedLock(sequence, poison_pill_timeout=1).take_position()
    taken.put(position.number)


def test_a_position_abandoned_without_heartbeat_is_skipped_after_the_poison_pill(
    key: str, redis_url: str
) -> None:
    """A process took position 1 and died: the step (poison_pill_timeout=1, wait=8) skips it
    after about a second and the run proceeds."""
    sequence = f"seq-{key}"
    ctx = multiprocessing.get_context("spawn")
    taken = ctx.Queue()
    child = ctx.Process(target=_take_and_exit, args=(redis_url, sequence, taken))
    child.start()
    try:
        assert taken.get(timeout=60) == 1
    finally:
        child.join(timeout=60)
        taken.close()
        taken.join_thread()
    assert child.exitcode == 0
    assert OrderedLock(sequence).state().in_flight == 1  # the dead position still blocks
    started = time.monotonic()
    outcome = PoisonRun.run(key=key)
    elapsed = time.monotonic() - started
    assert outcome.is_success, outcome
    assert runs_of(key, "ordered") == [""]
    assert elapsed < 5
    assert OrderedLock(sequence).state().drained


def test_rollback_never_re_takes_the_ordered_lock(key: str) -> None:
    """A later step fails while another holder has the ordered turn: the ordered step's undo
    runs at once, takes no position and holds no ordered lock."""
    sequence = f"seq-{key}"
    other = OrderedLock(sequence)
    turns: list[Any] = []

    def boom(unit: Step) -> Any:
        turns.append(other.wait_turn(other.take_position()))  # someone else's turn now
        return Failure("boom", retryable=False)

    BEHAVIOUR[(key, "boom")] = boom
    try:
        outcome = OrderedThenBoom.run(key=key)
        during = OrderedLock(sequence).state()  # the other holder still has its turn
    finally:
        for turn in turns:
            turn.release(failed=False)
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.step_name == "boom"
    assert outcome.rollback_failures == []
    assert undone == [(key, "ordered", repr(([], 1)))]  # only the other holder is in flight
    undo = entry(outcome, "ordered")
    assert (undo["type"], undo["ok"]) == ("undo", True)
    assert "key" not in undo
    # the run drained its epoch; in the new one only the other holder took a position
    assert (during.next_position, during.in_flight) == (2, 1)  # the undo took none
    assert OrderedLock(sequence).state().drained
