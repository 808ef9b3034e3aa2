"""US1: a Step class that declares ``with_lock`` holds the lock around its own work only.

The key comes from the step's resolved, validated arguments. Every step body here goes through
``work``: it notes that it ran, records its stay in an ``OverlapRecorder`` of its own label
(Redis-backed, so concurrent threads are counted together) and runs the hook the test
registered for that label, else works for ``HOLD`` seconds. Locks are keyed
``<ns>:acct:<account_id>`` where ``ns`` is the test's unique ``key``, so tests never share keys.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from py_reactor import (
    Failure,
    FailureResult,
    Halt,
    Input,
    Lock,
    Reactor,
    Result,
    Skipped,
    Step,
    configure,
    retries,
    step,
    with_lock,
)
from py_reactor.errors import (
    CoordinationKeyError,
    LockAcquisitionError,
    StoreUnavailableError,
)
from py_reactor.observability import events as ev
from tests._overlap import OverlapRecorder
from tests.engine.coordination._helpers import lock_is_free, recorder
from tests.engine.step_coordination import _spawned

SPAWN = multiprocessing.get_context("spawn")

#: Seconds a step body works when no hook says otherwise (long enough for a rival to be inside).
HOLD = 0.02

#: A store nobody listens on.
UNREACHABLE = "redis://127.0.0.1:1"


@dataclass
class World:
    """What one test's step bodies share: recorders per label, hooks, what ran and rolled back."""

    url: str
    name: str
    hooks: dict[str, Callable[[Step], Any]] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    _recorders: dict[str, OverlapRecorder] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def inside(self, label: str) -> OverlapRecorder:
        """The recorder of the bodies labelled ``label``."""
        with self._guard:
            if label not in self._recorders:
                self._recorders[label] = OverlapRecorder(self.url, f"{self.name}-{label}")
            return self._recorders[label]


#: The world of each running test, by its ``key`` (the ``ns`` argument of every step).
WORLDS: dict[str, World] = {}


@pytest.fixture
def world(key: str, overlap: OverlapRecorder) -> Iterator[World]:
    """This test's world, reachable from step bodies through their ``ns`` argument."""
    WORLDS[key] = World(overlap.url, overlap.name)
    yield WORLDS[key]
    del WORLDS[key]


def work(label: str, unit: Step) -> Any:
    """A step body: note it ran, record the stay under ``label``, run the hook or work."""
    world = WORLDS[unit.inputs.ns]
    world.ran.append(label)
    with world.inside(label).inside(label):
        hook = world.hooks.get(label)
        if hook is not None:
            return hook(unit)
        time.sleep(HOLD)  # the work itself: it takes this long
    return label


def acct_key(args: Mapping[str, Any]) -> str:
    """The lock key of the charge steps: ``<ns>:acct:<account_id>``."""
    return f"{args['ns']}:acct:{args['account_id']}"


def free_for_another(key: str) -> bool:
    """Whether an owner other than the running execution can take ``key`` at once.

    Callable from inside a step body: an explicit owner is not the execution's root id, so the
    execution's own hold is not re-entered.
    """
    try:
        hold = Lock(key, owner="probe", wait=0, auto_extend=False).acquire()
    except LockAcquisitionError:
        return False
    hold.release()
    return True


def held_keys(unit: Step) -> list[str]:
    """The execution's registry of held keys, as the step body sees it."""
    return list(unit.context.held_keys)


# -- steps and reactors ------------------------------------------------------------------------


class Prepare(Step):
    """An uncoordinated step before the locked one; its undo is recorded."""

    ns: str
    account_id: int

    def run(self) -> Any:
        return work("prepare", self)

    def undo(self, result: Any) -> Any:
        WORLDS[self.inputs.ns].rolled_back.append("undo prepare")
        return None


@with_lock(acct_key, wait=5)
class Charge(Step):
    """The locked step: waits up to 5 s for the account's lock."""

    ns: str
    account_id: int

    def run(self) -> Any:
        return work("charge", self)

    def compensate(self, error: Any) -> Any:
        WORLDS[self.inputs.ns].rolled_back.append("compensate charge")
        return None


class Confirm(Step):
    """An uncoordinated step after the locked one."""

    ns: str
    account_id: int

    def run(self) -> Any:
        return work("confirm", self)


class ChargeFlow(Reactor):
    ns: str
    account_id: int
    prepare = step(Prepare)
    charge = step(Charge, wait_for="prepare")
    confirm = step(Confirm, wait_for="charge")
    returns = "charge"


class Shift(Step):
    """Computes the account the charge is for: the input plus 100."""

    ns: str
    account_id: int

    def run(self) -> Any:
        return self.inputs.account_id + 100


class ShiftToText(Step):
    """Computes the account as zero-padded text; the charge's contract makes it an int again."""

    ns: str
    account_id: int

    def run(self) -> Any:
        return f"0{self.inputs.account_id + 100}"


class TransformedFlow(Reactor):
    ns: str
    account_id: int
    charge = step(Charge, account_id=Input("account_id", transform=lambda v: v + 100))


class WiredFlow(Reactor):
    ns: str
    account_id: int
    shift = step(Shift)
    charge = step(Charge, account_id=Result("shift"))


class CoercedFlow(Reactor):
    ns: str
    account_id: int
    shift = step(ShiftToText)
    charge = step(Charge, account_id=Result("shift"))


def fragile_key(args: Mapping[str, Any]) -> Any:
    """A key function that fails as ``how`` says: raise, None, "" (or a good key for "ok")."""
    how = args["how"]
    if how == "raise":
        raise RuntimeError("no account on file")
    if how == "none":
        return None
    if how == "empty":
        return ""
    return f"{args['ns']}:fragile"


@with_lock(fragile_key, wait=5)
class Fragile(Step):
    ns: str
    how: str

    def run(self) -> Any:
        return work("fragile", self)

    def compensate(self, error: Any) -> Any:
        WORLDS[self.inputs.ns].rolled_back.append("compensate fragile")
        return None


class FragileFlow(Reactor):
    ns: str
    how: str
    account_id: int = 1
    prepare = step(Prepare)
    fragile = step(Fragile, wait_for="prepare")


GUARD_VERDICTS: dict[str, Any] = {
    "allow": None,
    "false": False,
    "skipped": Skipped(reason="nothing to charge"),
    "failure": Failure("not today", retryable=False),
    "halt": Halt("account frozen"),
}


@with_lock(acct_key, wait=5)
class Picky(Step):
    """A locked step whose guard answers what ``verdict`` names."""

    ns: str
    account_id: int
    verdict: str

    def guard(self) -> Any:
        return GUARD_VERDICTS[self.inputs.verdict]

    def run(self) -> Any:
        return work("picky", self)


class PickyFlow(Reactor):
    ns: str
    account_id: int
    verdict: str
    picky = step(Picky)


@with_lock(acct_key, ttl=1, auto_extend=True, wait=5)
class ShortCharge(Step):
    """A lock that lapses after 1 s unless the running step keeps extending it."""

    ns: str
    account_id: int

    def run(self) -> Any:
        return work("short", self)


class ShortFlow(Reactor):
    ns: str
    account_id: int
    charge = step(ShortCharge)


@with_lock(acct_key, wait=0)
class Grab(Step):
    """A competitor that does not wait for the account's lock."""

    ns: str
    account_id: int

    def run(self) -> Any:
        return work("grab", self)


class GrabFlow(Reactor):
    ns: str
    account_id: int
    grab = step(Grab)


@retries(max_attempts=3, backoff="fixed", base_delay=0)
@with_lock(acct_key, wait=0.2)
class ImpatientCharge(Step):
    """Waits 0.2 s for the lock; its own failures are retried up to three attempts."""

    ns: str
    account_id: int

    def run(self) -> Any:
        return work("charge", self)

    def compensate(self, error: Any) -> Any:
        WORLDS[self.inputs.ns].rolled_back.append("compensate charge")
        return None


class ImpatientFlow(Reactor):
    ns: str
    account_id: int
    prepare = step(Prepare)
    charge = step(ImpatientCharge, wait_for="prepare")


def run_pair(work_of: Callable[[int], Any]) -> list[Any]:
    """Run ``work_of(0)`` and ``work_of(1)`` on two threads released together."""
    start = threading.Barrier(2)

    def go(i: int) -> Any:
        start.wait(10)
        return work_of(i)

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(go, range(2)))


# -- (1) (2) serialization ---------------------------------------------------------------------


def test_same_key_never_overlaps_inside_the_step(world: World, key: str) -> None:
    """20 times, two runs on one account: the charge bodies are never inside together."""
    for _ in range(20):
        outcomes = run_pair(lambda i: ChargeFlow.run(ns=key, account_id=1))
        assert [o.status for o in outcomes] == ["completed", "completed"], outcomes
    charge = world.inside("charge")
    assert charge.entries == 40
    assert charge.max_concurrency == 1
    assert charge.overlaps == 0
    assert charge.replayed_max() == 1
    assert lock_is_free(f"{key}:acct:1")


def test_different_keys_do_overlap_inside_the_step(world: World, key: str) -> None:
    """Two runs on two accounts are inside the charge together (they meet at a barrier)."""
    both_inside = threading.Barrier(2)
    world.hooks["charge"] = lambda unit: both_inside.wait(5)
    outcomes = run_pair(lambda i: ChargeFlow.run(ns=key, account_id=i + 1))
    assert [o.status for o in outcomes] == ["completed", "completed"], outcomes
    charge = world.inside("charge")
    assert charge.max_concurrency == 2
    assert charge.overlaps == 1


# -- (3) (4) (5) release -----------------------------------------------------------------------


def test_the_next_step_finds_the_key_free(world: World, key: str) -> None:
    """Held (by this run) during the locked step; free for anyone once the next step runs."""
    lock_key = f"{key}:acct:1"
    seen: dict[str, Any] = {}

    def during(unit: Step) -> str:
        seen["charge"] = (free_for_another(lock_key), held_keys(unit))
        return "charged"

    def after(unit: Step) -> str:
        seen["confirm"] = (free_for_another(lock_key), held_keys(unit))
        return "confirmed"

    world.hooks.update(charge=during, confirm=after)
    rec = recorder()
    outcome = ChargeFlow.run(ns=key, account_id=1)
    assert outcome.status == "completed", outcome
    assert seen["charge"] == (False, [f"lock:{lock_key}"])
    assert seen["confirm"] == (True, [])
    order = ["step.started", "lock.acquired", "step.started", "lock.released", "step.started"]
    assert rec.names("lock.", "step.started") == order  # prepare, charge (locked), confirm
    assert [(e.step, e.key) for e in rec.of(ev.LockAcquired)] == [("charge", lock_key)]


def _fail(unit: Step) -> Any:
    return Failure("card declined", retryable=False)


def _raise(unit: Step) -> Any:
    raise ValueError("gateway exploded")


@pytest.mark.parametrize("end", [_fail, _raise], ids=["returns-failure", "raises"])
def test_a_failing_body_leaves_the_key_free(
    world: World, key: str, end: Callable[[Step], Any]
) -> None:
    """The body fails (Failure or exception) while holding the key; afterwards it is free."""
    lock_key = f"{key}:acct:1"
    held: list[bool] = []

    def body(unit: Step) -> Any:
        held.append(not free_for_another(lock_key))
        return end(unit)

    world.hooks["charge"] = body
    outcome = ChargeFlow.run(ns=key, account_id=1)
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.step_name == "charge"
    assert held == [True]
    assert world.ran == ["prepare", "charge"]
    assert world.rolled_back == ["compensate charge", "undo prepare"]
    assert lock_is_free(lock_key)
    assert Lock(lock_key).state().owner is None


# -- (6) the key comes from the step's resolved arguments ---------------------------------------


@pytest.mark.parametrize(
    "flow",
    [TransformedFlow, WiredFlow, CoercedFlow],
    ids=["input-transform", "result-of-earlier-step", "validated-coerced"],
)
def test_the_key_comes_from_the_resolved_argument(
    world: World, key: str, flow: type[Reactor]
) -> None:
    """Reactor input account_id=1, step argument 101: the lock taken is acct:101, not acct:1."""
    wired, raw = f"{key}:acct:101", f"{key}:acct:1"
    seen: list[tuple[bool, bool]] = []

    def body(unit: Step) -> Any:
        seen.append((free_for_another(wired), free_for_another(raw)))
        return unit.inputs.account_id

    world.hooks["charge"] = body
    rec = recorder()
    outcome = flow.run(ns=key, account_id=1)
    assert outcome.status == "completed", outcome
    assert outcome.context.results["charge"] == 101
    assert seen == [(False, True)]
    assert [(e.step, e.key) for e in rec.of(ev.LockAcquired)] == [("charge", wired)]
    runs = [e for e in outcome.context.trace if e["type"] == "run" and e["step"] == "charge"]
    assert [e["coordination"] for e in runs] == [{"lock": wired}]


# -- (7) a key function that fails -------------------------------------------------------------


@pytest.mark.parametrize(
    ("how", "said"),
    [("raise", "no account on file"), ("none", "None"), ("empty", "''")],
)
def test_a_failing_key_function_fails_the_step_before_its_work(
    world: World, key: str, how: str, said: str
) -> None:
    """Key raises / None / "": CoordinationKeyError names the step; no work ran; undo ran."""
    rec = recorder()
    outcome = FragileFlow.run(ns=key, how=how)
    assert isinstance(outcome, FailureResult), outcome
    error = outcome.error
    assert isinstance(error, CoordinationKeyError), error
    assert error.step == "fragile"
    assert error.reactor == "FragileFlow"
    assert outcome.step_name == "fragile"
    assert "'fragile'" in str(error)
    assert said in str(error)
    if how == "raise":
        assert isinstance(error.__cause__, RuntimeError)
    assert world.ran == ["prepare"]
    assert world.rolled_back == ["undo prepare"]
    assert rec.of(ev.LockAcquired) == []
    assert lock_is_free(f"{key}:fragile")


def test_a_good_key_lets_the_fragile_step_run(world: World, key: str) -> None:
    """The control of the test above: with a usable key the same step runs under its lock."""
    rec = recorder()
    outcome = FragileFlow.run(ns=key, how="ok")
    assert outcome.status == "completed", outcome
    assert world.ran == ["prepare", "fragile"]
    assert [(e.step, e.key) for e in rec.of(ev.LockAcquired)] == [("fragile", f"{key}:fragile")]


# -- (8) a refused step takes nothing ----------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "status"),
    [("false", "failed"), ("failure", "failed"), ("skipped", "completed"), ("halt", "halted")],
)
def test_a_guard_refused_step_takes_nothing(
    world: World, key: str, verdict: str, status: str
) -> None:
    """While another owner holds the key, a refused step settles at once: it never asked for it."""
    lock_key = f"{key}:acct:1"
    rec = recorder()
    outside = Lock(lock_key).acquire()
    try:
        outcome = PickyFlow.run(ns=key, account_id=1, verdict=verdict)
        assert Lock(lock_key).state().owner == outside.owner
    finally:
        outside.release()
    assert outcome.status == status, outcome
    assert not isinstance(outcome.error, LockAcquisitionError)
    assert world.ran == []
    assert rec.of(ev.LockAcquired) == []
    assert rec.of(ev.LockAcquisitionFailed) == []
    assert lock_is_free(lock_key)


def test_an_allowing_guard_takes_the_lock(world: World, key: str) -> None:
    """The control of the test above: a guard that allows lets the step take its lock."""
    rec = recorder()
    outcome = PickyFlow.run(ns=key, account_id=1, verdict="allow")
    assert outcome.status == "completed", outcome
    assert world.ran == ["picky"]
    assert [(e.step, e.key) for e in rec.of(ev.LockAcquired)] == [("picky", f"{key}:acct:1")]


# -- (9) auto-extend ---------------------------------------------------------------------------


def test_auto_extend_keeps_a_short_lock_through_a_long_body(world: World, key: str) -> None:
    """ttl=1 and a 2.5 s body: a competitor with wait=0 is refused every time it tries."""
    lock_key = f"{key}:acct:1"
    entered, release = threading.Event(), threading.Event()

    def hold(unit: Step) -> str:
        entered.set()
        if not release.wait(10):
            raise TimeoutError("the test never released the body")
        return "held"

    world.hooks["short"] = hold
    refusals: list[str] = []
    ttls: list[float | None] = []
    with ThreadPoolExecutor(1) as pool:
        holder = pool.submit(ShortFlow.run, ns=key, account_id=1)
        try:
            assert entered.wait(10), "the holder never entered its step"
            began = time.monotonic()
            while time.monotonic() - began < 2.5:
                outcome = GrabFlow.run(ns=key, account_id=1)
                refusals.append(type(outcome.error).__name__ if outcome.error else outcome.status)
                ttls.append(Lock(lock_key).state().ttl)
                time.sleep(0.2)  # pacing: the probes spread over the body's 2.5 s
        finally:
            release.set()
        held = holder.result(10)
    assert held.status == "completed", held
    assert len(refusals) >= 5
    assert set(refusals) == {"LockAcquisitionError"}, refusals
    assert all(ttl is not None and ttl <= 1 for ttl in ttls), ttls
    assert "grab" not in world.ran
    after = GrabFlow.run(ns=key, account_id=1)  # the competitor can win once the body is done
    assert after.status == "completed", after
    assert world.ran == ["short", "grab"]


# -- (10) a killed holder ----------------------------------------------------------------------


def test_a_killed_holders_step_lock_lapses_after_its_ttl(redis_url: str, key: str) -> None:
    """kill -9 of a process inside a ttl=2 step lock: still held at death, free within the ttl."""
    lock_key = _spawned.held_key({"ns": key, "account_id": 7})
    inside = SPAWN.Event()
    child = SPAWN.Process(
        target=_spawned.hold_forever, args=(redis_url, key, 7, inside), daemon=True
    )
    child.start()
    try:
        assert inside.wait(60), "the child never entered its locked step"
        state = Lock(lock_key).state()
        assert state.owner is not None
        assert state.ttl is not None
        assert state.ttl <= _spawned.KILLABLE_TTL
    finally:
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    assert child.exitcode == -signal.SIGKILL
    assert not lock_is_free(lock_key), "the lock must outlive its holder until the ttl"
    started = time.monotonic()
    outcome = _spawned.Held.run(ns=key, account_id=7)  # waits up to 5 s for the step lock
    elapsed = time.monotonic() - started
    assert outcome.status == "completed", outcome
    assert elapsed < _spawned.KILLABLE_TTL + 2
    assert Lock(lock_key).state().owner is None


# -- (11) the store is unreachable -------------------------------------------------------------


def test_an_unreachable_store_fails_the_step_before_its_work(world: World, key: str) -> None:
    """With the store down the locked step fails with StoreUnavailableError; its body never ran."""
    configure(redis_url=UNREACHABLE)
    outcome = ChargeFlow.run(ns=key, account_id=1)
    assert isinstance(outcome, FailureResult), outcome
    error = outcome.error
    assert isinstance(error, StoreUnavailableError), error
    assert error.step == "charge"
    assert error.reactor == "ChargeFlow"
    assert outcome.step_name == "charge"
    assert "127.0.0.1:1" in str(error)
    assert world.ran == ["prepare"]
    assert world.rolled_back == ["undo prepare"]


# -- contention --------------------------------------------------------------------------------


def test_contention_fails_the_step_once_and_rolls_back_the_earlier_ones(
    world: World, key: str
) -> None:
    """Key held elsewhere: after 0.2 s the step fails with a located LockAcquisitionError.

    Not retried despite @retries, not compensated (its work never started); earlier steps undone.
    """
    lock_key = f"{key}:acct:1"
    rec = recorder()
    outside = Lock(lock_key).acquire()
    try:
        started = time.monotonic()
        outcome = ImpatientFlow.run(ns=key, account_id=1)
        elapsed = time.monotonic() - started
    finally:
        outside.release()
    assert isinstance(outcome, FailureResult), outcome
    error = outcome.error
    assert isinstance(error, LockAcquisitionError), error
    assert error.reactor == "ImpatientFlow"
    assert error.step == "charge"
    assert error.key == lock_key
    assert error.primitive == "lock"
    assert str(error).startswith("reactor ImpatientFlow, step 'charge': ")
    assert lock_key in str(error)
    assert outcome.step_name == "charge"
    assert world.ran == ["prepare"]
    assert world.rolled_back == ["undo prepare"]
    assert elapsed >= 0.2  # it waited out its 0.2 s
    assert len(rec.of(ev.LockAcquisitionFailed)) == 1  # one wait, not three
    assert [e.step for e in rec.of(ev.StepStarted)] == ["prepare"]  # charge's work never did
    assert [e.step for e in rec.of(ev.StepFailed)] == ["charge"]
    assert rec.of(ev.StepRetried) == []
    assert [(e.step, e.key) for e in rec.of(ev.LockAcquisitionFailed)] == [("charge", lock_key)]
    failed = [e for e in outcome.context.trace if e["type"] == "failed"]
    assert [(e["step"], e["refused_by"], e["key"]) for e in failed] == [
        ("charge", "coordination", lock_key)
    ]


def test_retries_do_apply_to_the_steps_own_failures(world: World, key: str) -> None:
    """The control of the test above: the same step's own exception is retried (lock per try)."""
    calls: list[int] = []

    def flaky(unit: Step) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("gateway blinked")
        return "charged"

    world.hooks["charge"] = flaky
    rec = recorder()
    outcome = ImpatientFlow.run(ns=key, account_id=1)
    assert outcome.status == "completed", outcome
    assert [e.attempt for e in rec.of(ev.StepStarted) if e.step == "charge"] == [1, 2]
    assert len(rec.of(ev.LockAcquired)) == 2
    assert len(rec.of(ev.LockReleased)) == 2


#: Read through a variable: a constant ``args['account']`` is refused at class definition.
MISNAMED = "account"


@with_lock(lambda args: f"acct:{args[MISNAMED]}")  # the argument is called account_id
class MisnamedKey(Step):
    account_id: int

    def run(self) -> Any:
        raise AssertionError("a step whose key cannot be computed never runs")


class MisnamedKeyFlow(Reactor):
    account_id: int
    charge = step(MisnamedKey)


def test_a_key_function_reading_a_missing_argument_is_told_what_it_receives() -> None:
    """The key error names the arguments the key function was given, so a typo is obvious."""
    outcome = MisnamedKeyFlow.run(account_id=7)
    assert isinstance(outcome.error, CoordinationKeyError)
    assert "KeyError: 'account'" in str(outcome.error)
    assert "it receives a mapping of 'account_id'" in str(outcome.error)
