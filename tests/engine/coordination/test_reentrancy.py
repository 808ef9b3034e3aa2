"""Ownership, re-entrancy of composed children, ``held_keys`` and auto-extend."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from py_reactor import (
    HaltedResult,
    Lock,
    Reactor,
    Semaphore,
    Step,
    SuccessResult,
    compose,
    step,
    with_lock,
    with_period,
    with_semaphore,
)
from py_reactor.errors import LockAcquisitionError
from py_reactor.observability import events as ev
from tests.engine.coordination._helpers import (
    BEHAVIOUR,
    Locked,
    Probe,
    by_key,
    lock_is_free,
    ordered_reactors,
    ran,
    recorder,
    semaphore_is_free,
)


class Tail(Step):
    """Runs after a composed child and records the lock's state at that moment."""

    key: str

    def run(self) -> Any:
        state = Lock(self.inputs.key).state()
        return {"owner": state.owner, "count": state.count}


@with_lock(by_key, ttl=1)
class ShortTtl(Reactor):
    key: str
    probe = step(Probe)


@with_lock(by_key)
class LockedChild(Reactor):
    key: str
    probe = step(Probe)
    returns = "probe"


@with_lock(by_key)
class LockedParent(Reactor):
    key: str
    child = compose(LockedChild)
    tail = step(Tail, wait_for=["child"])
    returns = "tail"


@with_semaphore(by_key, limit=1)
class SemaphoreChild(Reactor):
    key: str
    probe = step(Probe)
    returns = "probe"


@with_semaphore(by_key, limit=1)
class SemaphoreParent(Reactor):
    key: str
    child = compose(SemaphoreChild)
    returns = "child"


@with_period(by_key, every="day")
class DailyChild(Reactor):
    key: str
    probe = step(Probe)


@with_period(by_key, every="day")
class DailyParent(Reactor):
    key: str
    child = compose(DailyChild)


def test_holds_belong_to_the_root_execution(key: str) -> None:
    """While the step runs, the lock's owner is the run's root id and held_keys lists it."""
    seen: dict[str, Any] = {}

    def look(probe: Step) -> str:
        state = Lock(key).state()
        seen.update(owner=state.owner, count=state.count, token=state.fencing_token)
        seen["held_keys"] = list(probe.context.held_keys)
        return "ok"

    BEHAVIOUR[key] = look
    rec = recorder()
    outcome = Locked.run(key=key)
    assert outcome.is_success, outcome
    assert seen["owner"] == outcome.context.root_id == outcome.execution_id
    assert seen["count"] == 1
    assert seen["held_keys"] == [f"lock:{key}"]
    acquired = rec.of(ev.LockAcquired)
    released = rec.of(ev.LockReleased)
    assert [(e.key, e.fencing_token) for e in acquired] == [(key, seen["token"])]
    assert [e.key for e in released] == [key]
    assert outcome.context.held_keys == []


def test_fencing_tokens_increase_from_run_to_run(key: str) -> None:
    """Each run's LockAcquired event carries a fencing token larger than the previous run's."""
    rec = recorder()
    for _ in range(3):
        assert Locked.run(key=key).is_success
    tokens = [e.fencing_token for e in rec.of(ev.LockAcquired)]
    assert len(tokens) == 3
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == 3
    assert tokens[0] > 0


def test_a_composed_child_re_enters_its_parents_lock(key: str) -> None:
    """A child declaring its parent's lock enters at once; the key is held until the parent ends."""
    seen: dict[str, Any] = {}
    entered = threading.Event()
    checked = threading.Event()

    def inside_child(probe: Step) -> str:
        state = Lock(key).state()
        seen.update(owner=state.owner, count=state.count, root=probe.context.root_id)
        seen["held_keys"] = list(probe.context.held_keys)
        entered.set()
        assert checked.wait(10)
        return "child done"

    BEHAVIOUR[key] = inside_child
    rec = recorder()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(LockedParent.run, key=key)
        assert entered.wait(10)
        try:
            with pytest.raises(LockAcquisitionError):
                Lock(key, wait=0).acquire()
        finally:
            checked.set()
        outcome = future.result(timeout=10)
    assert outcome.is_success, outcome
    assert seen["owner"] == outcome.execution_id
    assert seen["root"] == outcome.execution_id
    assert seen["count"] == 2
    assert seen["held_keys"].count(f"lock:{key}") == 2  # one entry per hold: parent, child
    # After the child ended, the parent still held the key (count 1), as its own owner.
    assert outcome.value == {"owner": outcome.execution_id, "count": 1}
    assert outcome.context.held_keys == []
    assert outcome.context.children["child"].held_keys == []
    assert rec.names("lock.") == [
        "lock.acquired",
        "lock.acquired",
        "lock.released",
        "lock.released",
    ]
    tokens = {e.fencing_token for e in rec.of(ev.LockAcquired)}
    assert len(tokens) == 1
    assert lock_is_free(key)


def test_a_composed_child_re_enters_its_parents_semaphore_slot(key: str) -> None:
    """A child declaring its parent's one-slot semaphore runs in the parent's slot."""
    seen: dict[str, Any] = {}

    def look(probe: Step) -> str:
        seen["held"] = Semaphore(key, limit=1).state().held
        seen["held_keys"] = list(probe.context.held_keys)
        return "ok"

    BEHAVIOUR[key] = look
    outcome = SemaphoreParent.run(key=key)
    assert outcome.is_success, outcome
    assert seen["held"] == 1
    assert seen["held_keys"].count(f"semaphore:{key}") == 2
    assert semaphore_is_free(key)
    assert outcome.context.held_keys == []


def test_a_composed_child_shares_its_parents_period(key: str) -> None:
    """A child declaring its parent's period runs in the parent's claim; the bucket is then done."""
    first = DailyParent.run(key=key)
    assert isinstance(first, SuccessResult), first
    second = DailyParent.run(key=key)
    assert isinstance(second, HaltedResult), second
    assert second.reason == "period"
    assert ran == [key]


def test_a_composed_child_passes_its_parents_ordered_lock(key: str) -> None:
    """A child declaring its parent's ordered lock does not queue behind its own parent."""
    from py_reactor.coordination.ordered_lock import OrderedLock

    with ThreadPoolExecutor(1) as pool:
        outcome = pool.submit(ordered_reactors()["parent"].run, key=key).result(timeout=30)
    assert isinstance(outcome, SuccessResult), outcome
    assert ran == [key]
    assert OrderedLock(key).state().drained


def test_a_lock_is_extended_while_the_run_outlives_its_ttl(key: str) -> None:
    """A run holding a ttl=1 s lock for well over its ttl keeps it the whole time."""
    entered = threading.Event()
    finish = threading.Event()

    def block(probe: Step) -> str:
        entered.set()
        assert finish.wait(10)
        return "done"

    BEHAVIOUR[key] = block
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(ShortTtl.run, key=key)
        assert entered.wait(10)
        owners = set()
        until = time.monotonic() + 2.5  # two and a half times the ttl
        while time.monotonic() < until:
            state = Lock(key).state()
            owners.add(state.owner)
            assert state.ttl is not None
            time.sleep(0.05)
        stolen = lock_is_free(key)
        finish.set()
        outcome = future.result(timeout=10)
    assert outcome.is_success, outcome
    assert owners == {outcome.execution_id}
    assert stolen is False
    assert lock_is_free(key)
