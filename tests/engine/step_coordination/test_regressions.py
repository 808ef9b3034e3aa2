"""Regressions found by review: each test failed on the code before its fix."""

from __future__ import annotations

import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from py_reactor import (
    Lock,
    Middleware,
    Reactor,
    Step,
    configure,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
)
from py_reactor.coordination.ordered_lock import OrderedLock
from py_reactor.engine.context import Context
from py_reactor.engine.executor import execute
from tests._overlap import OverlapRecorder
from tests._wait import until
from tests.engine.coordination._helpers import lock_is_free

SENT: list[str] = []


@with_lock(lambda a: f"{a['key']}-lock", wait=10)
@with_period(lambda a: f"{a['key']}-period", every="day")
class SendDigest(Step):
    """Once a day per key, under a lock; the body waits until every racer has arrived."""

    key: str

    def run(self) -> Any:
        SENT.append(self.inputs.key)
        return "sent"


class Digest(Reactor):
    key: str
    send = step(SendDigest)


def test_losing_the_period_race_under_the_lock_releases_the_lock(key: str) -> None:
    """Racers that find the bucket claimed after taking the lock skip and release it."""
    SENT.clear()
    racers = 6
    start = threading.Barrier(racers, timeout=10)

    def race() -> Any:
        start.wait()
        return Digest.run(key=key)

    with ThreadPoolExecutor(racers) as pool:
        outcomes = list(pool.map(lambda _: race(), range(racers)))
    assert [o.status for o in outcomes] == ["completed"] * racers
    assert [key] == SENT
    assert lock_is_free(f"{key}-lock")


ORDER: list[str] = []


@with_ordered_lock(lambda a: a["key"], wait=5)
class Sequenced(Step):
    key: str
    nested: bool = False

    def run(self) -> Any:
        ORDER.append("outer" if self.inputs.nested else "inner")
        if self.inputs.nested:
            inner = Sequenced.invoke({"key": self.inputs.key})
            return inner.status
        return "done"


@with_ordered_lock(lambda inputs: inputs["key"], wait=5)
class SequencedReactor(Reactor):
    key: str

    @step()
    def inner(key: str) -> str:
        ORDER.append("inner")
        return "done"


def test_a_nested_invoke_re_enters_the_ordered_turn_its_execution_holds(key: str) -> None:
    """An ordered step whose body invokes itself on the same key does not wait on itself."""
    ORDER.clear()
    outcome = Sequenced.invoke({"key": key, "nested": True})
    assert outcome.status == "completed", outcome
    assert outcome.value == "completed"
    assert ORDER == ["outer", "inner"]


@with_ordered_lock(lambda inputs: inputs["key"], wait=5)
class OrderedOuter(Reactor):
    key: str

    @step()
    def outer(key: str) -> Any:
        ORDER.append("outer")
        return SequencedReactor.run(key=key).status

    returns = "outer"


def test_a_nested_run_re_enters_the_ordered_turn_its_execution_holds(key: str) -> None:
    """A reactor holding ordered turn K whose step runs another reactor on K completes."""
    ORDER.clear()
    outcome = OrderedOuter.run(key=key)
    assert outcome.status == "completed", outcome
    assert outcome.value == "completed"
    assert ORDER == ["outer", "inner"]
    assert SequencedReactor.run(key=key).status == "completed"  # the sequence moved on


# -- ownership never crosses to another thread, even with a copied context -------------------

#: The overlap recorder of the test running, by key (who is inside the locked work).
INSIDE: dict[str, OverlapRecorder] = {}


@with_lock(lambda inputs: inputs["key"], wait=10)
class LockedChild(Reactor):
    key: str

    @step()
    def work(key: str) -> str:
        with INSIDE[key].inside(threading.current_thread().name) as now:
            both_in.wait(0.5)  # gives a second thread that wrongly shares the hold time to enter
            return f"saw {now}"

    returns = "work"


both_in = threading.Event()


class FansOut(Reactor):
    key: str

    @step()
    def fan(key: str) -> list[str]:
        with ThreadPoolExecutor(2) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, LockedChild.run, key=key)
                for _ in range(2)
            ]
            return [f.result().value for f in futures]

    returns = "fan"


def test_nested_runs_in_copied_contexts_on_other_threads_still_exclude_each_other(
    key: str, overlap: OverlapRecorder
) -> None:
    """Two nested runs handed to pool threads with a copied context are two owners."""
    INSIDE[key] = overlap
    outcome = FansOut.run(key=key)
    assert outcome.status == "completed", outcome
    assert sorted(outcome.value) == ["saw 1", "saw 1"]
    assert overlap.entries == 2
    assert overlap.max_concurrency == 1


# -- a nested period re-enters only the same period ------------------------------------------

DAILY_RAN: list[str] = []


@with_period(lambda inputs: inputs["key"], every="day")
class DailyChild(Reactor):
    key: str

    @step()
    def work(key: str) -> str:
        DAILY_RAN.append(key)
        return "daily"


@with_period(lambda inputs: inputs["key"], every=3600)
class HourlyParent(Reactor):
    key: str

    @step()
    def nested(key: str) -> str:
        return DailyChild.run(key=key).status

    returns = "nested"


def test_a_nested_period_of_another_length_is_claimed_and_marked(key: str) -> None:
    """An hourly run holding period K does not make a nested daily run on K re-entrant."""
    DAILY_RAN.clear()
    assert HourlyParent.run(key=key).value == "completed"
    assert DailyChild.run(key=key).status == "halted"  # the daily bucket was marked
    assert [key] == DAILY_RAN


# -- the ordered turn's refusal records the step's keys; an interrupted gate aborts ------------


@with_ordered_lock(lambda a: a["key"], wait=0.2)
class Impatient(Step):
    key: str

    def run(self) -> Any:
        return "ran"


class ImpatientFlow(Reactor):
    key: str
    go = step(Impatient)


def test_an_ordered_turn_timeout_records_the_steps_keys(key: str) -> None:
    """A step refused at its ordered turn has a failed trace entry naming its key."""
    blocker = OrderedLock(key)
    blocker.take_position()  # position 1, alive and never done: the run's turn never comes
    outcome = ImpatientFlow.run(key=key)
    assert outcome.status == "failed"
    (entry,) = [e for e in outcome.context.trace if e["type"] == "failed"]
    assert entry["coordination"] == {"ordered_lock": key}
    assert entry["primitive"] == "ordered_lock"


def _interrupt(inputs: Any) -> str:
    raise KeyboardInterrupt


@with_lock(_interrupt)
class InterruptedAtTheGate(Reactor):
    @step()
    def never() -> None:
        raise AssertionError("no step runs")


def test_an_interrupt_in_reactor_coordination_marks_the_run_aborted() -> None:
    """Ctrl-C while a reactor takes its coordination leaves the context aborted, not running."""
    context = Context(reactor="InterruptedAtTheGate", inputs={})
    with pytest.raises(KeyboardInterrupt):
        execute(InterruptedAtTheGate, context)
    assert context.status == "aborted"


# -- a failed step's compensate runs in the same critical section as its work ----------------

LEDGER: list[str] = []
A_FAILING = threading.Event()


@with_lock(lambda a: a["key"], wait=10)
class Debit(Step):
    key: str
    who: str

    def run(self) -> Any:
        LEDGER.append(f"{self.inputs.who} work")
        if self.inputs.who == "a":
            A_FAILING.set()
            until(
                lambda: Lock(self.inputs.key).state().waiters == 1,
                "Lock(self.inputs.key).state().waiters == 1",
            )  # b is queued
            raise RuntimeError("half done")
        return "ok"

    def compensate(self, error: Any) -> Any:
        LEDGER.append(f"{self.inputs.who} compensate")


class DebitFlow(Reactor):
    key: str
    who: str
    debit = step(Debit)


def test_compensate_runs_before_a_waiting_execution_enters_the_step(key: str) -> None:
    """The failed step keeps its lock through compensate: no one sees the half-done state."""
    LEDGER.clear()
    A_FAILING.clear()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(DebitFlow.run, key=key, who="a")
        assert A_FAILING.wait(10)
        second = pool.submit(DebitFlow.run, key=key, who="b")
        assert first.result(20).status == "failed"
        assert second.result(20).status == "completed"
    assert LEDGER == ["a work", "a compensate", "b work"]
    assert lock_is_free(key)


# -- invoke(context=...) from another thread shares the trace, never the holds ---------------


@with_lock(lambda a: a["key"], wait=10)
class Guarded(Step):
    key: str

    def run(self) -> Any:
        with INSIDE[self.inputs.key].inside(threading.current_thread().name):
            both_in.wait(0.3)  # room for a wrongly admitted second thread to enter
        return "ok"


class HandsOut(Step):
    key: str

    def run(self) -> Any:
        with ThreadPoolExecutor(3) as pool:
            futures = [
                pool.submit(Guarded.invoke, {"key": self.inputs.key}, context=self.context)
                for _ in range(3)
            ]
            outcomes = [f.result() for f in futures]
        return [(o.status, o.context.root_id == self.context.root_id) for o in outcomes]


class HandsOutFlow(Reactor):
    key: str
    hand = step(HandsOut)
    returns = "hand"


def test_invoke_with_the_context_from_other_threads_still_excludes(
    key: str, overlap: OverlapRecorder
) -> None:
    """Pool threads invoking a locked step with ``context=self.context`` never share the lock."""
    INSIDE[key] = overlap
    outcome = HandsOutFlow.run(key=key)
    assert outcome.status == "completed", outcome
    assert outcome.value == [("completed", True)] * 3  # traced as part of the execution
    assert overlap.entries == 3
    assert overlap.max_concurrency == 1
    assert lock_is_free(key)


# -- an interrupt between a failed step and its rollback leaves nothing held ------------------


@with_lock(lambda a: a["key"], ttl=30)
class Breaks(Step):
    key: str

    def run(self) -> Any:
        raise RuntimeError("work failed")

    def compensate(self, error: Any) -> Any:
        return None


class BreaksFlow(Reactor):
    key: str
    go = step(Breaks)


class Interrupts(Middleware):
    """Raises KeyboardInterrupt from one hook, as a Ctrl-C landing there would."""

    def __init__(self, hook: str) -> None:
        def interrupt(event: Any) -> None:
            raise KeyboardInterrupt

        setattr(self, hook, interrupt)


@pytest.mark.parametrize("hook", ["on_step_failed", "on_rollback_started"])
def test_an_interrupt_before_rollback_releases_the_failed_steps_holds(key: str, hook: str) -> None:
    """The failed step keeps its lock for its compensate; an interrupt first must free it."""
    configure(middleware=[Interrupts(hook)])
    with pytest.raises(KeyboardInterrupt):
        BreaksFlow.run(key=key)
    assert lock_is_free(key)


# -- review round 4 ---------------------------------------------------------------------------


@with_ordered_lock(lambda a: a["key"], poison_pill_timeout=1, wait=3)
@with_lock(lambda a: f"{a['key']}-lock")
class FailsInLine(Step):
    key: str

    def run(self) -> Any:
        raise RuntimeError("work failed")


class FailsInLineFlow(Reactor):
    key: str
    go = step(FailsInLine)


class InterruptsOnRelease(Middleware):
    def on_lock_released(self, event: Any) -> None:
        raise KeyboardInterrupt


def test_an_interrupt_while_releasing_still_gives_back_the_ordered_turn(key: str) -> None:
    """A Ctrl-C during the failed step's releases still ends its ordered turn."""
    configure(middleware=[InterruptsOnRelease()])
    with pytest.raises(KeyboardInterrupt):
        FailsInLineFlow.run(key=key)
    configure(middleware=[])
    assert OrderedLock(key).state().in_flight == 0
    assert lock_is_free(f"{key}-lock")


DAILY_BY: list[str] = []
T1_INSIDE = threading.Event()
T1_GO = threading.Event()
CAPTURED: dict[str, Any] = {}


@with_period(lambda a: a["key"], every="day", wait=0.3)
class DailyOnce(Step):
    key: str
    who: str

    def run(self) -> Any:
        DAILY_BY.append(self.inputs.who)
        if self.inputs.who == "t1":
            CAPTURED["context"] = self.context
            T1_INSIDE.set()
            T1_GO.wait(10)
        return self.inputs.who


class DailyOnceFlow(Reactor):
    key: str
    who: str
    daily = step(DailyOnce)


class ReInvokes(Step):
    key: str

    def run(self) -> Any:
        inner = DailyOnce.invoke({"key": self.inputs.key, "who": "t2"}, context=CAPTURED["context"])
        return inner.status


def test_a_nested_invoke_with_another_threads_context_does_not_share_its_claims(
    key: str,
) -> None:
    """Inside an invoke(context=X) from another thread, a nested one does not see X's claims."""
    DAILY_BY.clear()
    T1_INSIDE.clear()
    T1_GO.clear()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(DailyOnceFlow.run, key=key, who="t1")
        assert T1_INSIDE.wait(10)
        try:
            outer = ReInvokes.invoke({"key": key}, context=CAPTURED["context"])
        finally:
            T1_GO.set()
        assert first.result(10).status == "completed"
    assert outer.value == "failed"  # waited for t1's claim, then gave up
    assert DAILY_BY == ["t1"]


@with_lock(lambda a: a["key"], ttl=1, auto_extend=False, wait=5)
class SlowToUndo(Step):
    key: str
    who: str

    def run(self) -> Any:
        if self.inputs.who == "a":
            time.sleep(0.6)
            raise RuntimeError("work failed")
        LEDGER.append("b work")
        return "ok"

    def compensate(self, error: Any) -> Any:
        LEDGER.append("a compensate start")
        time.sleep(0.6)  # work + compensate outlast the ttl of 1 s
        LEDGER.append("a compensate end")


class SlowToUndoFlow(Reactor):
    key: str
    who: str
    go = step(SlowToUndo)


def test_the_kept_lock_is_extended_for_the_compensate(key: str) -> None:
    """Without auto-extend, the lock kept for compensate gets a fresh ttl before it runs."""
    LEDGER.clear()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(SlowToUndoFlow.run, key=key, who="a")
        until(lambda: Lock(key).state().count == 1, "Lock(key).state().count == 1")
        second = pool.submit(SlowToUndoFlow.run, key=key, who="b")
        assert first.result(10).status == "failed"
        assert second.result(10).status == "completed"
    assert LEDGER == ["a compensate start", "a compensate end", "b work"]


# -- an abnormal exit inside an ordered turn leaves the position in line (issue 19, bug 4) ----

#: The poison-pill timeout of the ``InLine`` reactors; positions heartbeat every third of it.
IN_LINE_POISON = 1.5
IN_LINE: list[str] = []


@with_ordered_lock(lambda a: a["key"], poison_pill_timeout=IN_LINE_POISON, wait=10)
class InLine(Step):
    key: str
    who: str

    def run(self) -> Any:
        IN_LINE.append(self.inputs.who)
        if self.inputs.who == "interrupted":
            raise KeyboardInterrupt
        return self.inputs.who


class InLineStep(Reactor):
    """The ordered lock on the step."""

    key: str
    who: str
    go = step(InLine)
    returns = "go"


@with_ordered_lock(lambda a: a["key"], poison_pill_timeout=IN_LINE_POISON, wait=10)
class InLineReactor(Reactor):
    """The ordered lock on the reactor."""

    key: str
    who: str

    @step()
    def go(key: str, who: str) -> str:
        IN_LINE.append(who)
        if who == "interrupted":
            raise KeyboardInterrupt
        return who

    returns = "go"


@pytest.mark.parametrize("flow", [InLineStep, InLineReactor], ids=["step", "reactor"])
def test_an_interrupt_inside_an_ordered_turn_leaves_the_position_for_the_poison_pill(
    flow: type[Reactor], key: str
) -> None:
    """Ctrl-C in the body does not pass the turn on (as done, or as failed): the position stays
    in line, no longer heartbeating, and the next run gets its turn only once the poison pill
    skips it, as for a killed runner; strict mode does not short-circuit it (no failure)."""
    IN_LINE.clear()
    with pytest.raises(KeyboardInterrupt):
        flow.run(key=key, who="interrupted")
    interrupted = time.monotonic()
    left = OrderedLock(key).state()
    assert (left.last_completed, left.in_flight, left.failed) == (0, 1, False)
    after = flow.run(key=key, who="next")
    waited = time.monotonic() - interrupted
    assert after.status == "completed", after
    assert after.value == "next"
    # Its last heartbeat was at most a third of the timeout before the interrupt.
    assert waited >= IN_LINE_POISON * 2 / 3 - 0.1
    assert IN_LINE == ["interrupted", "next"]
    assert OrderedLock(key).state().drained
