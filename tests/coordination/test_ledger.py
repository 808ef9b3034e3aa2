"""Holds as data: a scope's holds are records in a ledger that another process can pick up.

A scope built again from a ledger that went through JSON (as a worker resuming a parked
execution builds it) adopts the holds it finds there: no second acquisition, the same fencing
token; a run recovering one whose runner was presumed dead re-enters a lock or slot beside that
runner's instead. A hold that lapsed in the gap is competed for again.
A park gives back everything but the ordered position.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import redis

from py_reactor import (
    Lock,
    OrderedLock,
    Reactor,
    Semaphore,
    Step,
    dumps_context,
    loads_context,
    with_lock,
    with_semaphore,
)
from py_reactor import step as step_
from py_reactor.coordination.declarations import (
    LockDeclaration,
    OrderedLockDeclaration,
    RateLimitDeclaration,
    SemaphoreDeclaration,
)
from py_reactor.coordination.gates import Busy
from py_reactor.coordination.holds import HELD, WAITING, Ledger
from py_reactor.coordination.owner import bind_owner, unbind_owner
from py_reactor.coordination.scope import Admission, Scope
from py_reactor.coordination.store import Store
from py_reactor.errors import LockAcquisitionError, OrderedLockWaitError
from tests.coordination._helpers import leave_room

pytestmark = pytest.mark.usefixtures("store")


def _scope(
    ledger: Ledger,
    key: str,
    holder: str = "ex1:charge",
    events: list[Any] | None = None,
    recovered: bool = False,
    **decl: Any,
) -> Scope:
    declarations = decl or {"lock": LockDeclaration(key, ttl=30)}

    def emit(event: str, key: str, **fields: Any) -> None:
        if events is not None:
            events.append((event, key, fields))

    return Scope(
        declarations,
        {},
        reactor="R",
        step="charge",
        ledger=ledger,
        holder=holder,
        emit=emit,
        recovered=recovered,
    )


def _through_json(ledger: Ledger) -> Ledger:
    """The ledger as another process reads it back."""
    return Ledger.from_list(json.loads(json.dumps(ledger.to_list())))


def _owned(owner: str) -> Any:
    return bind_owner(owner)


def test_a_scope_writes_what_it_holds_into_the_ledger_and_removes_it_on_exit(key: str) -> None:
    """Entering records lock and semaphore (with token, owner, step, ttl); exit empties it."""
    ledger = Ledger()
    token = _owned("root-1")
    try:
        scope = _scope(
            ledger,
            key,
            lock=LockDeclaration(key, ttl=30),
            semaphore=SemaphoreDeclaration(key, limit=2),
        )
        assert scope.enter() is Admission.PROCEED
        lock, semaphore = ledger.records
        assert (lock.primitive, lock.key, lock.owner, lock.step) == (
            "lock",
            key,
            "root-1",
            "charge",
        )
        assert lock.data["fencing_token"] == Lock(key).state().fencing_token
        assert lock.data["ttl"] == 30
        assert semaphore.primitive == "semaphore"
        assert semaphore.state == HELD
        assert ledger.held_keys == [f"lock:{key}", f"semaphore:{key}"]
        scope.exit(succeeded=True, failed=False)
    finally:
        unbind_owner(token)
    assert ledger.records == []
    assert Lock(key).state().owner is None
    assert Semaphore(key, limit=2).state().held == 0


def test_a_scope_built_again_from_json_adopts_its_holds_without_a_second_acquisition(
    key: str,
) -> None:
    """Detached (as at a park), read back from JSON by "another process": the new scope
    re-enters with the same fencing token, reports no acquisition, and another owner stays
    out all along; its exit frees the key."""
    ledger = Ledger()
    token = _owned("root-2")
    try:
        first = _scope(ledger, key)
        first.enter()
        first.detach()  # stops extending here; the record stays held
        fencing = ledger.records[0].data["fencing_token"]
        with pytest.raises(LockAcquisitionError):
            Lock(key, owner="someone-else").acquire()
        events: list[Any] = []
        again = _scope(_through_json(ledger), key, events=events)
        assert again.enter() is Admission.PROCEED
        assert events == []  # adopted, not acquired: nothing claims a second acquisition
        assert Lock(key).state().fencing_token == fencing
        assert Lock(key).state().count == 1
        with pytest.raises(LockAcquisitionError):
            Lock(key, owner="someone-else").acquire()
        again.exit(succeeded=True, failed=False)
    finally:
        unbind_owner(token)
    assert Lock(key).state().owner is None


def test_a_hold_that_lapsed_in_the_gap_is_competed_for_again(key: str) -> None:
    """The detached hold expires (ttl 0.2 s, nobody extends it); another owner takes the key;
    the resumed scope waits its turn like anyone, then holds it with a newer token."""
    ledger = Ledger()
    token = _owned("root-3")
    try:
        first = _scope(ledger, key, lock=LockDeclaration(key, ttl=0.2, wait=5))
        first.enter()
        first.detach()
        old = ledger.records[0].data["fencing_token"]
        time.sleep(0.3)
        other = Lock(key, owner="someone-else", ttl=30).acquire()
        threading.Timer(0.2, other.release).start()
        events: list[Any] = []
        again = _scope(
            _through_json(ledger), key, events=events, lock=LockDeclaration(key, ttl=30, wait=5)
        )
        assert again.enter() is Admission.PROCEED
        assert [e[0] for e in events] == ["lock.acquired"]
        (record,) = again.records()
        assert record.data["fencing_token"] > other.fencing_token > old
        again.exit(succeeded=True, failed=False)
    finally:
        unbind_owner(token)


def test_a_park_gives_back_everything_but_the_ordered_position(key: str) -> None:
    """A scope that parks releases its lock at once and keeps its place in the ordered line;
    entered again, it reuses that position instead of queueing at the back."""
    ledger = Ledger()
    sequence = OrderedLock(f"seq-{key}")
    first_in_line = sequence.take_position()
    token = _owned("root-4")
    try:
        declared = {
            "ordered_lock": OrderedLockDeclaration(f"seq-{key}", wait=0),
            "lock": LockDeclaration(key),
        }
        scope = _scope(ledger, key, **declared)
        busy = scope.enter(parking=True)  # contention is an answer, not an error
        assert isinstance(busy, Busy)
        assert isinstance(busy.error, OrderedLockWaitError)
        assert "did not get its turn" in str(busy.error)
        assert busy.error.key == f"seq-{key}"
        (position,) = ledger.records
        assert position.primitive == "ordered_lock"
        assert position.state == WAITING
        assert position.data["number"] == 2
        sequence.wait_turn(first_in_line).release(failed=False)
        again = _scope(_through_json(ledger), key, **declared)
        assert again.enter() is Admission.PROCEED
        assert [r.data.get("number") for r in again.records()] == [2, None]
        assert Lock(key).state().owner == "root-4"
        again.park()
        assert Lock(key).state().owner is None  # the park gave the lock back
        assert [r.primitive for r in again.records()] == ["ordered_lock"]
        again.exit(succeeded=True, failed=False)
    finally:
        unbind_owner(token)
    assert sequence.state().drained


def test_a_rate_limit_is_charged_once_per_scope_even_when_entered_again(
    raw: redis.Redis, key: str
) -> None:
    """The charge is a record: the scope built again after a park is not charged twice."""
    from py_reactor import RateLimit

    leave_room(raw, 60, 2)  # both enters and the count in one minute window
    ledger = Ledger()
    declared = {"rate_limit": RateLimitDeclaration(key, limit=5, period="minute")}
    _scope(ledger, key, **declared).enter()
    _scope(_through_json(ledger), key, **declared).enter()
    assert RateLimit(key, limit=5, period="minute").usage() == {60: 1}


class Charge(Step):
    card: str

    def run(self) -> Any:
        document = json.loads(dumps_context(self.context))
        restored = loads_context(json.dumps(document))
        return {"holds": document["context"]["holds"], "held_keys": restored.held_keys}


@with_lock(lambda args: f"card:{args['card']}")
class LockedCharge(Charge):
    pass


class Checkout(Reactor):
    card: str
    charge = step_(LockedCharge)
    returns = "charge"


@with_semaphore(lambda args: f"sem:{args['card']}", limit=1)
class Parent(Reactor):
    card: str

    @step_
    def kid(card: str) -> Any:
        return Checkout.run(card=card).value

    returns = "kid"


def test_a_context_serialized_mid_run_carries_its_holds(key: str, store: Store) -> None:
    """The JSON of a context whose step holds a lock lists that hold (primitive, key, owner,
    step, token); read back, ``held_keys`` still says what is held."""
    outcome = Checkout.run(card=key)
    assert outcome.is_success, outcome
    (hold,) = outcome.value["holds"]
    assert hold["primitive"] == "lock"
    assert hold["key"] == f"card:{key}"
    assert hold["owner"] == outcome.context.root_id
    assert hold["step"] == "charge"
    assert hold["data"]["fencing_token"] > 0
    assert outcome.value["held_keys"] == [f"lock:card:{key}"]
    assert outcome.context.held_keys == []


def test_a_nested_run_shares_the_tree_ledger_after_a_round_trip(key: str) -> None:
    """A nested run inside a reactor-level semaphore sees the parent's hold in the ledger it
    serializes, and a composed tree read back shares one ledger between root and children."""
    outcome = Parent.run(card=key)
    assert outcome.is_success, outcome
    assert outcome.value["held_keys"] == [f"semaphore:sem:{key}", f"lock:card:{key}"]

    class Kid(Reactor):
        card: str

    from py_reactor import compose

    class Tree(Reactor):
        card: str
        kid = compose(Kid)

    done = Tree.run(card=key)
    restored = loads_context(dumps_context(done.context))
    assert restored.children["kid"].holds is restored.holds


def test_a_recovered_run_gives_back_nothing_of_a_presumed_dead_runners_levels(key: str) -> None:
    """A runner presumed dead inside the step (stopped, not extending; owner: the execution)
    still holds a lock level and a slot that the checkpointed ledger does not list. The
    recovered run re-enters beside them and gives nothing of them back: once it is out the key
    is still held, by that runner's level alone, until the runner releases it (or its ttl)."""
    frozen_lock = Lock(key, ttl=30, auto_extend=False, owner="root-1").acquire()
    frozen_slot = Semaphore(key, limit=1, owner="root-1").acquire()
    ledger = Ledger()  # the last checkpoint: from before the step took anything
    token = _owned("root-1")
    try:
        scope = _scope(
            ledger,
            key,
            recovered=True,
            lock=LockDeclaration(key, ttl=30),
            semaphore=SemaphoreDeclaration(key, limit=1),
        )
        assert scope.enter() is Admission.PROCEED
        assert Lock(key).state().count == 2
        assert [r.data["count"] for r in ledger.records] == [2, 2]
        scope.exit(succeeded=True, failed=False)
    finally:
        unbind_owner(token)
    state = Lock(key).state()
    assert (state.owner, state.count) == ("root-1", 1)
    assert Semaphore(key, limit=1).state().held == 1
    with pytest.raises(LockAcquisitionError):
        Lock(key).acquire()
    frozen_lock.release()  # the runner wakes and leaves
    frozen_slot.release()
    assert not frozen_lock.lost
    assert Lock(key).state().owner is None
    assert Semaphore(key, limit=1).state().held == 0


def test_a_recovered_run_re_enters_beside_a_checkpointed_hold_instead_of_adopting_it(
    key: str,
) -> None:
    """The checkpointed ledger lists a lock the runner presumed dead still holds (and would
    release on waking). The recovered run takes a level of its own (same token) instead of
    adopting that runner's: the runner's release then leaves the recovered run's level held."""
    ledger = Ledger()
    token = _owned("root-1")
    try:
        frozen = _scope(ledger, key)  # the runner presumed dead, alive in this process
        assert frozen.enter() is Admission.PROCEED
        checkpointed = _through_json(ledger)  # what the recovered run loads
        recovered = _scope(checkpointed, key, recovered=True)
        assert recovered.enter() is Admission.PROCEED
        [then], [now] = ledger.records, checkpointed.records
        assert now.id != then.id  # a record of its own, not the runner's adopted
        assert now.data["fencing_token"] == then.data["fencing_token"]
        assert Lock(key).state().count == 2
        frozen.exit(succeeded=True, failed=False)  # the runner wakes and leaves
        state = Lock(key).state()
        assert (state.owner, state.count) == ("root-1", 1)
        recovered.exit(succeeded=True, failed=False)
    finally:
        unbind_owner(token)
    assert Lock(key).state().owner is None


def test_an_enclosing_hold_of_the_same_key_is_not_mistaken_for_a_dead_runners(key: str) -> None:
    """The reactor holds the lock (its record is in the ledger) and the step takes it again:
    count 2 is accounted for, and nothing is given back early."""
    ledger = Ledger()
    token = _owned("root-1")
    try:
        outer = _scope(ledger, key, holder="ex1", recovered=True)
        assert outer.enter() is Admission.PROCEED
        inner = _scope(ledger, key, holder="ex1:charge", recovered=True)
        assert inner.enter() is Admission.PROCEED
        assert Lock(key).state().count == 2
        inner.exit(succeeded=True, failed=False)
        assert Lock(key).state().owner == "root-1"
        outer.exit(succeeded=True, failed=False)
    finally:
        unbind_owner(token)
    assert Lock(key).state().owner is None
