"""Step coordination as operators see it: events naming the step, located errors, the trace.

Lock and semaphore events carry the key and the step that took it (``None`` at reactor level),
on the way in, on the way out, when the key stays busy, and when rollback re-takes it; so do
the rate limit's, the period's and the ordered lock's (a rate limit has no release). A step
whose work failed for good keeps its holds through its compensate: their release events come
after it. A contention failure names reactor, step and key; the trace records which step held
which key.
Parks and the dashboard do not exist in this port yet, so they are not covered here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from py_reactor import (
    Failure,
    FailureResult,
    Lock,
    Middleware,
    OrderedLock,
    Period,
    RateLimit,
    Reactor,
    Semaphore,
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
from py_reactor.engine.results import Outcome
from py_reactor.errors import (
    CoordinationError,
    LockAcquisitionError,
    OrderedLockWaitError,
    RateLimitExceededError,
    SemaphoreAcquisitionError,
)
from py_reactor.observability import events as ev
from py_reactor.observability.middleware import HOOKS
from tests._wait import until
from tests.engine.coordination._helpers import (
    Recorder,
    lock_is_free,
    recorder,
    semaphore_is_free,
)

# -- steps and reactors ------------------------------------------------------------------------


def acct(args: Mapping[str, Any]) -> str:
    """The step key: ``acct:<account_id>`` (from the step's arguments)."""
    return f"acct:{args['account_id']}"


def order(inputs: Mapping[str, Any]) -> str:
    """The reactor key: ``order:<account_id>`` (from the reactor's inputs)."""
    return f"order:{inputs['account_id']}"


class ChargeWork(Step):
    """Charges (or raises after starting); compensate and undo do nothing but exist."""

    account_id: str
    fail_charge: bool = False

    def run(self) -> Any:
        if self.inputs.fail_charge:
            raise ValueError("card declined after the charge started")
        return "charged"

    def compensate(self, error: Any) -> Any:
        return None

    def undo(self, result: Any) -> Any:
        return None


@with_lock(acct, rollback_wait=0.2)
@with_semaphore(acct, limit=1, rollback_wait=0.2)
class Charge(ChargeWork):
    """A lock and a one-slot semaphore on the account; neither waits."""


@retries(max_attempts=2, backoff="fixed", base_delay=0)
@with_lock(acct, rollback_wait=0.2)
@with_semaphore(acct, limit=1, rollback_wait=0.2)
@with_rate_limit(acct, limit=1, period="day")
class RetriedCharge(ChargeWork):
    """Like Charge, retried once; its rate limit refuses the retry (after lock and semaphore).

    Its compensate then has nothing kept to run under: it re-takes lock and semaphore.
    """


@with_lock(acct)
class LockedCharge(ChargeWork):
    """A lock on the account only."""


class Ship(Step):
    """A later step that fails when asked to (rolling the charge back)."""

    fail_later: bool = False

    def run(self) -> Any:
        if self.inputs.fail_later:
            return Failure("the courier refused the parcel", retryable=False)
        return "shipped"


class Checkout(Reactor):
    account_id: str
    fail_charge: bool = False
    fail_later: bool = False
    charge = step(Charge)
    ship = step(Ship)
    returns = "charge"


class RetriedCheckout(Reactor):
    account_id: str
    fail_charge: bool = False
    fail_later: bool = False
    charge = step(RetriedCharge)
    ship = step(Ship)


class LockCheckout(Reactor):
    account_id: str
    fail_charge: bool = False
    fail_later: bool = False
    charge = step(LockedCharge)
    ship = step(Ship)


@with_lock(order)
class OrderCheckout(Reactor):
    account_id: str
    charge = step(LockedCharge)
    ship = step(Ship)


def failing(key: str, kind: str) -> dict[str, Any]:
    """Inputs of a run that compensates the charge (it raises) or undoes it (ship fails)."""
    return {"account_id": key, "fail_charge": kind == "compensate", "fail_later": kind == "undo"}


def of_step(rec: Recorder, name: str) -> list[str]:
    """The names of the step/lock/semaphore/undo/compensation events naming step ``name``."""
    prefixes = ("step.", "lock.", "semaphore.", "undo.", "compensation.")
    return [e.name for e in rec.events if e.step == name and e.name.startswith(prefixes)]


def entries(outcome: Outcome, kind: str, name: str = "charge") -> list[dict[str, Any]]:
    """The trace entries of type ``kind`` for step ``name``."""
    return [e for e in outcome.context.trace if e["type"] == kind and e["step"] == name]


#: A coordinated attempt: the holds are taken, then the attempt starts; released in reverse.
FORWARD = [
    "lock.acquired",
    "semaphore.acquired",
    "step.started",
    "semaphore.released",
    "lock.released",
]
RETAKE = ["lock.acquired", "semaphore.acquired", "semaphore.released", "lock.released"]
#: An attempt that fails for good keeps its holds through the compensate, released after it.
FAILED_AND_COMPENSATED = [
    "lock.acquired",
    "semaphore.acquired",
    "step.started",
    "step.failed",
    "compensation.started",
    "compensation.completed",
    "semaphore.released",
    "lock.released",
]
#: RetriedCharge's attempts: the first raises; the second takes lock and semaphore, is refused
#: by the rate limit (releasing them) and fails the step, which kept nothing.
RETRIED_AND_REFUSED = [
    *FORWARD,
    "step.retried",
    "lock.acquired",
    "semaphore.acquired",
    "semaphore.released",
    "lock.released",
    "step.failed",
]

#: How each rollback kind is reached for the re-take tests: its reactor, and its events up to
#: the hook. A compensate re-takes only when the step kept nothing: its retry was refused.
RETAKING: dict[str, tuple[type[Reactor], list[str]]] = {
    "undo": (Checkout, [*FORWARD, "step.completed"]),
    "compensate": (RetriedCheckout, RETRIED_AND_REFUSED),
}


class HoldOnRollback(Middleware):
    """Takes lock ``key`` for another owner as rollback starts, so the re-take must fail."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.hold: Any = None

    def on_rollback_started(self, event: ev.RollbackStarted) -> None:
        self.hold = Lock(self.key, owner="external", wait=0).acquire()

    def close(self) -> None:
        if self.hold is not None:
            self.hold.release()


class Raising(Middleware):
    """Raises from every hook."""

    def _boom(self, event: Any) -> None:
        raise RuntimeError(f"middleware broke on {event.name}")


for _hook in HOOKS.values():
    setattr(Raising, _hook, Raising._boom)


# -- events ------------------------------------------------------------------------------------


def test_lock_and_semaphore_events_carry_the_key_and_the_step(key: str) -> None:
    """Acquired/released events name key, step and reactor, in order inside the step's span."""
    rec = recorder()
    outcome = Checkout.run(account_id=key)
    assert outcome.is_success, outcome
    step_key = f"acct:{key}"
    kinds = (ev.LockAcquired, ev.LockReleased, ev.SemaphoreAcquired, ev.SemaphoreReleased)
    for kind in kinds:
        (event,) = rec.of(kind)
        assert event.key == step_key
        assert event.step == "charge"
        assert event.reactor == "Checkout"
        assert event.execution_id == outcome.context.execution_id
    assert rec.of(ev.LockAcquired)[0].fencing_token > 0
    # Taken before the attempt's work starts, released in reverse before the step completes.
    assert of_step(rec, "charge") == [*FORWARD, "step.completed"]
    assert of_step(rec, "ship") == ["step.started", "step.completed"]


def test_a_busy_lock_emits_a_failure_event_naming_the_step(key: str) -> None:
    """LockAcquisitionFailed carries key, step and the very error the outcome reports."""
    rec = recorder()
    hold = Lock(f"acct:{key}").acquire()
    try:
        outcome = Checkout.run(account_id=key)
    finally:
        hold.release()
    assert isinstance(outcome, FailureResult), outcome
    (failed,) = rec.of(ev.LockAcquisitionFailed)
    assert failed.key == f"acct:{key}"
    assert failed.step == "charge"
    assert failed.reactor == "Checkout"
    assert failed.error is outcome.error
    assert rec.of(ev.LockAcquired) == []
    # The attempt never started: no StepStarted, only the refusal and the step's failure.
    assert of_step(rec, "charge") == ["lock.acquisition_failed", "step.failed"]


def test_a_full_semaphore_emits_a_failure_event_naming_the_step(key: str) -> None:
    """The lock is taken, the slot is refused (event with key and step), the lock released."""
    rec = recorder()
    hold = Semaphore(f"acct:{key}", limit=1).acquire()
    try:
        outcome = Checkout.run(account_id=key)
    finally:
        hold.release()
    assert isinstance(outcome, FailureResult), outcome
    (failed,) = rec.of(ev.SemaphoreAcquisitionFailed)
    assert failed.key == f"acct:{key}"
    assert failed.step == "charge"
    assert failed.error is outcome.error
    assert of_step(rec, "charge") == [
        "lock.acquired",
        "semaphore.acquisition_failed",
        "lock.released",
        "step.failed",
    ]


def test_reactor_level_lock_events_keep_step_none(key: str) -> None:
    """The reactor's own lock events have step None; the step's lock events name the step."""
    rec = recorder()
    outcome = OrderCheckout.run(account_id=key)
    assert outcome.is_success, outcome
    taken = [(e.key, e.step) for e in rec.of(ev.LockAcquired)]
    released = [(e.key, e.step) for e in rec.of(ev.LockReleased)]
    assert taken == [(f"order:{key}", None), (f"acct:{key}", "charge")]
    assert released == [(f"acct:{key}", "charge"), (f"order:{key}", None)]


def test_a_failed_step_releases_its_holds_after_its_compensate(key: str) -> None:
    """The work failed for good: nothing is re-taken, the compensate runs under the holds the
    work kept, and their release events (naming key and step) come right after it."""
    rec = recorder()
    outcome = Checkout.run(**failing(key, "compensate"))
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.rollback_failures == []
    assert of_step(rec, "charge") == FAILED_AND_COMPENSATED
    assert rec.names() == [
        "reactor.started",
        *FAILED_AND_COMPENSATED[:4],
        "rollback.started",
        *FAILED_AND_COMPENSATED[4:],
        "rollback.finished",
        "reactor.failed",
    ]
    coordination = (ev.LockAcquired, ev.LockReleased, ev.SemaphoreAcquired, ev.SemaphoreReleased)
    held = [e for e in rec.events if isinstance(e, coordination)]
    assert len(held) == 4
    for event in held:
        assert (event.key, event.step, event.reactor) == (f"acct:{key}", "charge", "Checkout")
    assert lock_is_free(f"acct:{key}")
    assert semaphore_is_free(f"acct:{key}")


@pytest.mark.parametrize("kind", ["undo", "compensate"])
def test_rollback_retakes_emit_events_naming_the_step(kind: str, key: str) -> None:
    """The compensate/undo re-take and release events carry the key and the step too.

    For compensate: the step's retry was refused by its rate limit, so nothing was kept.
    """
    rec = recorder()
    reactor, before = RETAKING[kind]
    outcome = reactor.run(**failing(key, kind))
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.rollback_failures == []
    began, done = (
        ("undo.started", "undo.completed")
        if kind == "undo"
        else ("compensation.started", "compensation.completed")
    )
    assert of_step(rec, "charge") == [*before, began, *RETAKE, done]
    coordination = (ev.LockAcquired, ev.LockReleased, ev.SemaphoreAcquired, ev.SemaphoreReleased)
    for event in rec.events:
        if isinstance(event, coordination):
            assert (event.key, event.step, event.reactor) == (
                f"acct:{key}",
                "charge",
                reactor.__name__,
            )


@pytest.mark.parametrize("kind", ["undo", "compensate"])
def test_a_refused_rollback_retake_emits_a_failure_event_naming_the_step(
    kind: str, key: str
) -> None:
    """Rollback cannot re-take the lock: LockAcquisitionFailed names step and key, then *Failed.

    For compensate: the step's retry was refused by its rate limit, so nothing was kept.
    """
    rec = Recorder()
    holder = HoldOnRollback(f"acct:{key}")
    configure(middleware=[holder, rec])
    reactor, before = RETAKING[kind]
    try:
        outcome = reactor.run(**failing(key, kind))
    finally:
        holder.close()
    assert isinstance(outcome, FailureResult), outcome
    assert holder.hold is not None
    (failed,) = rec.of(ev.LockAcquisitionFailed)
    assert (failed.key, failed.step) == (f"acct:{key}", "charge")
    assert isinstance(failed.error, LockAcquisitionError)
    began, refused = (
        ("undo.started", "undo.failed")
        if kind == "undo"
        else ("compensation.started", "compensation.failed")
    )
    assert of_step(rec, "charge") == [*before, began, "lock.acquisition_failed", refused]
    # The forward holds only (one per attempt that took the lock), none for the rollback.
    assert len(rec.of(ev.LockAcquired)) == (1 if kind == "undo" else 2)
    assert lock_is_free(f"acct:{key}")


# -- rate limit, period and ordered lock events -------------------------------------------------

#: The hooks of the primitives other than lock and semaphore (a rate limit has no release).
PRIMITIVE_HOOKS = (
    "on_rate_limit_acquired",
    "on_rate_limit_acquisition_failed",
    "on_period_acquired",
    "on_period_released",
    "on_period_acquisition_failed",
    "on_ordered_lock_acquired",
    "on_ordered_lock_released",
    "on_ordered_lock_acquisition_failed",
)


class PrimitiveHooks(Middleware):
    """Hears the rate limit, period and ordered lock hooks, and the step's start and end."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, Any]] = []

    def hooks(self) -> list[tuple[str, str | None]]:
        """(hook, the event's step) for everything heard, in order."""
        return [(hook, event.step) for hook, event in self.heard]

    def of(self, hook: str) -> list[Any]:
        """The events ``hook`` received."""
        return [event for heard, event in self.heard if heard == hook]


def _hearing(hook: str) -> Any:
    def hear(self: PrimitiveHooks, event: Any) -> None:
        self.heard.append((hook, event))

    return hear


for _hook in (*PRIMITIVE_HOOKS, "on_step_started", "on_step_completed", "on_step_failed",
              "on_step_skipped"):  # fmt: skip
    setattr(PrimitiveHooks, _hook, _hearing(_hook))


def primitive_hooks() -> PrimitiveHooks:
    """A PrimitiveHooks, configured as the only middleware."""
    heard = PrimitiveHooks()
    configure(middleware=[heard])
    return heard


def line(args: Mapping[str, Any]) -> str:
    return f"line:{args['account_id']}"


def daily(args: Mapping[str, Any]) -> str:
    return f"daily:{args['account_id']}"


def api(args: Mapping[str, Any]) -> str:
    return f"api:{args['account_id']}"


@with_ordered_lock(line)
@with_period(daily, every="day", wait=0)
@with_rate_limit(api, limit=1, period="day")
class Settle(ChargeWork):
    """An ordered turn, a daily period and a rate limit of one a day on the account."""


class Settlement(Reactor):
    account_id: str
    settle = step(Settle)
    returns = "settle"


@with_ordered_lock(line, wait=0)
@with_period(daily, every="day", wait=0)
@with_rate_limit(api, limit=1, period="day")
class DailySettlement(Reactor):
    """The same three primitives declared on the reactor (step None on their events)."""

    account_id: str
    settle = step(ChargeWork)
    returns = "settle"


@with_ordered_lock(line, wait=10)
class InLine(ChargeWork):
    """A strict ordered turn that waits for the positions before it."""


class Queue(Reactor):
    account_id: str
    settle = step(InLine)


#: One coordinated run: the ordered turn first (for all attempts), then period and rate limit
#: around the attempt; the period released before the step completes, the turn after.
SETTLED = [
    ("on_ordered_lock_acquired", "settle"),
    ("on_period_acquired", "settle"),
    ("on_rate_limit_acquired", "settle"),
    ("on_step_started", "settle"),
    ("on_period_released", "settle"),
    ("on_step_completed", "settle"),
    ("on_ordered_lock_released", "settle"),
]


def _assert_attributed(heard: PrimitiveHooks, key: str, outcome: Outcome, step: str | None) -> None:
    """Every primitive event names its step, its key and the run's execution."""
    prefixes = {"ordered_lock": "line", "period": "daily", "rate_limit": "api"}
    for hook, event in heard.heard:
        primitive = hook.removeprefix("on_").rsplit("_", 1)[0].removesuffix("_acquisition")
        if primitive not in prefixes:
            continue
        assert event.key == f"{prefixes[primitive]}:{key}", (hook, event)
        assert event.step == step, (hook, event)
        assert event.execution_id == outcome.context.execution_id, (hook, event)


def test_rate_limit_period_and_ordered_lock_steps_emit_acquired_and_released(key: str) -> None:
    """A step's ordered turn, period claim and rate-limit charge are each reported as taken
    (and, but for the rate limit, given back) with the step, the key and the execution."""
    heard = primitive_hooks()
    outcome = Settlement.run(account_id=key)
    assert outcome.is_success, outcome
    assert heard.hooks() == SETTLED
    _assert_attributed(heard, key, outcome, "settle")
    assert heard.of("on_period_released")[0].lost is False
    assert heard.of("on_ordered_lock_released")[0].lost is False


def test_rate_limit_period_and_ordered_lock_of_a_reactor_emit_with_step_none(key: str) -> None:
    """Declared on the reactor, the same events come around the whole run with step None."""
    heard = primitive_hooks()
    outcome = DailySettlement.run(account_id=key)
    assert outcome.is_success, outcome
    assert heard.hooks() == [
        ("on_ordered_lock_acquired", None),
        ("on_period_acquired", None),
        ("on_rate_limit_acquired", None),
        ("on_step_started", "settle"),
        ("on_step_completed", "settle"),
        ("on_period_released", None),
        ("on_ordered_lock_released", None),
    ]
    _assert_attributed(heard, key, outcome, None)


@pytest.mark.parametrize("reactor", [Settlement, DailySettlement])
def test_a_full_rate_limit_emits_its_refusal(reactor: type[Reactor], key: str) -> None:
    """A rate limit with no call left refuses: the event carries the very error, with
    retry_after, and names step (None on the reactor), key and execution."""
    RateLimit(f"api:{key}", limit=1, period="day").acquire()
    heard = primitive_hooks()
    outcome = reactor.run(account_id=key)
    assert isinstance(outcome, FailureResult), outcome
    step_name = "settle" if reactor is Settlement else None
    (refused,) = heard.of("on_rate_limit_acquisition_failed")
    assert refused.error is outcome.error
    assert isinstance(refused.error, RateLimitExceededError)
    assert refused.error.retry_after > 0
    assert heard.of("on_rate_limit_acquired") == []
    _assert_attributed(heard, key, outcome, step_name)


@pytest.mark.parametrize("reactor", [Settlement, DailySettlement])
def test_a_busy_period_claim_emits_its_refusal(reactor: type[Reactor], key: str) -> None:
    """Another owner runs this bucket (wait=0): the refusal names step, key and execution,
    and the ordered turn taken before it is given back."""
    claim = Period(f"daily:{key}", every="day").claim(owner="another-runner")
    try:
        heard = primitive_hooks()
        outcome = reactor.run(account_id=key)
    finally:
        claim.release(mark=False)
    assert isinstance(outcome, FailureResult), outcome
    step_name = "settle" if reactor is Settlement else None
    (refused,) = heard.of("on_period_acquisition_failed")
    assert refused.error is outcome.error
    assert [hook for hook, _ in heard.hooks() if hook.startswith("on_period")] == [
        "on_period_acquisition_failed"
    ]
    assert heard.of("on_ordered_lock_released") != []
    _assert_attributed(heard, key, outcome, step_name)


@pytest.mark.parametrize("reactor", [Settlement, DailySettlement])
def test_an_ordered_turn_not_come_emits_its_refusal(reactor: type[Reactor], key: str) -> None:
    """An earlier position is in flight and the run does not wait: the refusal carries the
    error and names step, key and execution; nothing after the turn is taken."""
    ahead = OrderedLock(f"line:{key}")
    first = ahead.take_position()
    try:
        heard = primitive_hooks()
        outcome = reactor.run(account_id=key)
    finally:
        ahead.abandon(first)
    assert isinstance(outcome, FailureResult), outcome
    step_name = "settle" if reactor is Settlement else None
    (refused,) = heard.of("on_ordered_lock_acquisition_failed")
    assert refused.error is outcome.error
    assert isinstance(refused.error, OrderedLockWaitError)
    assert [hook for hook, _ in heard.hooks() if hook in PRIMITIVE_HOOKS] == [
        "on_ordered_lock_acquisition_failed"
    ]
    _assert_attributed(heard, key, outcome, step_name)


def test_a_short_circuited_turn_is_reported_taken_and_passed_on(key: str) -> None:
    """The position before fails (strict): the run's turn comes short-circuited and the step is
    skipped; the turn is still reported acquired, and released once the step has ended."""
    ahead = OrderedLock(f"line:{key}")
    first = ahead.wait_turn(ahead.take_position())
    heard = primitive_hooks()
    ended: list[Outcome] = []
    runner = threading.Thread(target=lambda: ended.append(Queue.run(account_id=key)))
    runner.start()
    try:
        until(lambda: ahead.state().in_flight >= 2, "the run took its place behind first")
    finally:
        first.release(failed=True)
        runner.join(10)
    [outcome] = ended
    assert outcome.is_success, outcome
    assert heard.hooks() == [
        ("on_ordered_lock_acquired", "settle"),
        ("on_step_skipped", "settle"),
        ("on_ordered_lock_released", "settle"),
    ]
    _assert_attributed(heard, key, outcome, "settle")


# -- the contention failure outcome ------------------------------------------------------------


@pytest.mark.parametrize(
    ("busy", "error_class"),
    [("lock", LockAcquisitionError), ("semaphore", SemaphoreAcquisitionError)],
)
def test_a_contention_failure_names_reactor_step_and_key(
    busy: str, error_class: type[CoordinationError], key: str
) -> None:
    """The outcome's step_name/reactor_name and the error's message and fields locate it."""
    step_key = f"acct:{key}"
    hold = Lock(step_key).acquire() if busy == "lock" else Semaphore(step_key, limit=1).acquire()
    try:
        outcome = Checkout.run(account_id=key)
    finally:
        hold.release()
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.step_name == "charge"
    assert outcome.reactor_name == "Checkout"
    assert outcome.retryable is False
    error = outcome.error
    assert isinstance(error, error_class)
    assert error.primitive == busy
    assert error.key == step_key
    assert (error.reactor, error.step) == ("Checkout", "charge")
    assert str(error).startswith("reactor Checkout, step 'charge': ")
    assert step_key in str(error)
    (entry,) = entries(outcome, "failed")
    assert entry["refused_by"] == "coordination"
    assert entry["primitive"] == busy
    assert entry["key"] == step_key
    assert step_key in entry["error"]


# -- the trace ---------------------------------------------------------------------------------


def test_the_run_entry_records_the_key_the_step_held(key: str) -> None:
    """A coordinated step's "run" entry names its keys; an uncoordinated one has none."""
    outcome = LockCheckout.run(account_id=key)
    assert outcome.is_success, outcome
    (run,) = entries(outcome, "run")
    assert run["coordination"] == {"lock": f"acct:{key}"}
    (ship,) = entries(outcome, "run", "ship")
    assert "coordination" not in ship
    both = Checkout.run(account_id=key)
    (run,) = entries(both, "run")
    assert run["coordination"] == {"lock": f"acct:{key}", "semaphore": f"acct:{key}"}


def test_a_failed_coordinated_step_records_its_key(key: str) -> None:
    """The "failed" entry of a coordinated step whose work raised names its key too."""
    outcome = LockCheckout.run(**failing(key, "compensate"))
    assert isinstance(outcome, FailureResult), outcome
    (failed,) = entries(outcome, "failed")
    assert failed["coordination"] == {"lock": f"acct:{key}"}
    assert "refused_by" not in failed


@pytest.mark.parametrize("kind", ["undo", "compensate"])
def test_rollback_entries_carry_the_key(kind: str, key: str) -> None:
    """The compensate/undo entry of a coordinated step names the key it held (kept from the
    failed work for compensate, re-taken for undo)."""
    outcome = LockCheckout.run(**failing(key, kind))
    assert isinstance(outcome, FailureResult), outcome
    (entry,) = entries(outcome, kind)
    assert entry["ok"] is True
    assert entry["key"] == f"acct:{key}"


# -- a middleware that raises ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["success", "undo", "compensate"])
def test_a_raising_middleware_breaks_nothing_and_holds_are_released(
    kind: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every hook raising: the run ends as it would, other middleware still hear, keys free."""
    rec = Recorder()
    configure(middleware=[Raising(), rec])
    inputs = {"account_id": key} if kind == "success" else failing(key, kind)
    with caplog.at_level(logging.ERROR, logger="py_reactor"):
        outcome = Checkout.run(**inputs)
    assert outcome.is_success is (kind == "success"), outcome
    if isinstance(outcome, FailureResult):
        assert outcome.rollback_failures == []
        assert outcome.step_name == ("ship" if kind == "undo" else "charge")
    else:
        assert outcome.value == "charged"
    if kind == "compensate":  # the failed work's holds are released after its compensate
        assert of_step(rec, "charge") == FAILED_AND_COMPENSATED
    else:
        assert of_step(rec, "charge")[:5] == FORWARD
    assert lock_is_free(f"acct:{key}")
    assert semaphore_is_free(f"acct:{key}")
    logged = [r.getMessage() for r in caplog.records if r.name == "py_reactor"]
    assert any("on_lock_acquired" in m and "Raising" in m for m in logged), logged
    assert any("on_lock_released" in m for m in logged), logged
