"""US2: a step's lock serializes that step only; the rest of two concurrent runs overlaps.

An eight-step reactor whose steps run one after the other; step 3 locks ``<ns>:<lock_on>``
(waiting up to 10 s). Every step body records its stay in the test's ``OverlapRecorder`` under
``<run>:s<n>`` (``A:s4`` is run A's step 4) and then works: 0.2 s for most steps, 0.05 s for the
locked one, so that the run that waits at step 3 is shifted by less than one step and its later
steps still overlap the other run's. A hook registered for a label replaces the work.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from py_reactor import Lock, Reactor, Step, step, with_lock
from tests._overlap import OverlapRecorder
from tests._wait import until

#: Seconds an unlocked step works.
HOLD = 0.2

#: Seconds the locked step (step 3) works.
LOCKED_HOLD = 0.05

#: One run's steps, worked one after the other.
ONE_RUN = 7 * HOLD + LOCKED_HOLD

#: Two runs' steps, worked one after the other: what full serialization costs.
SERIALIZED = 2 * ONE_RUN

STEPS = range(1, 9)


@dataclass
class World:
    """What one test's step bodies share: its recorder and the hooks by label."""

    overlap: OverlapRecorder
    hooks: dict[str, Callable[[], Any]] = field(default_factory=dict)


#: The world of each running test, by its ``key`` (the ``ns`` argument of every step).
WORLDS: dict[str, World] = {}


@pytest.fixture
def world(key: str, overlap: OverlapRecorder) -> Iterator[World]:
    """This test's world, reachable from step bodies through their ``ns`` argument."""
    WORLDS[key] = World(overlap)
    yield WORLDS[key]
    del WORLDS[key]


def stage_key(args: Mapping[str, Any]) -> str:
    """Step 3's lock key: ``<ns>:<lock_on>``."""
    return f"{args['ns']}:{args['lock_on']}"


class Stage(Step):
    """One of the eight steps: records its stay as ``<who>:s<number>``, then works or hooks."""

    ns: str
    who: str
    number: ClassVar[int] = 0
    hold: ClassVar[float] = HOLD

    def run(self) -> Any:
        world = WORLDS[self.inputs.ns]
        label = f"{self.inputs.who}:s{self.number}"
        with world.overlap.inside(label):
            hook = world.hooks.get(label)
            if hook is not None:
                hook()
            else:
                time.sleep(self.hold)  # the work itself: it takes this long
        return label


class S1(Stage):
    number = 1


class S2(Stage):
    number = 2


@with_lock(stage_key, wait=10)
class S3(Stage):
    lock_on: str
    number = 3
    hold = LOCKED_HOLD


class S4(Stage):
    number = 4


class S5(Stage):
    number = 5


class S6(Stage):
    number = 6


class S7(Stage):
    number = 7


class S8(Stage):
    number = 8


class EightSteps(Reactor):
    """Eight steps in a chain; only step 3 declares a lock."""

    ns: str
    who: str
    lock_on: str
    s1 = step(S1)
    s2 = step(S2, wait_for="s1")
    s3 = step(S3, wait_for="s2")
    s4 = step(S4, wait_for="s3")
    s5 = step(S5, wait_for="s4")
    s6 = step(S6, wait_for="s5")
    s7 = step(S7, wait_for="s6")
    s8 = step(S8, wait_for="s7")


@with_lock(stage_key, wait=10)
class WholeRunLocked(EightSteps):
    """The same steps with the lock on the whole run (step 3 re-enters it)."""


def by_step(events: list[tuple[str, str]]) -> dict[int, int]:
    """The most runs inside each step at once, replayed from the recorder's event log."""
    inside = dict.fromkeys(STEPS, 0)
    best = dict.fromkeys(STEPS, 0)
    for kind, label in events:
        number = int(label.rsplit(":s", 1)[1])
        inside[number] += 1 if kind == "enter" else -1
        best[number] = max(best[number], inside[number])
    return best


def run_two(reactor: type[Reactor], key: str, lock_on: Callable[[str], str]) -> float:
    """Run ``reactor`` as A and B on two threads released together; the wall time of both."""
    start = threading.Barrier(2)

    def go(who: str) -> Any:
        start.wait(10)
        return reactor.run(ns=key, who=who, lock_on=lock_on(who))

    with ThreadPoolExecutor(2) as pool:
        began = time.monotonic()
        outcomes = list(pool.map(go, ["A", "B"]))
        elapsed = time.monotonic() - began
    assert [o.status for o in outcomes] == ["completed", "completed"], outcomes
    return elapsed


def test_only_the_locked_step_serializes(world: World, key: str) -> None:
    """Two runs on one key: steps 1, 2, 4..8 overlap, step 3 never does; far from serialized."""
    run_two(EightSteps, key, lambda who: "shared")
    concurrency = by_step(world.overlap.events)
    assert concurrency == {n: 1 if n == 3 else 2 for n in STEPS}, concurrency
    assert world.overlap.entries == 16
    assert world.overlap.max_concurrency == 2


def test_with_different_keys_the_locked_step_overlaps_too(world: World, key: str) -> None:
    """The twin of the test above: on two keys the two runs meet inside step 3 as well."""
    both_inside = threading.Barrier(2)
    world.hooks["A:s3"] = world.hooks["B:s3"] = lambda: both_inside.wait(5)
    run_two(EightSteps, key, lambda who: who)
    concurrency = by_step(world.overlap.events)
    assert concurrency == dict.fromkeys(STEPS, 2), concurrency


def test_a_reactor_level_lock_serializes_every_step(world: World, key: str) -> None:
    """The control: the same steps under a reactor-level lock on the key never overlap at all."""
    elapsed = run_two(WholeRunLocked, key, lambda who: "shared")
    concurrency = by_step(world.overlap.events)
    assert concurrency == dict.fromkeys(STEPS, 1), concurrency
    assert world.overlap.max_concurrency == 1
    assert world.overlap.entries == 16
    assert elapsed >= 0.95 * SERIALIZED, elapsed


def test_a_run_waiting_at_the_locked_step_does_not_hold_up_the_other(
    world: World, key: str
) -> None:
    """B waits at step 3 while A runs steps 4..8 to the end; B's step 3 starts after A's step 4.

    A holds step 3's lock while B queues for it behind another owner, so when A leaves step 3
    the key goes to that owner and B keeps waiting: everything A does next happens during B's
    wait. (The lock hands a released key to its oldest waiter.)
    """
    shared = f"{key}:shared"
    a_in_3, a_go, next_go = threading.Event(), threading.Event(), threading.Event()

    def a_holds_step_3() -> None:
        a_in_3.set()
        if not a_go.wait(10):
            raise TimeoutError("the test never let A leave step 3")

    def next_in_line() -> None:
        hold = Lock(shared, owner="next-in-line", wait=10).acquire()
        try:
            if not next_go.wait(10):
                raise TimeoutError("the test never let the next owner go")
        finally:
            hold.release()

    def queued() -> int:
        return Lock(shared).state().waiters

    world.hooks["A:s3"] = a_holds_step_3
    with ThreadPoolExecutor(3) as pool:
        try:
            a = pool.submit(EightSteps.run, ns=key, who="A", lock_on="shared")
            assert a_in_3.wait(10), "A never reached step 3"
            other = pool.submit(next_in_line)
            until(lambda: queued() == 1, "A queued")
            b = pool.submit(EightSteps.run, ns=key, who="B", lock_on="shared")
            until(
                lambda: queued() == 2, "queued() == 2"
            )  # B waits at step 3, behind the other owner
            assert ("leave", "B:s2") in world.overlap.events
            a_go.set()
            finished_a = a.result(10)
            assert finished_a.status == "completed", finished_a
            assert queued() == 1  # B is still waiting at step 3
            assert Lock(shared).state().owner == "next-in-line"
            assert ("enter", "B:s3") not in world.overlap.events
        finally:
            a_go.set()
            next_go.set()
        other.result(10)
        finished_b = b.result(10)
    assert finished_b.status == "completed", finished_b
    events = world.overlap.events
    b_waits_from = events.index(("leave", "B:s2"))
    b_enters_3 = events.index(("enter", "B:s3"))
    for number in range(4, 9):
        assert b_waits_from < events.index(("enter", f"A:s{number}")) < b_enters_3
        assert events.index(("leave", f"A:s{number}")) < b_enters_3
    assert by_step(events)[3] == 1
