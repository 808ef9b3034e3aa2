"""Re-entrancy of step-level holds: owned by the execution's root, counted, one registry.

A step's lock belongs to the root id of the execution running it, exactly as a reactor's
does: a step locking the key its reactor holds, a composed child declaring the key, or code in
a locked step's body taking the key again all proceed at once; nested holds are counted and the
key frees with the outermost hold. Direct invocation (``Step.invoke``) honours a step's
declarations (FR-023) and joins the execution running in its thread.

"Another owner cannot take the key" is checked with an explicit foreign owner: in a thread
running an execution, a plain ``Lock(key)`` belongs to that execution and would re-enter.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from py_reactor import (
    FailureResult,
    Lock,
    Reactor,
    Semaphore,
    Step,
    SuccessResult,
    compose,
    step,
    with_lock,
    with_semaphore,
)
from py_reactor.errors import LockAcquisitionError
from py_reactor.observability import events as ev
from tests._overlap import OverlapRecorder
from tests._wait import until
from tests.engine.coordination._helpers import lock_is_free, recorder, semaphore_is_free

#: What a step's body does for a key, after looking around (cleared around every test).
BEHAVIOUR: dict[str, Callable[[Step], Any]] = {}

#: Keys whose bodies ran, in order (cleared around every test).
ran: list[str] = []


@pytest.fixture(autouse=True)
def _records() -> Iterator[None]:
    BEHAVIOUR.clear()
    ran.clear()
    yield
    BEHAVIOUR.clear()
    ran.clear()


def by_key(values: Mapping[str, Any]) -> str:
    """The key of every declaration here: the ``key`` input or argument."""
    return str(values["key"])


def by_shared(values: Mapping[str, Any]) -> str:
    """The key of the step that several executions share."""
    return str(values["shared"])


def shut_out(key: str) -> bool:
    """Whether an owner foreign to every execution is refused lock ``key`` right now."""
    try:
        hold = Lock(key, owner=f"foreign-{uuid.uuid4().hex}", wait=0).acquire()
    except LockAcquisitionError:
        return True
    hold.release()
    return False


def look(unit: Step, key: str | None = None) -> dict[str, Any]:
    """What a step body sees of lock ``key`` (default: its ``key`` input), then its BEHAVIOUR."""
    key = unit.inputs.key if key is None else key
    ran.append(key)
    state = Lock(key).state()
    seen: dict[str, Any] = {
        "owner": state.owner,
        "count": state.count,
        "held_keys": list(unit.context.held_keys),
        "shut_out": shut_out(key),
        "root": unit.context.root_id,
    }
    behaviour = BEHAVIOUR.get(key)
    if behaviour is not None:
        seen["behaviour"] = behaviour(unit)
    return seen


# -- steps and reactors ----------------------------------------------------------------------------


class Look(Step):
    """Not coordinated: reports what it sees of the lock on its key."""

    key: str

    def run(self) -> Any:
        return look(self)


@with_lock(by_key, wait=0)
class LockedLook(Step):
    """Locks its key (no waiting: contention would fail it at once) and reports what it sees."""

    key: str

    def run(self) -> Any:
        return look(self)


@with_semaphore(by_key, limit=1, wait=0)
class SemaphoreLook(Step):
    """Takes the one slot of semaphore ``key`` (no waiting) and reports the slot count."""

    key: str

    def run(self) -> Any:
        seen = look(self)
        seen["slots_held"] = Semaphore(self.inputs.key, limit=1).state().held
        return seen


@with_lock(by_key, wait=0)
@with_semaphore(by_key, limit=1, wait=0)
class LockedAndSemaphored(Step):
    """Locks its key and takes the one slot of the semaphore of the same key."""

    key: str

    def run(self) -> Any:
        return look(self)


@with_lock(by_key, wait=0.3)
class ImpatientLocked(Step):
    """Locks its key, waiting at most 0.3 s for it."""

    key: str

    def run(self) -> Any:
        ran.append(self.inputs.key)
        return {"count": Lock(self.inputs.key).state().count}


@with_lock(by_key, wait=0)
class InvokesAnother(Step):
    """Locks its key, then invokes ``ImpatientLocked`` on ``target`` and reports its outcome."""

    key: str
    target: str

    def run(self) -> Any:
        started = time.monotonic()
        inner = ImpatientLocked.invoke({"key": self.inputs.target})
        return {
            "success": inner.is_success,
            "value": inner.value if isinstance(inner, SuccessResult) else None,
            "error": inner.error if isinstance(inner, FailureResult) else None,
            "waited": time.monotonic() - started,
        }


@with_lock(by_key)
class LockedChild(Reactor):
    """A child reactor declaring the same lock as the step that runs it."""

    key: str
    probe = step(Look)
    returns = "probe"


@with_lock(by_key, wait=0)
class RunsChild(Step):
    """Locks its key, then runs ``LockedChild`` on it directly and reports the outcome."""

    key: str

    def run(self) -> Any:
        outcome = LockedChild.run(key=self.inputs.key)
        return {"status": outcome.status, "error": outcome.error, "value": outcome.value}


@with_lock(by_key, wait=0)
class RetakesInBody(Step):
    """Locks its key, then takes ``Lock(key)`` again in its body (wait=0)."""

    key: str

    def run(self) -> Any:
        with Lock(self.inputs.key, wait=0) as hold:
            return {"count": Lock(self.inputs.key).state().count, "nested": hold.count}


class StepLockChild(Reactor):
    """A child reactor with no lock of its own; one of its steps locks the key."""

    key: str
    inner = step(LockedLook)
    returns = "inner"


@with_lock(by_key)
class ReactorThenStep(Reactor):
    """The reactor locks K; its first step locks K again; a later step only looks."""

    key: str
    inner = step(LockedLook)
    later = step(Look, wait_for=["inner"])


@with_lock(by_key)
class ParentOfStepLock(Reactor):
    """The reactor locks K and composes a child whose step locks K."""

    key: str
    child = compose(StepLockChild)
    returns = "child"


class Nests(Reactor):
    """One locked step whose body runs a locked child reactor on the same key."""

    key: str
    outer = step(RunsChild)
    returns = "outer"


class Retakes(Reactor):
    key: str
    outer = step(RetakesInBody)
    returns = "outer"


class TwoLockedSteps(Reactor):
    """Two steps lock the same key, one after the other; the reactor itself locks nothing."""

    key: str
    first = step(LockedLook)
    second = step(LockedLook, wait_for=["first"])


class LockThenSemaphore(Reactor):
    """A step locks K, then two steps take the one slot of semaphore K in turn."""

    key: str
    locked = step(LockedLook)
    slot = step(SemaphoreLook, wait_for=["locked"])
    slot_again = step(SemaphoreLook, wait_for=["slot"])


class StepOnly(Reactor):
    """Only the first step coordinates (lock and semaphore on K); a later step looks."""

    key: str
    inner = step(LockedAndSemaphored)
    later = step(Look, wait_for=["inner"])


class OneLockedStep(Reactor):
    key: str
    inner = step(LockedLook)
    returns = "inner"


class InvokeNested(Reactor):
    key: str
    target: str
    outer = step(InvokesAnother)
    returns = "outer"


@with_lock(by_key)
class HoldsKey(Reactor):
    """Another execution holding K for as long as its step's BEHAVIOUR says."""

    key: str
    probe = step(Look)


@with_lock(by_shared, wait=10)
class SharedWork(Step):
    """Locks the shared key (waiting up to 10 s for it); does its key's BEHAVIOUR."""

    key: str
    shared: str

    def run(self) -> Any:
        return BEHAVIOUR[self.inputs.shared](self)


@with_lock(by_key)
class OwnThenShared(Reactor):
    """Locks its own key for the whole run; its one step locks a key shared with others."""

    key: str
    shared: str
    work = step(SharedWork)
    returns = "work"


def entries(outcome: Any, kind: str) -> list[dict[str, Any]]:
    """The trace entries of type ``kind``."""
    return [e for e in outcome.context.trace if e["type"] == kind]


# -- (1) reactor lock plus step lock ---------------------------------------------------------------


def test_a_step_re_enters_the_lock_its_reactor_holds(key: str) -> None:
    """Reactor with_lock(K) plus a step with_lock(K, wait=0) completes: the step did not wait."""
    outcome = ReactorThenStep.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    assert ran == [key, key]
    (run_entry,) = [e for e in entries(outcome, "run") if e["step"] == "inner"]
    assert run_entry["coordination"] == {"lock": key}
    assert lock_is_free(key)


# -- (2) nesting inside a locked step --------------------------------------------------------------


def test_a_child_run_directly_in_a_locked_steps_body_re_enters(key: str) -> None:
    """A locked step's body calling Child.run(...) where Child with_lock's K: both complete."""
    outcome = Nests.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.value["error"] is None, outcome.value["error"]
    assert outcome.value["status"] == "completed"
    assert lock_is_free(key)


def test_a_composed_childs_step_lock_re_enters_the_parents_lock(key: str) -> None:
    """Reactor lock K composing a child whose step locks K (wait=0) completes; count nests."""
    outcome = ParentOfStepLock.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    seen = outcome.value
    assert seen["owner"] == outcome.context.root_id
    assert seen["count"] == 2
    assert seen["held_keys"].count(f"lock:{key}") == 2
    assert seen["shut_out"] is True
    assert lock_is_free(key)
    assert outcome.context.held_keys == []


def test_a_lock_taken_again_in_a_locked_steps_body_re_enters(key: str) -> None:
    """Lock(K, wait=0) taken in the body of a step locking K is a nested hold, not contention."""
    outcome = Retakes.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.value == {"count": 2, "nested": 2}
    assert lock_is_free(key)


# -- (3) nested holds are counted ------------------------------------------------------------------


def test_nested_holds_are_counted_and_the_key_frees_with_the_outermost(key: str) -> None:
    """Inside the step K is held twice; a later step sees it once and still held; then free."""
    outcome = ReactorThenStep.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    inner, later = outcome.context.results["inner"], outcome.context.results["later"]
    assert inner["held_keys"].count(f"lock:{key}") == 2
    assert inner["count"] == 2
    assert later["held_keys"].count(f"lock:{key}") == 1
    assert later["count"] == 1
    assert later["owner"] == outcome.context.root_id
    assert later["shut_out"] is True  # the reactor's hold still excludes everyone else
    assert outcome.context.held_keys == []
    assert lock_is_free(key)
    assert not shut_out(key)


# -- (4) several steps of one reactor on one key ---------------------------------------------------


def test_two_steps_locking_the_same_key_run_one_after_the_other(key: str) -> None:
    """Two steps with_lock(K, wait=0) in one reactor each take K alone, in order; both complete."""
    rec = recorder()
    outcome = TwoLockedSteps.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    assert [e["step"] for e in entries(outcome, "run")] == ["first", "second"]
    for name in ("first", "second"):
        seen = outcome.context.results[name]
        assert seen["count"] == 1  # the first step's hold was released before the second's
        assert seen["held_keys"] == [f"lock:{key}"]
        assert seen["shut_out"] is True
    assert [(e.name, e.step) for e in rec.events if e.name.startswith("lock.")] == [
        ("lock.acquired", "first"),
        ("lock.released", "first"),
        ("lock.acquired", "second"),
        ("lock.released", "second"),
    ]
    assert lock_is_free(key)


def test_a_lock_step_then_semaphore_steps_on_the_same_key(key: str) -> None:
    """A step locking K, then two steps taking semaphore K (limit 1) in turn: all complete."""
    outcome = LockThenSemaphore.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    assert [e["step"] for e in entries(outcome, "run")] == ["locked", "slot", "slot_again"]
    assert outcome.context.results["locked"]["held_keys"] == [f"lock:{key}"]
    for name in ("slot", "slot_again"):
        seen = outcome.context.results[name]
        assert seen["held_keys"] == [f"semaphore:{key}"]
        assert seen["slots_held"] == 1
        assert seen["count"] == 0  # the lock step's hold is gone
    assert lock_is_free(key)
    assert semaphore_is_free(key)


# -- (5) the registry ------------------------------------------------------------------------------


def test_the_registry_lists_step_holds_during_the_body_only(key: str) -> None:
    """held_keys lists the step's lock and semaphore while its body runs, and nothing after."""
    outcome = StepOnly.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    inner, later = outcome.context.results["inner"], outcome.context.results["later"]
    assert inner["held_keys"] == [f"lock:{key}", f"semaphore:{key}"]
    assert inner["shut_out"] is True
    assert later["held_keys"] == []
    assert later["count"] == 0
    assert later["shut_out"] is False
    assert outcome.context.held_keys == []


# -- (6) the owner ---------------------------------------------------------------------------------


def test_a_step_hold_is_owned_by_the_runs_root_id(key: str) -> None:
    """While the step runs, K's owner is the root id: that id re-enters, any other is refused."""
    entered = threading.Event()
    finish = threading.Event()
    seen: dict[str, Any] = {}

    def block(unit: Step) -> str:
        seen["root"] = unit.context.root_id
        entered.set()
        assert finish.wait(10)
        return "done"

    BEHAVIOUR[key] = block
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(OneLockedStep.run, key=key)
        try:
            assert entered.wait(10)
            state = Lock(key).state()
            with pytest.raises(LockAcquisitionError):
                Lock(key, wait=0).acquire()  # a fresh owner of this (other) thread
            with Lock(key, owner=seen["root"], wait=0) as hold:  # the execution's own id
                assert hold.count == 2
        finally:
            finish.set()
        outcome = future.result(timeout=10)
    assert isinstance(outcome, SuccessResult), outcome
    assert state.owner == seen["root"] == outcome.context.root_id == outcome.execution_id
    assert state.count == 1
    assert lock_is_free(key)


# -- (7) direct invocation -------------------------------------------------------------------------


def test_direct_invocation_waits_then_fails_while_another_owner_holds_the_key(key: str) -> None:
    """Step.invoke while K is held elsewhere waits its wait (0.3 s), then returns a failure."""
    rec = recorder()
    with Lock(key, wait=0):
        started = time.monotonic()
        outcome = ImpatientLocked.invoke({"key": key})
        waited = time.monotonic() - started
    assert isinstance(outcome, FailureResult), outcome
    assert isinstance(outcome.error, LockAcquisitionError)
    assert outcome.error.key == key
    assert outcome.error.primitive == "lock"
    assert 0.25 <= waited < 5
    assert ran == []  # the body never ran
    assert [e.key for e in rec.of(ev.LockAcquisitionFailed)] == [key]
    assert rec.of(ev.LockAcquired) == []
    assert lock_is_free(key)


def test_direct_invocation_takes_and_releases_a_free_key(key: str) -> None:
    """Step.invoke on a free K takes it for the body (it is held there) and releases it."""
    rec = recorder()
    outcome = ImpatientLocked.invoke({"key": key})
    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.value == {"count": 1}
    assert [e.key for e in rec.of(ev.LockAcquired)] == [key]
    assert [e.key for e in rec.of(ev.LockReleased)] == [key]
    assert lock_is_free(key)


# -- (8) no double take ----------------------------------------------------------------------------


def test_an_executor_driven_run_takes_the_step_lock_once(key: str) -> None:
    """A reactor running a locked step: exactly one LockAcquired for it, and count 1 inside."""
    rec = recorder()
    outcome = OneLockedStep.run(key=key)
    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.value["count"] == 1
    assert [(e.key, e.step) for e in rec.of(ev.LockAcquired)] == [(key, "inner")]
    assert [(e.key, e.step) for e in rec.of(ev.LockReleased)] == [(key, "inner")]


# -- (9) invoke inside a locked body ---------------------------------------------------------------


def test_invoke_in_a_locked_body_re_enters_the_same_key(key: str) -> None:
    """A body locking K invokes another step locking K: the invoke proceeds as a nested hold."""
    outcome = InvokeNested.run(key=key, target=key)
    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.value["success"] is True, outcome.value["error"]
    assert outcome.value["value"] == {"count": 2}
    assert lock_is_free(key)


def test_invoke_in_a_locked_body_fails_on_a_key_another_execution_holds(key: str) -> None:
    """The body's invoke on a key held by another execution fails after its wait; the body
    gets an ordinary failed outcome, and its own step still completes."""
    busy = f"{key}:busy"
    entered = threading.Event()
    finish = threading.Event()

    def hold(unit: Step) -> str:
        entered.set()
        assert finish.wait(10)
        return "held"

    BEHAVIOUR[busy] = hold
    with ThreadPoolExecutor(1) as pool:
        holder = pool.submit(HoldsKey.run, key=busy)
        try:
            assert entered.wait(10)
            outcome = InvokeNested.run(key=key, target=busy)
        finally:
            finish.set()
        assert holder.result(timeout=10).is_success
    assert isinstance(outcome, SuccessResult), outcome
    seen = outcome.value
    assert seen["success"] is False
    assert isinstance(seen["error"], LockAcquisitionError)
    assert seen["error"].key == busy
    assert 0.25 <= seen["waited"] < 5
    assert lock_is_free(key)
    assert lock_is_free(busy)


# -- (10) two executions, own keys and a shared step -----------------------------------------------


def test_executions_with_own_keys_serialize_on_a_shared_step_lock(
    key: str, overlap: OverlapRecorder
) -> None:
    """Two executions, each locking its own key, whose steps lock one shared key: no deadlock,
    and the shared step's bodies never overlap (the second waits queued on the shared key)."""
    shared = f"{key}:shared"
    arrivals = itertools.count()

    def serialize(unit: Step) -> str:
        with overlap.inside(unit.inputs.key):
            if next(arrivals) == 0:
                # Stay inside until the other execution is queued on the shared key (or, if
                # the lock failed to exclude it, has come in: the overlap is then recorded).
                until(
                    lambda: Lock(shared).state().waiters >= 1 or overlap.current > 1,
                    "Lock(shared).state().waiters >= 1 or overlap.current > 1",
                )
            return str(unit.inputs.key)

    BEHAVIOUR[shared] = serialize
    own = [f"{key}:a", f"{key}:b"]
    barrier = threading.Barrier(2)

    def one(own_key: str) -> Any:
        barrier.wait(10)
        return OwnThenShared.run(key=own_key, shared=shared)

    with ThreadPoolExecutor(2) as pool:
        outcomes = [f.result(timeout=30) for f in [pool.submit(one, k) for k in own]]
    for outcome in outcomes:
        assert isinstance(outcome, SuccessResult), outcome
    assert sorted(o.value for o in outcomes) == own
    assert overlap.entries == 2
    assert overlap.max_concurrency == 1
    assert all(lock_is_free(k) for k in [*own, shared])
