"""A step's compensate and undo run under the lock and semaphore that protected its work.

A step whose work failed for good keeps everything it holds (lock, semaphore, period claim,
ordered turn) while its ``compensate`` runs, and lets go right after it (before the undos of
earlier steps): no other execution gets in between the failed work and its compensate, and
nothing is taken a second time.

An ``undo`` (and a compensate whose step's last attempt was refused by coordination, so that
nothing was kept) re-takes exclusion primitives only (lock, semaphore), keyed from the step's
own arguments and owned by the execution, waiting ``rollback_wait`` (default: the lock's ttl,
the semaphore's lease). Rate limit and period never gate cleanup. When the key cannot be taken,
the hook does not run and the outcome reports it (reason ``coordination_unavailable``).

Every test has a ``Script`` of its own (found through the steps' ``probe`` input) that says how
the rollback hooks behave and records what they saw from inside; keys are unique per test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from py_reactor import (
    Failure,
    FailureResult,
    Lock,
    Middleware,
    Reactor,
    Semaphore,
    Step,
    configure,
    retries,
    step,
    with_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.coordination.period import Period
from py_reactor.coordination.rate_limit import RateLimit
from py_reactor.engine.results import Outcome
from py_reactor.errors import CoordinationError, LockAcquisitionError, SemaphoreAcquisitionError
from py_reactor.observability import events as ev
from tests._overlap import OverlapRecorder
from tests._wait import until
from tests.engine.coordination._helpers import (
    fresh_window,
    lock_is_free,
    recorder,
    semaphore_is_free,
)

# -- what one test's steps do, and what they saw -------------------------------------------------


@dataclass
class Script:
    """How the steps of one test behave, and what their rollback hooks observed."""

    overlap: OverlapRecorder | None = None
    block: bool = False  # the rollback hook waits for ``release`` once inside
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    block_failing_run: bool = False  # a failing charge's work waits for ``release_run``
    run_entered: threading.Event = field(default_factory=threading.Event)
    release_run: threading.Event = field(default_factory=threading.Event)
    broken: bool = False  # set as the run starts failing: the flaky key function then raises
    ran: list[str] = field(default_factory=list)
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    entered_at: dict[str, float] = field(default_factory=dict)

    def section(self, label: str) -> AbstractContextManager[Any]:
        """Record ``label`` in the overlap recorder while inside, if the test has one."""
        return self.overlap.inside(label) if self.overlap is not None else nullcontext()


#: The Script of each running test, by its key (the steps' ``probe`` input).
SCRIPTS: dict[str, Script] = {}


@pytest.fixture
def script(key: str) -> Iterator[Script]:
    """This test's Script, registered under its key; a blocked hook is let go at the end."""
    made = SCRIPTS[key] = Script()
    yield made
    made.release.set()
    made.release_run.set()
    SCRIPTS.pop(key, None)


def acct(args: Mapping[str, Any]) -> str:
    """The lock/semaphore key of every charge step: ``acct:<account_id>``."""
    return f"acct:{args['account_id']}"


def acct_until_broken(args: Mapping[str, Any]) -> str:
    """Like ``acct``, but raises once the run started failing (so only rollback meets it)."""
    if SCRIPTS[args["probe"]].broken:
        raise LookupError("account directory unavailable")
    return acct(args)


def other_can_lock(key: str) -> bool:
    """Whether an owner other than the execution can take lock ``key`` right now."""
    try:
        hold = Lock(key, owner="other", wait=0).acquire()
    except LockAcquisitionError:
        return False
    hold.release()
    return True


def other_can_take_slot(key: str) -> bool:
    """Whether an owner other than the execution can take the one slot of semaphore ``key``."""
    try:
        hold = Semaphore(key, limit=1, wait=0, owner="other").acquire()
    except SemaphoreAcquisitionError:
        return False
    hold.release()
    return True


def roll_back(unit: Step, kind: str) -> None:
    """What every charge's compensate/undo does: observe its holds, then (maybe) block."""
    s = SCRIPTS[unit.inputs.probe]
    key = acct({"account_id": unit.inputs.account_id})
    state = Lock(key).state()
    s.seen[kind] = {
        "held_keys": list(unit.context.held_keys),
        "root_id": unit.context.root_id,
        "lock_owner": state.owner,
        "lock_count": state.count,
        "other_can_lock": other_can_lock(key),
        "other_can_take_slot": other_can_take_slot(key),
        "slots_held": Semaphore(key, limit=1).state().held,
    }
    with s.section(f"charge_{kind}"):
        s.ran.append(f"charge_{kind}")
        s.entered_at[kind] = time.monotonic()
        s.entered.set()
        if s.block:
            assert s.release.wait(10), "the test never released the blocked rollback"


# -- the steps ---------------------------------------------------------------------------------


class ChargeWork(Step):
    """Charges the account (may raise after starting); its compensate and undo observe."""

    account_id: str
    probe: str
    fail_charge: bool = False

    def run(self) -> Any:
        s = SCRIPTS[self.inputs.probe]
        with s.section("charge_run"):
            s.ran.append("charge_run")
            if self.inputs.fail_charge:
                if s.block_failing_run:
                    s.run_entered.set()
                    assert s.release_run.wait(10), "the test never released the blocked work"
                s.broken = True
                raise ValueError("card declined after the charge started")
        return "charged"

    def compensate(self, error: Any) -> Any:
        roll_back(self, "compensate")

    def undo(self, result: Any) -> Any:
        roll_back(self, "undo")


@with_lock(acct, wait=10)
class Charge(ChargeWork):
    """Locked on the account; a second run waits up to 10 s for it."""


@with_semaphore(acct, limit=1, wait=10)
class SlotCharge(ChargeWork):
    """One slot per account."""


@with_lock(acct, wait=10, rollback_wait=0.2)
class ImpatientCharge(ChargeWork):
    """Its rollback waits only 0.2 s for the lock."""


@with_lock(acct, ttl=5, wait=0)
class TtlCharge(ChargeWork):
    """Forward never waits; rollback waits the default: the ttl (5 s)."""


@with_lock(acct_until_broken, wait=10)
class FlakyKeyCharge(ChargeWork):
    """Its key function raises once the run is failing: rollback cannot compute the key."""


# A compensate re-takes the lock only when nothing was kept for it: the work's first attempt
# raised, and the second attempt was refused the lock (taken elsewhere in between, ``wait=0``).


@retries(max_attempts=2, backoff="fixed", base_delay=0)
@with_lock(acct, wait=0, rollback_wait=0.2)
class RetriedImpatientCharge(ChargeWork):
    """Attempt 2 never waits for the lock; the compensate's re-take waits 0.2 s."""


@retries(max_attempts=2, backoff="fixed", base_delay=0)
@with_lock(acct, ttl=5, wait=0)
class RetriedTtlCharge(ChargeWork):
    """Attempt 2 never waits for the lock; the compensate's re-take waits the ttl (5 s)."""


@retries(max_attempts=2, backoff="fixed", base_delay=0)
@with_lock(acct_until_broken, wait=0)
class RetriedFlakyKeyCharge(ChargeWork):
    """Attempt 2 is refused the lock; the compensate's re-take cannot compute the key."""


def quota_key(args: Mapping[str, Any]) -> str:
    """The rate-limit key of the metered steps."""
    return f"quota:{args['account_id']}"


def bucket_key(args: Mapping[str, Any]) -> str:
    """The period key of the metered steps."""
    return f"hourly:{args['account_id']}"


def claimed_elsewhere(key: str) -> bool:
    """Whether another caller is refused period ``key``'s current bucket (someone runs it)."""
    try:
        claim = Period(key, every="hour", wait=0).claim(owner="other")
    except CoordinationError:
        return True
    claim.release(mark=False)  # due (or already done): give it back untouched
    return False


class MeteredWork(Step):
    """Spends the only call of its quota; its rollback hooks check quota and bucket are spent."""

    account_id: str
    probe: str
    fail_charge: bool = False

    def run(self) -> Any:
        s = SCRIPTS[self.inputs.probe]
        s.ran.append("charge_run")
        if self.inputs.fail_charge:
            raise ValueError("card declined after the charge started")
        return "charged"

    def _observe(self, kind: str) -> None:
        s = SCRIPTS[self.inputs.probe]
        args = {"account_id": self.inputs.account_id}
        s.seen[kind] = {
            "bucket_done": Period(bucket_key(args), every="hour").is_done(),
            "bucket_claimed": claimed_elsewhere(bucket_key(args)),
            "quota_used": RateLimit(quota_key(args), limit=1, period="minute").usage(),
            "held_keys": list(self.context.held_keys),
        }
        s.ran.append(f"charge_{kind}")

    def compensate(self, error: Any) -> Any:
        self._observe("compensate")

    def undo(self, result: Any) -> Any:
        self._observe("undo")


@with_rate_limit(quota_key, limit=1, period="minute")
@with_period(bucket_key, every="hour")
class Metered(MeteredWork):
    """Rate limit and period only: nothing to re-take for rollback."""


@with_rate_limit(quota_key, limit=1, period="minute")
@with_period(bucket_key, every="hour")
@with_lock(acct, wait=10)
class MeteredLocked(MeteredWork):
    """Rate limit and period plus a lock: rollback re-takes the lock only."""


class Reserve(Step):
    """An earlier step with an undo of its own (no coordination)."""

    probe: str

    def run(self) -> Any:
        return "reserved"

    def undo(self, result: Any) -> Any:
        SCRIPTS[self.inputs.probe].ran.append("reserve_undo")


class Ship(Step):
    """A later step that fails when asked to, rolling back the charge."""

    probe: str
    fail_later: bool = False

    def run(self) -> Any:
        s = SCRIPTS[self.inputs.probe]
        s.ran.append("ship_run")
        if self.inputs.fail_later:
            s.broken = True
            return Failure("the courier refused the parcel", retryable=False)
        return "shipped"


# -- the reactors: reserve -> charge -> ship ---------------------------------------------------


def checkout(name: str, charge: type[Step], *, reserve: bool = True) -> type[Reactor]:
    """A reactor ``name``: (reserve ->) charge -> ship, with ``charge`` as its charge step."""
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": name,
        "__annotations__": {
            "account_id": str,
            "probe": str,
            "fail_charge": bool,
            "fail_later": bool,
        },
        "fail_charge": False,
        "fail_later": False,
    }
    if reserve:
        namespace["reserve"] = step(Reserve)
    namespace["charge"] = step(charge)
    namespace["ship"] = step(Ship)
    return type(name, (Reactor,), namespace)


Checkout = checkout("Checkout", Charge)
SlotCheckout = checkout("SlotCheckout", SlotCharge)
ImpatientCheckout = checkout("ImpatientCheckout", ImpatientCharge)
TtlCheckout = checkout("TtlCheckout", TtlCharge)
FlakyKeyCheckout = checkout("FlakyKeyCheckout", FlakyKeyCharge)
RetriedImpatientCheckout = checkout("RetriedImpatientCheckout", RetriedImpatientCharge)
RetriedTtlCheckout = checkout("RetriedTtlCheckout", RetriedTtlCharge)
RetriedFlakyKeyCheckout = checkout("RetriedFlakyKeyCheckout", RetriedFlakyKeyCharge)
MeteredCheckout = checkout("MeteredCheckout", Metered, reserve=False)
MeteredLockedCheckout = checkout("MeteredLockedCheckout", MeteredLocked, reserve=False)


KINDS = ["undo", "compensate"]


def failing(key: str, kind: str, account: str | None = None) -> dict[str, Any]:
    """Inputs of a run whose rollback ``kind``s the charge: it fails itself, or a later step."""
    return {
        "account_id": key if account is None else account,
        "probe": key,
        "fail_charge": kind == "compensate",
        "fail_later": kind == "undo",
    }


def rollback_entries(outcome: Outcome, kind: str) -> list[dict[str, Any]]:
    """The trace entries of the charge's ``kind`` (undo/compensate)."""
    return [e for e in outcome.context.trace if e["type"] == kind and e["step"] == "charge"]


# -- middleware that acts as rollback begins ---------------------------------------------------


class HoldOnRollback(Middleware):
    """Takes lock ``key`` for another owner as rollback starts, or (``when="retry"``) as the
    charge's failed attempt is retried, in between its attempts (both times nothing holds it
    for the execution). ``refused`` records that the key could not be taken then.

    With ``release_after`` it lets go that long after the rollback is seen queued on the key.
    """

    def __init__(
        self, key: str, release_after: float | None = None, *, when: str = "rollback"
    ) -> None:
        self.key = key
        self.release_after = release_after
        self.when = when
        self.hold: Any = None
        self.refused = False
        self.released_at: float | None = None
        self.saw_waiter = False
        self.releaser: threading.Thread | None = None

    def on_rollback_started(self, event: ev.RollbackStarted) -> None:
        if self.when == "rollback":
            self._take()

    def on_step_retried(self, event: ev.StepRetried) -> None:
        if self.when == "retry" and event.step == "charge" and self.hold is None:
            self._take()

    def _take(self) -> None:
        try:
            self.hold = Lock(self.key, owner="external", wait=0).acquire()
        except LockAcquisitionError:
            self.refused = True
            return
        if self.release_after is not None:
            self.releaser = threading.Thread(target=self._release_later, daemon=True)
            self.releaser.start()

    def _release_later(self) -> None:
        try:
            until(
                lambda: Lock(self.key).state().waiters == 1,
                "Lock(self.key).state().waiters == 1",
                timeout=5,
            )
            self.saw_waiter = True
            time.sleep(self.release_after or 0)  # the holder's own work, not synchronization
        except AssertionError:
            pass  # nobody queued: the test sees saw_waiter False
        finally:
            self.released_at = time.monotonic()
            self.hold.release()

    def close(self) -> None:
        if self.releaser is not None:
            self.releaser.join(10)
        if self.hold is not None:
            self.hold.release()


# -- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_rollback_runs_holding_the_steps_lock_as_the_execution(
    kind: str, key: str, script: Script
) -> None:
    """Inside compensate/undo, the execution (its root id) holds the charge's lock, once.

    The undo re-takes it; the compensate runs under the hold its failed work kept.
    """
    rec = recorder()
    outcome = Checkout.run(**failing(key, kind))
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.rollback_failures == []
    lock_key = f"acct:{key}"
    seen = script.seen[kind]
    assert f"lock:{lock_key}" in seen["held_keys"]
    assert seen["held_keys"].count(f"lock:{lock_key}") == 1  # one hold, never nested
    # Forward, then the undo's re-take; a compensate takes nothing again.
    taken = [(e.key, e.step) for e in rec.of(ev.LockAcquired)]
    assert taken == [(lock_key, "charge")] * (2 if kind == "undo" else 1)
    assert seen["lock_owner"] == outcome.context.root_id == seen["root_id"]
    assert seen["lock_count"] == 1
    assert seen["other_can_lock"] is False
    assert f"charge_{kind}" in script.ran
    assert lock_is_free(lock_key)
    assert f"lock:{lock_key}" not in outcome.context.held_keys


def _rollback_while_second_run(
    reactor: type[Reactor], key: str, script: Script, kind: str, *, second_account: str
) -> tuple[Outcome, Outcome]:
    """Block the first run's ``kind`` hook, start a second run on ``second_account``, release.

    On the same account the second run is released only once it is seen queued on the lock;
    on another account it is let finish first.
    """
    script.block = True
    with ThreadPoolExecutor(2) as pool:
        try:
            first: Future[Outcome] = pool.submit(reactor.run, **failing(key, kind))
            assert script.entered.wait(10), "the rollback hook never ran"
            second = pool.submit(reactor.run, account_id=second_account, probe=key)
            if second_account == key:
                until(
                    lambda: Lock(f"acct:{key}").state().waiters == 1,
                    "Lock(f'acct:{key}').state().waiters == 1",
                )
                assert not second.done()
            else:
                second.result(timeout=10)
        finally:
            script.release.set()
        return first.result(timeout=10), second.result(timeout=10)


@pytest.mark.parametrize("kind", KINDS)
def test_a_forward_run_waits_for_a_rollback_on_the_same_key(
    kind: str, key: str, script: Script, overlap: OverlapRecorder
) -> None:
    """SC-009: while charge's compensate/undo runs, another run's charge waits; no overlap."""
    script.overlap = overlap
    first, second = _rollback_while_second_run(Checkout, key, script, kind, second_account=key)
    assert isinstance(first, FailureResult)
    assert first.rollback_failures == []
    assert second.is_success, second
    assert overlap.overlaps == 0
    assert overlap.max_concurrency == 1
    assert overlap.events == [
        ("enter", "charge_run"),
        ("leave", "charge_run"),
        ("enter", f"charge_{kind}"),
        ("leave", f"charge_{kind}"),
        ("enter", "charge_run"),  # the second run, only once the rollback let go
        ("leave", "charge_run"),
    ]


@pytest.mark.parametrize("reactor", [Checkout, SlotCheckout], ids=["lock", "semaphore"])
def test_no_run_enters_between_the_failed_work_and_its_compensate(
    reactor: type[Reactor], key: str, script: Script, overlap: OverlapRecorder
) -> None:
    """A run queued on the key while the charge's work is failing gets in only after the
    compensate: the failed work keeps its lock/slot through it (one critical section)."""
    script.overlap = overlap
    script.block_failing_run = True
    primitive = Lock(f"acct:{key}") if reactor is Checkout else Semaphore(f"acct:{key}", limit=1)
    with ThreadPoolExecutor(2) as pool:
        try:
            first = pool.submit(reactor.run, **failing(key, "compensate"))
            assert script.run_entered.wait(10), "the failing work never started"
            second = pool.submit(reactor.run, account_id=key, probe=key)
            until(
                lambda: primitive.state().waiters == 1, "primitive.state().waiters == 1"
            )  # queued behind the work
            assert not second.done()
        finally:
            script.release_run.set()
        outcome = first.result(timeout=10)
        assert second.result(timeout=10).is_success
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.step_name == "charge"
    assert outcome.rollback_failures == []
    assert overlap.overlaps == 0
    assert overlap.events == [
        ("enter", "charge_run"),  # the failing work
        ("leave", "charge_run"),
        ("enter", "charge_compensate"),  # no one got in between
        ("leave", "charge_compensate"),
        ("enter", "charge_run"),  # the queued run, only once the compensate let go
        ("leave", "charge_run"),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_a_forward_run_on_another_key_overlaps_the_rollback(
    kind: str, key: str, script: Script, overlap: OverlapRecorder
) -> None:
    """The twin of SC-009 on different keys: the recorder does see the overlap it can catch."""
    script.overlap = overlap
    first, second = _rollback_while_second_run(
        Checkout, key, script, kind, second_account=f"{key}-other"
    )
    assert isinstance(first, FailureResult)
    assert second.is_success, second
    assert overlap.overlaps == 1
    assert overlap.events == [
        ("enter", "charge_run"),
        ("leave", "charge_run"),
        ("enter", f"charge_{kind}"),
        ("enter", "charge_run"),
        ("leave", "charge_run"),
        ("leave", f"charge_{kind}"),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_the_semaphore_slot_is_held_for_rollback(kind: str, key: str, script: Script) -> None:
    """with_semaphore(limit=1): during compensate/undo the execution holds the only slot.

    The undo re-takes it; the compensate keeps the slot its failed work held.
    """
    rec = recorder()
    outcome = SlotCheckout.run(**failing(key, kind))
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.rollback_failures == []
    sem_key = f"acct:{key}"
    seen = script.seen[kind]
    assert seen["held_keys"].count(f"semaphore:{sem_key}") == 1
    assert seen["slots_held"] == 1
    assert seen["other_can_take_slot"] is False
    taken = [(e.key, e.step) for e in rec.of(ev.SemaphoreAcquired)]
    assert taken == [(sem_key, "charge")] * (2 if kind == "undo" else 1)
    assert semaphore_is_free(sem_key)


@pytest.mark.parametrize("kind", KINDS)
def test_a_forward_run_waits_for_a_rollback_holding_the_slot(
    kind: str, key: str, script: Script, overlap: OverlapRecorder
) -> None:
    """A second run's charge cannot take the semaphore slot while the rollback holds it."""
    script.overlap = overlap
    script.block = True
    with ThreadPoolExecutor(2) as pool:
        try:
            first = pool.submit(SlotCheckout.run, **failing(key, kind))
            assert script.entered.wait(10)
            second = pool.submit(SlotCheckout.run, account_id=key, probe=key)
            until(
                lambda: Semaphore(f"acct:{key}", limit=1).state().waiters == 1,
                "Semaphore(f'acct:{key}', limit=1).state().waiters == 1",
            )
        finally:
            script.release.set()
        assert isinstance(first.result(timeout=10), FailureResult)
        assert second.result(timeout=10).is_success
    assert overlap.overlaps == 0
    assert [label for kind_, label in overlap.events if kind_ == "enter"] == [
        "charge_run",
        f"charge_{kind}",
        "charge_run",
    ]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reactor", [MeteredCheckout, MeteredLockedCheckout], ids=["bare", "lock"])
def test_a_spent_rate_limit_and_period_never_stop_rollback(
    kind: str, reactor: type[Reactor], key: str, script: Script, raw: redis.Redis
) -> None:
    """Quota used up (and, for undo, the bucket marked) by rollback time: compensate/undo run.

    The undo comes after the charge succeeded: its bucket is marked done. The compensate runs
    under the period claim its failed work kept (nobody else can claim the bucket meanwhile),
    which is released unmarked afterwards: the bucket is still due.
    """
    fresh_window(raw, 60)
    fresh_window(raw, 3600)
    args = {"account_id": key}
    outcome = reactor.run(**failing(key, kind))
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.rollback_failures == []
    assert f"charge_{kind}" in script.ran
    seen = script.seen[kind]
    assert seen["quota_used"] == {60: 1}
    period_entry = f"period:{bucket_key(args)}@hour"
    if kind == "undo":
        assert seen["bucket_done"] is True
        assert seen["bucket_claimed"] is False
        assert period_entry not in seen["held_keys"]
    else:
        assert seen["bucket_done"] is False
        assert seen["bucket_claimed"] is True  # the failed work's claim, kept
        assert seen["held_keys"].count(period_entry) == 1
    entries = rollback_entries(outcome, kind)
    assert [e["ok"] for e in entries] == [True]
    assert RateLimit(quota_key(args), limit=1, period="minute").usage() == {60: 1}
    # Marked by the success undone later; left due (released unmarked) by the failed work.
    assert Period(bucket_key(args), every="hour").is_done() is (kind == "undo")
    assert claimed_elsewhere(bucket_key(args)) is False
    assert outcome.context.held_keys == []
    assert lock_is_free(f"acct:{key}")


#: Where a compensate/undo has to re-take the lock: the reactor, and when the holder steps in.
#: An undo always re-takes. A compensate re-takes only when its step's last attempt was
#: refused the lock (taken elsewhere in between attempts) after an earlier attempt ran.
RETAKING: dict[str, tuple[dict[str, type[Reactor]], str]] = {
    "undo": (
        {"impatient": ImpatientCheckout, "ttl": TtlCheckout, "flaky": FlakyKeyCheckout},
        "rollback",
    ),
    "compensate": (
        {
            "impatient": RetriedImpatientCheckout,
            "ttl": RetriedTtlCheckout,
            "flaky": RetriedFlakyKeyCheckout,
        },
        "retry",
    ),
}


def run_retaking(
    kind: str, variant: str, key: str, release_after: float | None = None
) -> tuple[Outcome, HoldOnRollback]:
    """Run the ``variant`` reactor whose ``kind`` re-takes the lock, another owner holding it
    (from rollback start for undo, from the retry for compensate); the holder is closed."""
    reactors, when = RETAKING[kind]
    holder = HoldOnRollback(f"acct:{key}", release_after, when=when)
    configure(middleware=[holder])
    try:
        outcome = reactors[variant].run(**failing(key, kind))
    finally:
        holder.close()
    assert holder.hold is not None, "the other owner never took the key"
    return outcome, holder


def assert_failed_as_expected(outcome: Outcome, kind: str, script: Script) -> None:
    """The run's own error is still the one that failed it, not the rollback's."""
    assert isinstance(outcome, FailureResult), outcome
    if kind == "undo":
        assert outcome.step_name == "ship"
        assert script.ran.count("charge_run") == 1
    else:  # attempt 1 raised, attempt 2 was refused the lock: the refusal ends the step
        assert outcome.step_name == "charge"
        assert isinstance(outcome.error, LockAcquisitionError)
        assert outcome.attempts == 1
        assert script.ran.count("charge_run") == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_held_elsewhere_skips_the_rollback_hook_and_reports_it(
    kind: str, key: str, script: Script
) -> None:
    """Lock held elsewhere past rollback_wait: hook not run, failure reported, others go on.

    For compensate this needs a step that kept nothing: its retry was refused the lock.
    """
    lock_key = f"acct:{key}"
    outcome, _ = run_retaking(kind, "impatient", key)
    assert isinstance(outcome, FailureResult), outcome
    assert f"charge_{kind}" not in script.ran
    assert "reserve_undo" in script.ran  # the other steps' undos still ran
    assert len(outcome.rollback_failures) == 1
    failure: dict[str, Any] = dict(outcome.rollback_failures[0])
    message = failure.pop("message")
    assert failure == {
        "step": "charge",
        "kind": kind,
        "key": lock_key,
        "reason": "coordination_unavailable",
    }
    assert lock_key in message
    assert "charge" in message
    (entry,) = rollback_entries(outcome, kind)
    assert entry["ok"] is False
    assert entry["key"] == lock_key
    assert entry["reason"] == "coordination_unavailable"
    assert lock_key in entry["error"]
    assert 0.15 <= entry["finished_at"] - entry["started_at"] < 5  # waited rollback_wait
    assert_failed_as_expected(outcome, kind, script)
    assert lock_is_free(lock_key)


def test_a_compensate_after_its_work_failed_cannot_be_shut_out(key: str, script: Script) -> None:
    """The work failed for good: its lock is kept through the compensate, so another owner
    trying at rollback start is refused, and the compensate runs at once, without waiting."""
    lock_key = f"acct:{key}"
    holder = HoldOnRollback(lock_key)
    configure(middleware=[holder])
    try:
        outcome = ImpatientCheckout.run(**failing(key, "compensate"))
    finally:
        holder.close()
    assert isinstance(outcome, FailureResult), outcome
    assert holder.refused is True
    assert holder.hold is None
    assert outcome.rollback_failures == []
    assert script.ran == ["charge_run", "charge_compensate", "reserve_undo"]
    seen = script.seen["compensate"]
    assert seen["lock_owner"] == outcome.context.root_id
    assert seen["lock_count"] == 1
    assert seen["other_can_lock"] is False
    (entry,) = rollback_entries(outcome, "compensate")
    assert entry["ok"] is True
    assert entry["key"] == lock_key
    assert outcome.step_name == "charge"
    assert isinstance(outcome.error, ValueError)
    assert lock_is_free(lock_key)


@pytest.mark.parametrize("kind", KINDS)
def test_rollback_waits_the_locks_ttl_by_default(kind: str, key: str, script: Script) -> None:
    """No rollback_wait (forward wait=0, ttl=5): rollback waits out a 0.5 s holder, then runs.

    For compensate this needs a step that kept nothing: its retry was refused the lock.
    """
    lock_key = f"acct:{key}"
    outcome, holder = run_retaking(kind, "ttl", key, release_after=0.5)
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.rollback_failures == []
    assert holder.saw_waiter
    assert f"charge_{kind}" in script.ran
    assert holder.released_at is not None
    assert script.entered_at[kind] >= holder.released_at
    (entry,) = rollback_entries(outcome, kind)
    assert entry["ok"] is True
    assert entry["key"] == lock_key
    assert_failed_as_expected(outcome, kind, script)
    assert lock_is_free(lock_key)


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_function_raising_at_rollback_is_reported_not_raised(
    kind: str, key: str, script: Script
) -> None:
    """The key cannot be computed for rollback: the hook does not run; reported, no crash.

    For compensate this needs a step that kept nothing: its retry was refused the lock.
    """
    outcome, _ = run_retaking(kind, "flaky", key)
    assert isinstance(outcome, FailureResult), outcome
    assert f"charge_{kind}" not in script.ran
    assert "reserve_undo" in script.ran
    assert len(outcome.rollback_failures) == 1
    failure = outcome.rollback_failures[0]
    assert failure["step"] == "charge"
    assert failure["kind"] == kind
    assert failure["reason"] == "coordination_unavailable"
    assert failure["key"] is None  # the key is what could not be computed
    assert "LookupError" in failure["message"]
    assert "account directory unavailable" in failure["message"]
    assert "charge" in failure["message"]
    (entry,) = rollback_entries(outcome, kind)
    assert entry["ok"] is False
    assert_failed_as_expected(outcome, kind, script)
    assert lock_is_free(f"acct:{key}")


def test_a_compensate_after_its_work_failed_computes_no_key_again(key: str, script: Script) -> None:
    """The key function now raises, but the compensate runs under the hold the failed work
    kept: nothing is computed or taken again, it runs and names the key it held."""
    rec = recorder()
    outcome = FlakyKeyCheckout.run(**failing(key, "compensate"))
    assert isinstance(outcome, FailureResult), outcome
    assert script.broken is True  # the key function would raise now
    assert outcome.rollback_failures == []
    assert script.ran == ["charge_run", "charge_compensate", "reserve_undo"]
    (entry,) = rollback_entries(outcome, "compensate")
    assert entry["ok"] is True
    assert entry["key"] == f"acct:{key}"
    assert len(rec.of(ev.LockAcquired)) == 1  # the work's
    assert outcome.step_name == "charge"
    assert isinstance(outcome.error, ValueError)
    assert lock_is_free(f"acct:{key}")
