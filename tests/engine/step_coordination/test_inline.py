"""Inline steps declare coordination exactly as Step classes do (US8, FR-005, FR-006).

The step-scoped lock scenarios of US1 run as one parametrized suite over three placements of
the same ``@with_lock(step_key, wait=5)`` line: above a ``Step`` class, below ``@step`` on an
inline function, and above ``@step``. Moving the inline declaration verbatim into a Step class
records the same events and trace. Inline ``compensate``/``undo`` run under the step's lock (a
compensate under the hold its failed work kept, an undo under a hold it re-takes),
``Reactor.<step>.coordination`` shows what was declared, and one primitive declared on both
sides of ``@step`` is refused.

"Another owner cannot take the key" is checked with an explicit foreign owner: inside an
execution a plain ``Lock(key)`` belongs to that execution and would re-enter.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest

from py_reactor import (
    Failure,
    FailureResult,
    Lock,
    Reactor,
    Step,
    SuccessResult,
    step,
    with_lock,
    with_semaphore,
)
from py_reactor.coordination.declarations import LockDeclaration, SemaphoreDeclaration
from py_reactor.engine.results import Outcome
from py_reactor.errors import DefinitionError, LockAcquisitionError
from py_reactor.observability import events as ev
from tests._overlap import OverlapRecorder
from tests._wait import until
from tests.engine.coordination._helpers import lock_is_free, recorder

#: What the locked work does for a key before it returns (cleared around every test).
BEHAVIOUR: dict[str, Callable[[str], Any]] = {}

#: Keys whose locked work ran, in order (cleared around every test).
ran: list[str] = []

#: What the inline compensate/undo hooks saw: (hook, what it saw) (cleared around every test).
hooks_seen: list[tuple[str, dict[str, Any]]] = []


@pytest.fixture(autouse=True)
def _records() -> Iterator[None]:
    for record in (BEHAVIOUR, ran, hooks_seen):
        record.clear()
    yield
    for record in (BEHAVIOUR, ran, hooks_seen):
        record.clear()


def step_key(values: Mapping[str, Any]) -> str:
    """The lock key of every step here: its ``key`` argument."""
    return str(values["key"])


def shut_out(key: str) -> bool:
    """Whether an owner foreign to every execution is refused lock ``key`` right now."""
    try:
        hold = Lock(key, owner=f"foreign-{uuid.uuid4().hex}", wait=0).acquire()
    except LockAcquisitionError:
        return True
    hold.release()
    return False


def work(key: str, mode: str) -> Any:
    """The locked work, the same for every placement: look, do the key's BEHAVIOUR, end by mode."""
    ran.append(key)
    seen = {"shut_out": shut_out(key)}
    behaviour = BEHAVIOUR.get(key)
    if behaviour is not None:
        behaviour(key)
    if mode == "fail":
        return Failure("work failed", retryable=False)
    if mode == "raise":
        raise ValueError("work raised")
    return seen


def after_work(key: str) -> dict[str, bool]:
    """The step after the locked one: is the key free for another owner now?"""
    return {"free": not shut_out(key)}


def in_hook(name: str, arguments: Mapping[str, Any]) -> None:
    """What a compensate/undo hook records: whether it runs under the step's lock."""
    key = arguments["key"]
    state = Lock(key).state()
    hooks_seen.append(
        (name, {"shut_out": shut_out(key), "owner": state.owner, "count": state.count})
    )


# -- the three placements --------------------------------------------------------------------------


@with_lock(step_key, wait=5)
class LockedWork(Step):
    key: str
    mode: str = "ok"

    def run(self) -> Any:
        return work(self.inputs.key, self.inputs.mode)


class ClassPlaced(Reactor):
    """The lock is declared on the Step class."""

    key: str
    mode: str = "ok"
    locked = step(LockedWork)
    after = step(after_work, wait_for=["locked"])
    returns = "after"


class InlineBelow(Reactor):
    """The same lock, below ``@step`` on an inline function."""

    key: str
    mode: str = "ok"

    @step()
    @with_lock(step_key, wait=5)
    def locked(key: str, mode: str = "ok") -> Any:
        return work(key, mode)

    after = step(after_work, wait_for=["locked"])
    returns = "after"


class InlineAbove(Reactor):
    """The same lock, above ``@step`` on an inline function."""

    key: str
    mode: str = "ok"

    @with_lock(step_key, wait=5)
    @step()
    def locked(key: str, mode: str = "ok") -> Any:
        return work(key, mode)

    after = step(after_work, wait_for=["locked"])
    returns = "after"


PLACEMENTS: dict[str, type[Reactor]] = {
    "class": ClassPlaced,
    "inline_below": InlineBelow,
    "inline_above": InlineAbove,
}


@pytest.fixture(params=list(PLACEMENTS))
def placed(request: pytest.FixtureRequest) -> type[Reactor]:
    """The reactor whose ``locked`` step declares the lock in one of the three places."""
    return PLACEMENTS[request.param]


# -- inline hooks ----------------------------------------------------------------------------------


class HooksBelow(Reactor):
    """An inline locked step (lock below @step) with inline compensate and undo."""

    key: str
    mode: str = "ok"

    @step()
    @with_lock(step_key, wait=5)
    def locked(key: str, mode: str = "ok") -> Any:
        return work(key, mode)

    @locked.compensate
    def _compensate_locked(error: Any, **arguments: Any) -> None:
        in_hook("compensate", arguments)

    @locked.undo
    def _undo_locked(result: Any, **arguments: Any) -> None:
        in_hook("undo", arguments)

    @step(wait_for=["locked"])
    def later(mode: str = "ok") -> None:
        if mode == "later_fails":
            raise RuntimeError("a later step failed")


class HooksAbove(Reactor):
    """The same, with the lock above @step."""

    key: str
    mode: str = "ok"

    @with_lock(step_key, wait=5)
    @step()
    def locked(key: str, mode: str = "ok") -> Any:
        return work(key, mode)

    @locked.compensate
    def _compensate_locked(error: Any, **arguments: Any) -> None:
        in_hook("compensate", arguments)

    @locked.undo
    def _undo_locked(result: Any, **arguments: Any) -> None:
        in_hook("undo", arguments)

    @step(wait_for=["locked"])
    def later(mode: str = "ok") -> None:
        if mode == "later_fails":
            raise RuntimeError("a later step failed")


class Mixed(Reactor):
    """A semaphore above @step and a lock below it, on one inline step."""

    key: str

    @with_semaphore(step_key, limit=2, wait=1)
    @step()
    @with_lock(step_key, ttl=30, wait=2)
    def both(key: str) -> str:
        return key


# -- helpers ---------------------------------------------------------------------------------------


def run_together(
    reactor: type[Reactor], keys: list[str], pool: ThreadPoolExecutor
) -> list[Outcome]:
    """Run ``reactor`` once per key, all released at once from a barrier; their outcomes."""
    barrier = threading.Barrier(len(keys))

    def one(key: str) -> Outcome:
        barrier.wait(10)
        return reactor.run(key=key)

    futures = [pool.submit(one, key) for key in keys]
    return [future.result(timeout=30) for future in futures]


def recorded(events: list[ev.Event], trace: list[dict[str, Any]]) -> dict[str, Any]:
    """What a run recorded, without what necessarily differs (ids, times, reactor names)."""
    return {
        "events": [
            (e.name, e.step, getattr(e, "key", None), str(getattr(e, "error", None)))
            for e in events
        ],
        "trace": [
            {k: str(v) if k == "error" else v for k, v in entry.items() if not k.endswith("_at")}
            for entry in trace
        ],
    }


# -- US1's lock scenarios, for every placement -----------------------------------------------------


def test_the_same_key_never_overlaps(
    placed: type[Reactor], key: str, overlap: OverlapRecorder
) -> None:
    """Two threads, ten times, same key: the locked work never overlaps (the second waits)."""
    arrivals = itertools.count()

    def serialize(k: str) -> None:
        with overlap.inside(threading.current_thread().name):
            if next(arrivals) % 2 == 0:
                # The first of each pair stays in until the second is queued on the key (or, if
                # the lock failed to exclude it, has come in: the overlap is then recorded).
                until(
                    lambda: Lock(key).state().waiters >= 1 or overlap.current > 1,
                    "Lock(key).state().waiters >= 1 or overlap.current > 1",
                )

    BEHAVIOUR[key] = serialize
    with ThreadPoolExecutor(2) as pool:
        for _ in range(10):
            for outcome in run_together(placed, [key, key], pool):
                assert isinstance(outcome, SuccessResult), outcome
    assert overlap.entries == 20
    assert overlap.max_concurrency == 1
    assert overlap.replayed_max() == 1
    assert lock_is_free(key)


def test_different_keys_overlap(placed: type[Reactor], key: str, overlap: OverlapRecorder) -> None:
    """Two threads on different keys are inside the locked work at the same time."""
    keys = [f"{key}:a", f"{key}:b"]
    meet = threading.Barrier(2)  # passed only once both are inside (it never passes serialized)

    def together(k: str) -> None:
        with overlap.inside(k):
            meet.wait(10)

    for k in keys:
        BEHAVIOUR[k] = together
    with ThreadPoolExecutor(2) as pool:
        for _ in range(3):
            for outcome in run_together(placed, keys, pool):
                assert isinstance(outcome, SuccessResult), outcome
    assert overlap.entries == 6
    assert overlap.max_concurrency == 2


def test_the_key_is_free_after_the_work_succeeds(placed: type[Reactor], key: str) -> None:
    """Held during the work; the next step finds it free for another owner."""
    outcome = placed.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.context.results["locked"] == {"shut_out": True}
    assert outcome.value == {"free": True}
    assert lock_is_free(key)


def test_the_key_is_free_after_the_work_returns_failure(placed: type[Reactor], key: str) -> None:
    """The work returns Failure: the run fails at the step and the key is free."""
    outcome = placed.run(key=key, mode="fail")
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.step_name == "locked"
    assert outcome.error == "work failed"
    assert ran == [key]
    assert lock_is_free(key)


def test_the_key_is_free_after_the_work_raises(placed: type[Reactor], key: str) -> None:
    """The work raises: the run fails at the step with the exception and the key is free."""
    outcome = placed.run(key=key, mode="raise")
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.step_name == "locked"
    assert isinstance(outcome.error, ValueError)
    assert ran == [key]
    assert lock_is_free(key)


# -- the same line, moved --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["ok", "fail", "raise"])
def test_moving_the_declaration_into_a_step_class_records_the_same(key: str, mode: str) -> None:
    """The inline declaration (either placement) moved verbatim onto a Step class: the same
    events (name, step, key, error) and the same trace entries, for success and failures."""
    records = {}
    for name, reactor in PLACEMENTS.items():
        rec = recorder()
        outcome = reactor.run(key=key, mode=mode)
        assert outcome.is_success is (mode == "ok"), outcome
        records[name] = recorded(rec.events, outcome.context.trace)
    assert records["inline_below"] == records["class"]
    assert records["inline_above"] == records["class"]
    locking = [e for e in records["class"]["events"] if e[0].startswith("lock.")]
    assert locking == [
        ("lock.acquired", "locked", key, "None"),
        ("lock.released", "locked", key, "None"),
    ]
    assert records["class"]["trace"][0]["coordination"] == {"lock": key}


# -- inline compensate and undo --------------------------------------------------------------------


@pytest.mark.parametrize("reactor", [HooksBelow, HooksAbove], ids=["below", "above"])
def test_an_inline_compensate_runs_under_the_lock(reactor: type[Reactor], key: str) -> None:
    """The locked inline step fails: its @<step>.compensate runs while the key is still held
    for the execution from the failed work (another owner is refused; nothing is taken again),
    and the key is released right after it, free afterwards."""
    rec = recorder()
    outcome = reactor.run(key=key, mode="fail")
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.step_name == "locked"
    assert hooks_seen == [
        ("compensate", {"shut_out": True, "owner": outcome.context.root_id, "count": 1})
    ]
    (entry,) = [e for e in outcome.context.trace if e["type"] == "compensate"]
    assert entry["key"] == key
    assert outcome.rollback_failures == []
    assert [e.step for e in rec.of(ev.LockAcquired)] == ["locked"]  # the work's, kept
    assert [e.step for e in rec.of(ev.LockReleased)] == ["locked"]
    assert rec.names("step.", "lock.", "compensation.") == [
        "lock.acquired",
        "step.started",
        "step.failed",
        "compensation.started",
        "compensation.completed",
        "lock.released",  # only once the compensate is done
    ]
    assert lock_is_free(key)


@pytest.mark.parametrize("reactor", [HooksBelow, HooksAbove], ids=["below", "above"])
def test_an_inline_undo_runs_under_the_lock(reactor: type[Reactor], key: str) -> None:
    """A later step fails: the locked inline step's @<step>.undo runs while the key is held for
    the execution (another owner is refused), and the key is free afterwards."""
    rec = recorder()
    outcome = reactor.run(key=key, mode="later_fails")
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.step_name == "later"
    assert hooks_seen == [
        ("undo", {"shut_out": True, "owner": outcome.context.root_id, "count": 1})
    ]
    (entry,) = [e for e in outcome.context.trace if e["type"] == "undo"]
    assert entry["key"] == key
    assert outcome.rollback_failures == []
    assert [e.step for e in rec.of(ev.LockAcquired)] == ["locked", "locked"]  # work, undo
    assert lock_is_free(key)


# -- introspection and refusals --------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PLACEMENTS))
def test_coordination_shows_the_declaration_wherever_it_is_placed(name: str) -> None:
    """Reactor.<step>.coordination is the declared mapping for the class and both placements."""
    declared = PLACEMENTS[name].locked.coordination  # type: ignore[attr-defined]
    assert dict(declared) == {"lock": LockDeclaration(step_key, wait=5)}
    assert dict(LockedWork.coordination) == dict(declared)
    with pytest.raises(TypeError, match="does not support item assignment"):
        cast(Any, declared)["lock"] = None  # read-only


def test_coordination_collects_both_sides_of_step() -> None:
    """A semaphore above @step and a lock below it both appear, with their options."""
    assert dict(Mixed.both.coordination) == {
        "lock": LockDeclaration(step_key, ttl=30, wait=2),
        "semaphore": SemaphoreDeclaration(step_key, limit=2, wait=1),
    }


@pytest.mark.parametrize(
    "declare",
    [lambda: with_lock("k"), lambda: with_semaphore("k", limit=1)],
    ids=["lock", "semaphore"],
)
def test_one_primitive_above_and_below_step_is_refused(
    declare: Callable[[], Callable[[Any], Any]],
) -> None:
    """The same primitive declared both above and below @step is a DefinitionError."""

    def define() -> None:
        class Twice(Reactor):
            key: str

            @declare()
            @step()
            @declare()
            def twice(key: str) -> str:
                return key

    with pytest.raises(DefinitionError, match="declared twice"):
        define()
