"""``@background @parallel`` on the thread worker: branches in a worker, a branch that parks
while its siblings finish, the release that wakes it, and the hand-off in the caller.

Real store (the session's private redis-server), real threads; every park is observed through
the stored record or the park event, never assumed from timing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from py_reactor import Lock, Middleware, OrderedLock, configure, find
from py_reactor.observability import events as ev
from tests._wait import status, until
from tests.runtime import _parallel_reactors as pr

PATIENCE = 10.0


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    # A long backstop timer: a run that resumes in time was woken by the release.
    configure(redis_url=redis_url, park_delay=60.0, park_jitter=0.0)
    yield
    pr.HOOKS.clear()


def hook(key: str, actions: dict[str, Callable[[], Any]]) -> None:
    def run(name: str) -> Any:
        action = actions.get(name)
        return None if action is None else action()

    pr.HOOKS[key] = run


class ParkSeen(Middleware):
    """Sets ``parked`` when a step parks (in the branch's thread, at the park)."""

    def __init__(self) -> None:
        self.parked = threading.Event()
        self.steps: list[str | None] = []

    def on_step_parked(self, event: ev.StepParked) -> None:
        self.steps.append(event.step)
        self.parked.set()


def test_a_branch_parks_while_its_siblings_finish_and_a_release_wakes_the_run(
    key: str,
) -> None:
    """a, b and c run at once (a barrier) while ``locked`` meets a lock the test holds and
    parks; a waits until that park happened, so the siblings finish *after* it. The run then
    parks with their results; the release wakes it; ``locked`` runs, the siblings are not run
    again, and the run completes with every result."""
    seen = ParkSeen()
    configure(middleware=[seen])
    barrier = threading.Barrier(3, timeout=PATIENCE)

    def meet() -> None:
        barrier.wait()

    def a() -> None:
        meet()
        assert seen.parked.wait(PATIENCE)

    hook(key, {"a": a, "b": meet, "c": meet})
    held = Lock(f"{key}:locked", owner="someone-else", ttl=30).acquire()
    out = pr.Fanout.run(key=key)
    assert out.status == "dispatched"

    until(lambda: status(out.execution_id) == "waiting", "the park")
    parked = find(out.execution_id)
    assert parked is not None
    assert parked.waiting_on is not None
    assert parked.waiting_on["step"] == "locked"
    assert parked.waiting_on["primitive"] == "lock"
    assert parked.results == {"a": "a-value", "b": "b-value", "c": "c-value"}
    assert [e["step"] for e in parked.trace if e["type"] == "parked"] == ["locked"]
    assert seen.steps == ["locked"]
    assert parked.holds == []

    held.release()
    done = out.wait(timeout=PATIENCE)  # far sooner than the 60 s backstop: the release woke it
    assert done.is_success, done
    assert done.value == "a-value+b-value+c-value+locked-value"
    assert sorted(pr.CALLS[key]) == ["a", "b", "c", "join", "locked"]  # nothing ran twice
    found = find(out.execution_id)
    assert found is not None
    assert found.status == "completed"
    assert set(found.results) == {"a", "b", "c", "locked", "join"}
    assert found.holds == []
    assert Lock(f"{key}:locked").state().owner is None


def test_a_composed_child_parks_in_its_branch_and_resumes_where_it_stopped(key: str) -> None:
    """The child's locked step parks (step "pay.charge"); the stored run keeps the child's
    progress (its first step done); after the release the child goes on from there, nothing
    runs twice, and the stored child context ends completed."""
    held = Lock(f"{key}:locked", owner="someone-else", ttl=30).acquire()
    out = pr.ComposedPark.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    parked = find(out.execution_id)
    assert parked is not None
    assert parked.waiting_on is not None
    assert parked.waiting_on["step"] == "pay.charge"
    assert parked.results == {"side": "side-value"}
    held.release()
    done = out.wait(timeout=PATIENCE)
    assert done.is_success, done
    assert done.value == "charge-value+side-value"
    assert sorted(pr.CALLS[key]) == ["charge", "finish", "prepare", "side"]
    child = done.context.children["pay"]
    assert child.status == "completed"
    assert child.results == {"prepare": "prepare-value", "charge": "charge-value"}
    assert [e["step"] for e in done.trace if e["type"] == "parked"] == ["pay.charge"]


def test_the_caller_runs_the_steps_before_the_hand_off_at_once(key: str) -> None:
    """@background(after="second"): first and second run in the caller, together (each waits
    for the other at a barrier); third and fourth run in the worker."""
    barrier = threading.Barrier(2, timeout=PATIENCE)
    threads: dict[str, str] = {}

    def meet(name: str) -> Callable[[], None]:
        def inside() -> None:
            threads[name] = threading.current_thread().name
            barrier.wait()

        return inside

    hook(key, {"first": meet("first"), "second": meet("second")})
    out = pr.HandOff.run(key=key)
    assert out.status == "dispatched"
    assert dict(out.results) == {"first": "first-value", "second": "second-value"}
    assert sorted(pr.CALLS[key]) == ["first", "second"]
    assert threads["first"] != threads["second"]
    done = out.wait(timeout=PATIENCE)
    assert done.is_success, done
    assert sorted(pr.CALLS[key]) == ["first", "fourth", "second", "third"]
    found = find(out.execution_id)
    assert found is not None
    assert set(found.results) == {"first", "second", "third", "fourth"}


def test_a_failure_overtaking_a_parked_branch_gives_back_its_ordered_position(key: str) -> None:
    """``ordered`` parks out of turn (the test holds the first position), keeping its own;
    ``boom`` then fails (after the park, by the event). The run fails and rolls back ``done``;
    the parked branch's position is given back, so the line is not blocked behind it."""
    seen = ParkSeen()
    configure(middleware=[seen])
    hook(key, {"boom": lambda: seen.parked.wait(PATIENCE) and None})
    line = OrderedLock(f"{key}:seq")
    first = line.take_position()
    out = pr.ParkThenFail.run(key=key)
    done = out.wait(timeout=PATIENCE)
    assert done.status == "failed"
    assert done.step_name == "boom"
    assert seen.steps == ["ordered"]
    assert pr.UNDONE[key] == ["done"]
    assert "ordered" not in pr.CALLS[key]
    found = find(out.execution_id)
    assert found is not None
    assert found.status == "failed"
    assert found.holds == []
    line.wait_turn(first).release(failed=False)
    later = line.take_position()  # the abandoned position does not hold the line
    line.wait_turn(later).release(failed=False)
    assert line.state().drained
