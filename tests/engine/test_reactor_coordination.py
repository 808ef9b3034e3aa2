"""Coordination declared on a reactor: the decorator surface and synchronous run semantics.

Every test runs against the session's private redis-server. Keys are unique per test (the
``key`` fixture), reactors read their coordination key from their ``key`` input, and the one
step they run (``Probe``) records that it ran and does what the test asked of it.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from py_reactor import (
    Failure,
    FailureResult,
    Halt,
    HaltedResult,
    Lock,
    Middleware,
    Reactor,
    Semaphore,
    Step,
    SuccessResult,
    compose,
    configure,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.coordination.declarations import (
    LockDeclaration,
    PeriodDeclaration,
    RateLimitDeclaration,
    SemaphoreDeclaration,
)
from py_reactor.errors import (
    CoordinationError,
    CoordinationKeyError,
    DefinitionError,
    LockAcquisitionError,
    RateLimitExceededError,
    SemaphoreAcquisitionError,
    StoreUnavailableError,
)
from py_reactor.observability import events as ev
from py_reactor.observability.middleware import HOOKS
from tests._redis import PrivateRedis, free_port

#: Keys whose Probe step ran, in order (cleared around every test).
ran: list[str] = []

#: What Probe does for a key, instead of returning a value (cleared around every test).
BEHAVIOUR: dict[str, Callable[[Step], Any]] = {}

_REGISTERED = f"stripe-{uuid.uuid4().hex[:8]}"
_UNREGISTERED = f"nobody-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str) -> Iterator[None]:
    """Point py_reactor at the private server and start every test with empty records."""
    configure(redis_url=redis_url)
    ran.clear()
    BEHAVIOUR.clear()
    yield
    ran.clear()
    BEHAVIOUR.clear()


@pytest.fixture
def raw(private_redis: PrivateRedis) -> redis.Redis:
    """A plain client of the private server, for reading state and the server's clock."""
    return private_redis.client()


class Recorder(Middleware):
    """Records every event it receives, through every hook."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    def _record(self, event: Any) -> None:
        self.events.append(event)

    def names(self, *wanted: str) -> list[str]:
        """The names of the events received, keeping only ``wanted`` prefixes if given."""
        return [e.name for e in self.events if not wanted or e.name.startswith(wanted)]

    def of(self, kind: type[ev.Event]) -> list[Any]:
        """The events of class ``kind``, in order."""
        return [e for e in self.events if type(e) is kind]


for _hook in HOOKS.values():
    setattr(Recorder, _hook, Recorder._record)


def recorder() -> Recorder:
    """A Recorder, configured as the only middleware."""
    rec = Recorder()
    configure(middleware=[rec])
    return rec


def fresh_window(client: redis.Redis, seconds: int = 60, margin: float = 5.0) -> None:
    """Make sure the next ``margin`` seconds stay inside one ``seconds`` window (server clock).

    Rate-limit windows are aligned on the server's clock; a test counting calls in one window
    must not straddle a boundary. This waits out the end of a window, it synchronizes nothing.
    """
    sec, usec = client.time()
    into = sec % seconds + usec / 1e6
    if seconds - into < margin:
        time.sleep(seconds - into + 0.05)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll store state until ``condition()`` holds (the waiter inside the library is opaque)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached within the timeout")
        time.sleep(0.005)


def lock_is_free(key: str) -> bool:
    """Whether another owner can take lock ``key`` at once (it is then released again)."""
    try:
        hold = Lock(key, wait=0).acquire()
    except LockAcquisitionError:
        return False
    hold.release()
    return True


def semaphore_is_free(key: str) -> bool:
    """Whether another owner can take the only slot of semaphore ``key`` at once."""
    try:
        hold = Semaphore(key, limit=1, wait=0).acquire()
    except SemaphoreAcquisitionError:
        return False
    hold.release()
    return True


# -- the step and the reactors -----------------------------------------------------------------


def by_key(inputs: Any) -> str:
    """The coordination key of every reactor here: its ``key`` input."""
    return str(inputs["key"])


class Probe(Step):
    """Records that it ran, then does what ``mode`` (or a BEHAVIOUR for its key) says."""

    key: str
    mode: str = "ok"

    def run(self) -> Any:
        ran.append(self.inputs.key)
        behaviour = BEHAVIOUR.get(self.inputs.key)
        if behaviour is not None:
            return behaviour(self)
        mode = self.inputs.mode
        if mode == "fail":
            return Failure("probe failed", retryable=False)
        if mode == "raise":
            raise ValueError("probe raised")
        if mode == "halt":
            return Halt("probe halted")
        if mode == "interrupt":
            raise KeyboardInterrupt
        return f"ran {self.inputs.key}"


class Tail(Step):
    """Runs after a composed child and records the lock's state at that moment."""

    key: str

    def run(self) -> Any:
        state = Lock(self.inputs.key).state()
        return {"owner": state.owner, "count": state.count}


class Plain(Reactor):
    key: str
    probe = step(Probe)
    returns = "probe"


@with_lock(by_key)
class Locked(Reactor):
    key: str
    mode: str = "ok"
    probe = step(Probe)
    returns = "probe"


class LockedSub(Locked):
    pass


@with_semaphore(lambda inputs: f"{inputs['key']}-sub", limit=2)
class LockedSubWithSemaphore(Locked):
    pass


@with_lock("replaced-key", ttl=5)
class LockedSubRedeclared(Locked):
    pass


@with_lock(by_key, wait=0.3)
class LockedWait(Reactor):
    key: str
    probe = step(Probe)


@with_lock(by_key, wait=10)
class LockedLongWait(Reactor):
    key: str
    probe = step(Probe)


@with_lock(by_key, ttl=1)
class ShortTtl(Reactor):
    key: str
    probe = step(Probe)


@with_semaphore(by_key, limit=1, wait=0.3)
class SemaphoreWait(Reactor):
    key: str
    probe = step(Probe)


@with_lock(by_key)
@with_semaphore(by_key, limit=1)
class Guarded(Reactor):
    key: str
    mode: str = "ok"
    probe = step(Probe)
    returns = "probe"


@with_rate_limit(by_key, limit=2, period="minute")
class RateLimited(Reactor):
    key: str
    probe = step(Probe)


@with_rate_limit(by_key, limits={"minute": 2, "hour": 3})
class MinuteTighter(Reactor):
    key: str
    probe = step(Probe)


@with_rate_limit(by_key, limits={"minute": 3, "hour": 2})
class HourTighter(Reactor):
    key: str
    probe = step(Probe)


@with_rate_limit(_REGISTERED)
class Registered(Reactor):
    key: str
    probe = step(Probe)


@with_rate_limit(_UNREGISTERED)
class Unregistered(Reactor):
    key: str
    probe = step(Probe)


@with_period(by_key, every="day")
class Daily(Reactor):
    key: str
    mode: str = "ok"
    probe = step(Probe)


@with_lock(by_key, wait=10)
@with_period(by_key, every="day")
class LockedDaily(Reactor):
    key: str
    probe = step(Probe)


@with_lock(by_key)
@with_rate_limit(by_key, limit=1, period="minute")
class LockedRated(Reactor):
    key: str
    probe = step(Probe)


@with_semaphore(by_key, limit=1)
@with_rate_limit(by_key, limit=1, period="minute")
class SemaphoreRated(Reactor):
    key: str
    probe = step(Probe)


@with_period(by_key, every="day")
@with_rate_limit(by_key, limit=1, period="minute")
class DailyRated(Reactor):
    key: str
    probe = step(Probe)


@with_rate_limit(by_key, limit=5, period="minute")
@with_period(by_key, every="day")
@with_semaphore(by_key, limit=1)
@with_lock(by_key)
class FourPrimitives(Reactor):
    key: str
    mode: str = "ok"
    probe = step(Probe)
    returns = "probe"


@with_lock(lambda inputs: f"{inputs['key']}-n{inputs['n']}")
class Typed(Reactor):
    key: str
    n: int
    probe = step(Probe)


@with_lock(by_key)
@with_semaphore(lambda inputs: 1 / 0, limit=1)
class RaisingKey(Reactor):
    key: str
    probe = step(Probe)


@with_lock(lambda inputs: None)
class NoneKey(Reactor):
    key: str
    probe = step(Probe)


@with_lock(lambda inputs: "")
class EmptyKey(Reactor):
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


@functools.cache
def ordered_reactors() -> dict[str, type[Reactor]]:
    """Reactors with an ordered lock, built on first use (the primitive is imported lazily)."""

    @with_ordered_lock(by_key, strict=True)
    class StrictOrdered(Reactor):
        key: str
        mode: str = "ok"
        probe = step(Probe)

    @with_ordered_lock(by_key, strict=False)
    class LenientOrdered(Reactor):
        key: str
        mode: str = "ok"
        probe = step(Probe)

    @with_ordered_lock(by_key)
    @with_lock(by_key)
    class OrderedLocked(Reactor):
        key: str
        probe = step(Probe)

    @with_ordered_lock(by_key, ttl=120, poison_pill_timeout=30, strict=False)
    @with_rate_limit(by_key, limit=5, period="minute")
    @with_period(by_key, every="day")
    @with_semaphore(by_key, limit=1)
    @with_lock(by_key)
    class AllFive(Reactor):
        key: str
        probe = step(Probe)

    @with_ordered_lock(by_key, wait=5)
    class OrderedChild(Reactor):
        key: str
        probe = step(Probe)

    @with_ordered_lock(by_key, wait=5)
    class OrderedParent(Reactor):
        key: str
        child = compose(OrderedChild)

    @with_ordered_lock(by_key, wait=0.3)
    class ImpatientOrdered(Reactor):
        key: str
        probe = step(Probe)

    return {
        "strict": StrictOrdered,
        "impatient": ImpatientOrdered,
        "parent": OrderedParent,
        "lenient": LenientOrdered,
        "locked": OrderedLocked,
        "all": AllFive,
    }


def ordered_issued(raw: redis.Redis, key: str) -> int:
    """How many positions the ordered lock ``key`` has handed out in its current epoch."""
    from py_reactor.coordination.ordered_lock import OrderedLock

    return OrderedLock(key).state().next_position - 1


# -- declarations: introspection, inheritance, refusals ----------------------------------------


def test_coordination_lists_exactly_the_declared_primitives() -> None:
    """``Reactor.coordination`` maps each declared primitive to its declaration, and no more."""
    assert dict(Plain.coordination) == {}
    assert set(Locked.coordination) == {"lock"}
    assert set(Guarded.coordination) == {"lock", "semaphore"}
    assert set(FourPrimitives.coordination) == {"lock", "semaphore", "period", "rate_limit"}
    lock = FourPrimitives.coordination["lock"]
    assert isinstance(lock, LockDeclaration)
    assert lock.key is by_key
    assert (lock.ttl, lock.wait, lock.auto_extend) == (60, 0, True)
    semaphore = FourPrimitives.coordination["semaphore"]
    assert isinstance(semaphore, SemaphoreDeclaration)
    assert semaphore.limit == 1
    period = FourPrimitives.coordination["period"]
    assert isinstance(period, PeriodDeclaration)
    assert period.every == "day"
    rate = FourPrimitives.coordination["rate_limit"]
    assert isinstance(rate, RateLimitDeclaration)
    assert (rate.limit, rate.period) == (5, "minute")
    waiting = LockedWait.coordination["lock"]
    assert waiting.wait == 0.3
    assert MinuteTighter.coordination["rate_limit"].limits == {"minute": 2, "hour": 3}
    assert Registered.coordination["rate_limit"].key == _REGISTERED


def test_all_five_primitives_are_introspectable_together() -> None:
    """A reactor declaring all five primitives lists all five, ordered lock options included."""
    decl = ordered_reactors()["all"].coordination
    assert set(decl) == {"lock", "semaphore", "rate_limit", "period", "ordered_lock"}
    ordered = decl["ordered_lock"]
    assert (ordered.ttl, ordered.poison_pill_timeout, ordered.strict) == (120, 30, False)
    assert ordered.key is by_key


def test_coordination_mapping_is_read_only() -> None:
    """Nobody can change a reactor's declarations by writing into ``.coordination``."""
    with pytest.raises(TypeError):
        Locked.coordination["semaphore"] = object()  # type: ignore[index]
    assert set(Locked.coordination) == {"lock"}


def test_subclasses_inherit_and_extend_without_touching_the_parent() -> None:
    """A subclass inherits its parent's declarations; declaring more gives it its own mapping."""
    assert LockedSub.coordination["lock"] is Locked.coordination["lock"]
    assert set(LockedSubWithSemaphore.coordination) == {"lock", "semaphore"}
    assert LockedSubWithSemaphore.coordination["lock"] is Locked.coordination["lock"]
    assert set(Locked.coordination) == {"lock"}
    assert LockedSubRedeclared.coordination["lock"].key == "replaced-key"
    assert LockedSubRedeclared.coordination["lock"].ttl == 5
    assert Locked.coordination["lock"].key is by_key


def test_an_inherited_lock_is_taken_when_the_subclass_runs(key: str) -> None:
    """A subclass without decorators of its own still runs under its parent's lock."""
    seen: list[Any] = []
    BEHAVIOUR[key] = lambda probe: seen.append(Lock(key).state().owner) or "ok"
    outcome = LockedSub.run(key=key)
    assert outcome.is_success, outcome
    assert seen == [outcome.context.root_id]


def test_declaring_the_same_primitive_twice_on_one_class_is_refused() -> None:
    """Two ``with_lock`` on one class is a definition error naming the class and the decorator."""
    with pytest.raises(DefinitionError) as caught:

        @with_lock("a")
        @with_lock("b")
        class Twice(Reactor):
            key: str
            probe = step(Probe)

    message = str(caught.value)
    assert "with_lock" in message
    assert "Twice" in message
    assert "twice" in message


BAD_OPTIONS: list[tuple[str, Callable[[], Any], str]] = [
    ("lock ttl=0", lambda: with_lock("k", ttl=0), "ttl"),
    ("lock ttl=-1", lambda: with_lock("k", ttl=-1), "ttl"),
    ("lock wait=-1", lambda: with_lock("k", wait=-1), "wait"),
    ("lock auto_extend", lambda: with_lock("k", auto_extend="yes"), "auto_extend"),  # type: ignore[arg-type]
    ("lock key=''", lambda: with_lock(""), "key"),
    ("lock key=None", lambda: with_lock(None), "key"),  # type: ignore[arg-type]
    ("semaphore limit=0", lambda: with_semaphore("k", limit=0), "limit"),
    ("semaphore wait=-1", lambda: with_semaphore("k", limit=2, wait=-1), "wait"),
    ("semaphore key=''", lambda: with_semaphore("", limit=2), "key"),
    ("rate limit=0", lambda: with_rate_limit("k", limit=0, period="minute"), "limit"),
    ("rate limit no period", lambda: with_rate_limit("k", limit=3), "period"),
    ("rate period", lambda: with_rate_limit("k", limit=3, period="fortnight"), "period"),
    ("rate limits", lambda: with_rate_limit("k", limits={"fortnight": 1}), "limits"),
    ("rate limits value", lambda: with_rate_limit("k", limits={"minute": 0}), "limits"),
    ("rate fn without limit", lambda: with_rate_limit(lambda i: "x"), "limit"),
    ("rate key=None", lambda: with_rate_limit(None, limit=1, period="minute"), "key"),  # type: ignore[arg-type]
    ("period every", lambda: with_period("k", every="fortnight"), "every"),
    ("period every=0", lambda: with_period("k", every=0), "every"),
    ("period key=''", lambda: with_period("", every="day"), "key"),
    ("ordered ppt=0", lambda: with_ordered_lock("k", poison_pill_timeout=0), "poison_pill_timeout"),
    ("ordered strict", lambda: with_ordered_lock("k", strict="yes"), "strict"),  # type: ignore[arg-type]
    ("ordered ttl=0", lambda: with_ordered_lock("k", ttl=0), "ttl"),
    ("ordered key=None", lambda: with_ordered_lock(None), "key"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(
    ("make", "option"), [(m, o) for _, m, o in BAD_OPTIONS], ids=[i for i, _, _ in BAD_OPTIONS]
)
def test_bad_options_are_refused_when_the_decorator_is_called(
    make: Callable[[], Any], option: str
) -> None:
    """A bad option fails when ``with_*(...)`` is called, with a message naming the option."""
    with pytest.raises(DefinitionError) as caught:
        make()
    assert option in str(caught.value)
    assert "with_" in str(caught.value)


def test_good_options_are_accepted() -> None:
    """The options the refusals are tested against are accepted when valid."""
    with_lock("k", ttl=0.5, wait=0, auto_extend=False)
    with_semaphore("k", limit=1, wait=0)
    with_rate_limit("k", limit=1, period=30)
    with_rate_limit("k", limits={"second": 3, "minute": 100})
    with_rate_limit("registered-name")
    with_period("k", every=90)
    with_ordered_lock("k", ttl=10, poison_pill_timeout=1, strict=False)


class SomeStep(Step):
    def run(self) -> Any:
        return 1


def _inline() -> int:
    return 1


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(lambda: SomeStep, id="step-class"),
        pytest.param(lambda: step()(_inline), id="inline-step-declaration"),
        pytest.param(lambda: _inline, id="plain-function-under-step"),
    ],
)
@pytest.mark.parametrize(
    "decorator",
    [
        pytest.param(lambda: with_lock("k"), id="lock"),
        pytest.param(lambda: with_semaphore("k", limit=1), id="semaphore"),
        pytest.param(lambda: with_rate_limit("k", limit=1, period="minute"), id="rate_limit"),
        pytest.param(lambda: with_period("k", every="day"), id="period"),
    ],
)
def test_decorating_a_step_is_refused_pointing_at_the_reactor(
    target: Callable[[], Any], decorator: Callable[[], Any]
) -> None:
    """A coordination decorator on a step is refused, saying to declare it on the reactor."""
    with pytest.raises(DefinitionError) as caught:
        decorator()(target())
    assert "reactor" in str(caught.value)


def test_ordered_lock_on_a_step_is_refused() -> None:
    """``with_ordered_lock`` on a Step class is refused like the other four."""
    with pytest.raises(DefinitionError, match="reactor"):
        with_ordered_lock("k")(SomeStep)


# -- key functions -----------------------------------------------------------------------------


def test_key_functions_receive_the_validated_inputs_read_only(key: str) -> None:
    """The key function sees validated (coerced) inputs in a mapping it cannot change."""
    seen: list[Any] = []

    @with_lock(lambda inputs: seen.append(inputs) or inputs["key"])
    class Local(Reactor):
        key: str
        n: int
        probe = step(Probe)

    BEHAVIOUR[key] = lambda probe: Lock(key).state().owner
    outcome = Local.run(key=key, n="7")
    assert outcome.is_success, outcome
    assert len(seen) == 1
    assert seen[0]["n"] == 7
    assert isinstance(seen[0]["n"], int)
    with pytest.raises(TypeError):
        seen[0]["n"] = 8
    assert outcome.results["probe"] == outcome.context.root_id


def test_a_key_function_can_build_the_key_from_several_inputs(key: str) -> None:
    """The lock taken is the one the key function names for these inputs."""
    BEHAVIOUR[key] = lambda probe: Lock(f"{key}-n3").state().owner
    outcome = Typed.run(key=key, n=3)
    assert outcome.is_success, outcome
    assert outcome.results["probe"] == outcome.context.root_id


@pytest.mark.parametrize(
    ("reactor", "cause"),
    [
        pytest.param(RaisingKey, "ZeroDivisionError", id="raises"),
        pytest.param(NoneKey, "None", id="returns-None"),
        pytest.param(EmptyKey, "''", id="returns-empty"),
    ],
)
def test_a_bad_key_fails_the_run_before_any_work(
    reactor: type[Reactor], cause: str, key: str
) -> None:
    """A key function raising or returning None/"" fails the run naming the cause; nothing held."""
    rec = recorder()
    outcome = reactor.run(key=key)
    assert isinstance(outcome, FailureResult)
    error = outcome.error
    assert isinstance(error, CoordinationKeyError)
    assert error.reactor == reactor.__name__
    assert reactor.__name__ in str(error)
    assert cause in str(error)
    assert outcome.step_name is None
    assert outcome.reactor_name == reactor.__name__
    assert ran == []
    assert rec.of(ev.LockAcquired) == []
    assert outcome.context.private.get("held_keys", []) == []
    assert lock_is_free(key)


def test_a_raising_key_function_keeps_its_exception_as_the_cause(key: str) -> None:
    """The original exception of a raising key function is chained to the key error."""
    outcome = RaisingKey.run(key=key)
    assert isinstance(outcome.error, CoordinationKeyError)
    assert isinstance(outcome.error.__cause__, ZeroDivisionError)
    assert outcome.error.primitive == "semaphore"


# -- order of acquisition ----------------------------------------------------------------------


def test_lock_is_taken_before_the_semaphore_and_released_after_it(key: str) -> None:
    """Middleware sees lock, semaphore, the step, then the semaphore and the lock released."""
    rec = recorder()
    outcome = Guarded.run(key=key)
    assert outcome.is_success, outcome
    names = rec.names("lock.", "semaphore.", "step.")
    assert names == [
        "lock.acquired",
        "semaphore.acquired",
        "step.started",
        "step.completed",
        "semaphore.released",
        "lock.released",
    ]
    for event in rec.of(ev.LockAcquired) + rec.of(ev.SemaphoreAcquired):
        assert event.key == key
        assert event.step is None
        assert event.execution_id == outcome.execution_id


def test_every_primitive_is_held_by_the_run_while_its_step_runs(key: str, raw: redis.Redis) -> None:
    """Inside the step the run holds the lock, a slot, the period claim and one rate-limit call."""
    from py_reactor.coordination.period import Period
    from py_reactor.coordination.rate_limit import RateLimit

    fresh_window(raw)
    seen: dict[str, Any] = {}

    def look(probe: Step) -> str:
        lock = Lock(key).state()
        seen["lock"] = (lock.owner, lock.count)
        seen["semaphore"] = Semaphore(key, limit=1).state().held
        seen["claim"] = raw.exists(f"py_reactor:period:{key}:claim")
        seen["period_done"] = Period(key, every="day").is_done()
        seen["rate"] = RateLimit(key, limit=5, period="minute").usage()
        seen["root"] = probe.context.root_id
        seen["held_keys"] = list(probe.context.private.get("held_keys", []))
        return "looked"

    BEHAVIOUR[key] = look
    outcome = FourPrimitives.run(key=key)
    assert outcome.is_success, outcome
    assert seen["lock"] == (outcome.context.root_id, 1)
    assert seen["root"] == outcome.execution_id
    assert seen["semaphore"] == 1
    assert seen["claim"] == 1
    assert seen["period_done"] is False
    assert seen["rate"] == {60: 1}
    held = [k for k in seen["held_keys"] if k.startswith(("lock:", "semaphore:"))]
    assert held == [f"lock:{key}", f"semaphore:{key}"]
    # Afterwards: everything released, the period marked, the call still counted.
    assert lock_is_free(key)
    assert semaphore_is_free(key)
    assert raw.exists(f"py_reactor:period:{key}:claim") == 0
    assert Period(key, every="day").is_done() is True
    assert RateLimit(key, limit=5, period="minute").usage() == {60: 1}
    assert outcome.context.private.get("held_keys") == []


def test_a_busy_lock_does_not_spend_the_rate_limit(key: str, raw: redis.Redis) -> None:
    """The rate limit is taken after the lock: a run refused by the lock is not counted."""
    fresh_window(raw)
    hold = Lock(key).acquire()
    try:
        refused = LockedRated.run(key=key)
    finally:
        hold.release()
    assert isinstance(refused.error, LockAcquisitionError)
    admitted = LockedRated.run(key=key)
    assert admitted.is_success, admitted
    assert ran == [key]


def test_a_full_semaphore_does_not_spend_the_rate_limit(key: str, raw: redis.Redis) -> None:
    """The rate limit is taken after the semaphore: a run refused a slot is not counted."""
    fresh_window(raw)
    hold = Semaphore(key, limit=1).acquire()
    try:
        refused = SemaphoreRated.run(key=key)
    finally:
        hold.release()
    assert isinstance(refused.error, SemaphoreAcquisitionError)
    admitted = SemaphoreRated.run(key=key)
    assert admitted.is_success, admitted
    assert ran == [key]


def test_a_done_period_does_not_spend_the_rate_limit(key: str, raw: redis.Redis) -> None:
    """A run that halts on its period is not charged to the rate limit (limit=1 per minute)."""
    fresh_window(raw)
    first = DailyRated.run(key=key)
    assert first.is_success, first
    second = DailyRated.run(key=key)
    assert isinstance(second, HaltedResult), second
    assert second.reason == "period"
    assert ran == [key]


def test_a_done_period_halts_before_the_lock_is_even_tried(key: str) -> None:
    """The period's fast check comes before the lock: a busy lock does not matter once done."""
    assert LockedDaily.run(key=key).is_success
    rec = recorder()
    hold = Lock(key).acquire()
    try:
        outcome = LockedDaily.run(key=key)
    finally:
        hold.release()
    assert isinstance(outcome, HaltedResult), outcome
    assert outcome.reason == "period"
    assert rec.names("lock.") == []
    assert ran == [key]


def test_the_period_is_checked_again_under_the_lock(key: str) -> None:
    """A run that waited for the lock halts if the period was done while it waited."""
    from py_reactor.coordination.period import Period

    hold = Lock(key).acquire()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(LockedDaily.run, key=key)
        wait_until(lambda: Lock(key).state().waiters == 1)
        claim = Period(key, every="day").claim()
        assert claim.due
        claim.release(mark=True)
        hold.release()
        outcome = future.result(timeout=10)
    assert isinstance(outcome, HaltedResult), outcome
    assert outcome.reason == "period"
    assert ran == []
    assert lock_is_free(key)


def test_the_ordered_lock_gate_comes_before_the_lock(key: str, raw: redis.Redis) -> None:
    """While a run waits for its ordered turn it holds nothing; it takes the lock once it passes."""
    from py_reactor.coordination.ordered_lock import OrderedLock

    reactor = ordered_reactors()["locked"]
    seen: list[Any] = []
    BEHAVIOUR[key] = lambda probe: seen.append(
        (Lock(key).state().owner, dict(probe.context.private["ordered_position"]))
    )
    sequence = OrderedLock(key, ttl=60, poison_pill_timeout=600, strict=True, wait=None)
    first = sequence.take_position()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(reactor.run, key=key)
        wait_until(lambda: ordered_issued(raw, key) == 2)
        assert Lock(key).state().owner is None
        assert ran == []
        turn = sequence.wait_turn(first)
        assert not turn.short_circuit
        turn.release(failed=False)
        outcome = future.result(timeout=10)
    assert outcome.is_success, outcome
    assert len(seen) == 1
    owner, position = seen[0]
    assert owner == outcome.context.root_id
    assert position["number"] == 2
    assert position["key"] == key
    assert "ordered_position" not in outcome.context.private
    assert lock_is_free(key)


# -- release in every outcome ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("ok", SuccessResult),
        ("fail", FailureResult),
        ("raise", FailureResult),
        ("halt", HaltedResult),
    ],
)
def test_holds_are_released_in_reverse_whatever_the_outcome(
    mode: str, expected: type, key: str
) -> None:
    """After success, Failure, a raised exception or Halt, the lock and the slot are free again."""
    rec = recorder()
    outcome = Guarded.run(key=key, mode=mode)
    assert isinstance(outcome, expected), outcome
    assert ran == [key]
    assert rec.names("lock.", "semaphore.")[-2:] == ["semaphore.released", "lock.released"]
    assert lock_is_free(key)
    assert semaphore_is_free(key)
    assert outcome.context.private.get("held_keys") == []


def test_holds_are_released_when_a_step_raises_keyboard_interrupt(key: str) -> None:
    """Even an interrupt that aborts the run (and propagates) releases the lock and the slot."""
    with pytest.raises(KeyboardInterrupt):
        Guarded.run(key=key, mode="interrupt")
    assert lock_is_free(key)
    assert semaphore_is_free(key)


def test_a_refused_rate_limit_releases_the_lock_and_slot_taken_before_it(
    key: str, raw: redis.Redis
) -> None:
    """A run refused by its rate limit (taken last) gives back the lock and the slot it took."""
    fresh_window(raw)
    assert FourPrimitives.run(key=key, mode="fail").error is not None
    for _ in range(4):
        # failed runs leave the period due, and each is charged to the rate limit (5/min)
        assert FourPrimitives.run(key=key, mode="fail").error is not None
    rec = recorder()
    refused = FourPrimitives.run(key=key)
    assert isinstance(refused.error, RateLimitExceededError), refused
    assert rec.names("lock.", "semaphore.") == [
        "lock.acquired",
        "semaphore.acquired",
        "semaphore.released",
        "lock.released",
    ]
    assert len(ran) == 5
    assert lock_is_free(key)
    assert semaphore_is_free(key)


# -- contention --------------------------------------------------------------------------------


def test_a_busy_lock_fails_the_run_after_waiting(key: str) -> None:
    """With the key held elsewhere it waits ``wait`` then fails with a typed, located error."""
    rec = recorder()
    hold = Lock(key).acquire()
    try:
        started = time.monotonic()
        outcome = LockedWait.run(key=key)
        elapsed = time.monotonic() - started
    finally:
        hold.release()
    assert isinstance(outcome, FailureResult)
    error = outcome.error
    assert isinstance(error, LockAcquisitionError)
    assert error.reactor == "LockedWait"
    assert error.key == key
    assert error.primitive == "lock"
    assert "LockedWait" in str(error)
    assert key in str(error)
    assert outcome.step_name is None
    assert outcome.retryable is False
    assert ran == []
    assert 0.25 <= elapsed < 5
    failed = rec.of(ev.LockAcquisitionFailed)
    assert len(failed) == 1
    assert failed[0].key == key
    assert failed[0].error is error
    assert rec.of(ev.LockAcquired) == []
    assert rec.of(ev.LockReleased) == []


def test_a_lock_freed_during_the_wait_is_handed_to_the_run(key: str) -> None:
    """A run waiting for a busy lock gets it as soon as the holder releases, and runs."""
    hold = Lock(key).acquire()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(LockedLongWait.run, key=key)
        wait_until(lambda: Lock(key).state().waiters == 1)
        hold.release()
        outcome = future.result(timeout=10)
    assert outcome.is_success, outcome
    assert ran == [key]


def test_a_full_semaphore_fails_the_run_after_waiting(key: str) -> None:
    """With the only slot taken elsewhere the run waits, then fails: SemaphoreAcquisitionError."""
    rec = recorder()
    hold = Semaphore(key, limit=1).acquire()
    try:
        started = time.monotonic()
        outcome = SemaphoreWait.run(key=key)
        elapsed = time.monotonic() - started
    finally:
        hold.release()
    assert isinstance(outcome, FailureResult)
    error = outcome.error
    assert isinstance(error, SemaphoreAcquisitionError)
    assert error.reactor == "SemaphoreWait"
    assert error.key == key
    assert "SemaphoreWait" in str(error)
    assert key in str(error)
    assert ran == []
    assert 0.25 <= elapsed < 5
    failed = rec.of(ev.SemaphoreAcquisitionFailed)
    assert [e.key for e in failed] == [key]


# -- rate limits -------------------------------------------------------------------------------


def test_a_rate_limit_admits_limit_runs_per_window(key: str, raw: redis.Redis) -> None:
    """limit=2 per minute: two runs pass, the third fails with retry_after within the minute."""
    fresh_window(raw)
    first, second, third = (RateLimited.run(key=key) for _ in range(3))
    assert first.is_success
    assert second.is_success
    assert isinstance(third, FailureResult)
    error = third.error
    assert isinstance(error, RateLimitExceededError)
    assert 0 < error.retry_after <= 60
    assert error.key == key
    assert error.reactor == "RateLimited"
    assert "RateLimited" in str(error)
    assert key in str(error)
    assert third.retryable is False
    assert ran == [key, key]


def test_every_window_of_a_multi_window_limit_is_enforced(key: str, raw: redis.Redis) -> None:
    """With minute and hour windows, whichever is tighter refuses; refused runs count nowhere."""
    from py_reactor.coordination.rate_limit import RateLimit

    fresh_window(raw)
    minute_key, hour_key = f"{key}-m", f"{key}-h"
    minute_runs = [MinuteTighter.run(key=minute_key) for _ in range(3)]
    assert [o.is_success for o in minute_runs] == [True, True, False]
    assert isinstance(minute_runs[2].error, RateLimitExceededError)
    assert 0 < minute_runs[2].error.retry_after <= 60
    usage = RateLimit(minute_key, limits={"minute": 2, "hour": 3}).usage()
    assert usage == {60: 2, 3600: 2}

    hour_runs = [HourTighter.run(key=hour_key) for _ in range(3)]
    assert [o.is_success for o in hour_runs] == [True, True, False]
    assert isinstance(hour_runs[2].error, RateLimitExceededError)
    assert 0 < hour_runs[2].error.retry_after <= 3600
    assert RateLimit(hour_key, limits={"minute": 3, "hour": 2}).usage() == {60: 2, 3600: 2}
    assert ran == [minute_key, minute_key, hour_key, hour_key]


def test_a_registered_rate_limit_is_used_by_name(key: str, raw: redis.Redis) -> None:
    """``with_rate_limit("name")`` enforces the limit registered with configure(rate_limits=...)."""
    fresh_window(raw)
    configure(rate_limits={_REGISTERED: {"minute": 1}})
    first = Registered.run(key=key)
    second = Registered.run(key=key)
    assert first.is_success, first
    assert isinstance(second.error, RateLimitExceededError)
    assert second.error.key == _REGISTERED
    assert 0 < second.error.retry_after <= 60
    assert ran == [key]


def test_an_unregistered_rate_limit_name_fails_the_run(key: str) -> None:
    """A rate limit named but never registered fails the run, naming it, before any work."""
    outcome = Unregistered.run(key=key)
    assert isinstance(outcome, FailureResult)
    assert isinstance(outcome.error, CoordinationError)
    assert _UNREGISTERED in str(outcome.error)
    assert outcome.error.reactor == "Unregistered"
    assert ran == []


# -- periods -----------------------------------------------------------------------------------


def test_a_period_runs_once_then_halts_without_running_a_step(key: str) -> None:
    """The first run in a day bucket succeeds; the second halts with reason "period"."""
    rec = recorder()
    first = Daily.run(key=key)
    second = Daily.run(key=key)
    assert isinstance(first, SuccessResult), first
    assert isinstance(second, HaltedResult), second
    assert second.reason == "period"
    assert second.is_success is True
    assert ran == [key]
    halted = rec.of(ev.ReactorHalted)
    assert [e.reason for e in halted] == ["period"]
    assert second.context.status == "halted"


@pytest.mark.parametrize("mode", ["fail", "raise", "halt"])
def test_a_run_that_does_not_plainly_succeed_leaves_the_period_due(mode: str, key: str) -> None:
    """Only a plain success marks the period: after Failure, exception or Halt the next is due."""
    not_plain = Daily.run(key=key, mode=mode)
    assert not isinstance(not_plain, SuccessResult)
    due = Daily.run(key=key)
    assert isinstance(due, SuccessResult), due
    done = Daily.run(key=key)
    assert isinstance(done, HaltedResult)
    assert done.reason == "period"
    assert ran == [key, key]


def test_periods_with_different_keys_are_independent(key: str) -> None:
    """Marking one key's bucket done does not stop another key."""
    assert Daily.run(key=key).is_success
    other = Daily.run(key=f"{key}-other")
    assert isinstance(other, SuccessResult)
    assert ran == [key, f"{key}-other"]


# -- unreachable store -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reactor",
    [Locked, SemaphoreWait, RateLimited, Daily, Guarded],
    ids=lambda r: r.__name__,
)
def test_an_unreachable_store_fails_the_run_and_nothing_runs(reactor: type[Reactor]) -> None:
    """With Redis unreachable the run fails with StoreUnavailableError and its step never runs."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    configure(redis_url=url)
    outcome = reactor.run(key="unreachable")
    assert isinstance(outcome, FailureResult), outcome
    error = outcome.error
    assert isinstance(error, StoreUnavailableError)
    assert url in str(error)
    assert error.reactor == reactor.__name__
    assert ran == []


# -- ownership, re-entrancy, auto-extend -------------------------------------------------------


def test_holds_belong_to_the_root_execution(key: str) -> None:
    """While the step runs, the lock's owner is the run's root id and held_keys lists it."""
    seen: dict[str, Any] = {}

    def look(probe: Step) -> str:
        state = Lock(key).state()
        seen.update(owner=state.owner, count=state.count, token=state.fencing_token)
        seen["held_keys"] = list(probe.context.private["held_keys"])
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
    assert outcome.context.private["held_keys"] == []


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
        seen["held_keys"] = list(probe.context.private.get("held_keys", []))
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
    assert outcome.context.private["held_keys"] == []
    assert outcome.context.children["child"].private.get("held_keys", []) == []
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
        seen["held_keys"] = list(probe.context.private.get("held_keys", []))
        return "ok"

    BEHAVIOUR[key] = look
    outcome = SemaphoreParent.run(key=key)
    assert outcome.is_success, outcome
    assert seen["held"] == 1
    assert seen["held_keys"].count(f"semaphore:{key}") == 2
    assert semaphore_is_free(key)
    assert outcome.context.private["held_keys"] == []


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


# -- ordered lock ------------------------------------------------------------------------------


def test_a_strict_ordered_lock_halts_later_positions_after_a_failure(
    key: str, raw: redis.Redis
) -> None:
    """Position 2 fails, so position 3 halts with reason "ordered_lock" without running its step."""
    from py_reactor.coordination.ordered_lock import OrderedLock

    reactor = ordered_reactors()["strict"]
    sequence = OrderedLock(key, ttl=60, poison_pill_timeout=600, strict=True, wait=None)
    gate = sequence.take_position()  # the test holds position 1, so the runs queue behind it
    with ThreadPoolExecutor(2) as pool:
        failing = pool.submit(reactor.run, key=key, mode="fail")
        wait_until(lambda: ordered_issued(raw, key) == 2)
        later = pool.submit(reactor.run, key=key, mode="ok")
        wait_until(lambda: ordered_issued(raw, key) == 3)
        assert ran == []
        turn = sequence.wait_turn(gate)
        assert not turn.short_circuit
        turn.release(failed=False)
        failed = failing.result(timeout=10)
        halted = later.result(timeout=10)
    assert isinstance(failed, FailureResult), failed
    assert isinstance(halted, HaltedResult), halted
    assert halted.reason == "ordered_lock"
    assert ran == [key]


def test_a_lenient_ordered_lock_lets_later_positions_run_after_a_failure(
    key: str, raw: redis.Redis
) -> None:
    """With strict=False, the position after a failed one still runs its step."""
    from py_reactor.coordination.ordered_lock import OrderedLock

    reactor = ordered_reactors()["lenient"]
    sequence = OrderedLock(key, ttl=60, poison_pill_timeout=600, strict=False, wait=None)
    gate = sequence.take_position()
    with ThreadPoolExecutor(2) as pool:
        failing = pool.submit(reactor.run, key=key, mode="fail")
        wait_until(lambda: ordered_issued(raw, key) == 2)
        later = pool.submit(reactor.run, key=key, mode="ok")
        wait_until(lambda: ordered_issued(raw, key) == 3)
        sequence.wait_turn(gate).release(failed=False)
        failed = failing.result(timeout=10)
        succeeded = later.result(timeout=10)
    assert isinstance(failed, FailureResult)
    assert isinstance(succeeded, SuccessResult), succeeded
    assert ran == [key, key]


def test_a_failed_position_does_not_poison_the_next_batch(key: str) -> None:
    """Once the sequence drains after a strict failure, a new run of the same key runs normally."""
    reactor = ordered_reactors()["strict"]
    assert isinstance(reactor.run(key=key, mode="fail"), FailureResult)
    after = reactor.run(key=key)
    assert isinstance(after, SuccessResult), after
    assert ran == [key, key]


def test_an_ordered_turn_that_never_comes_fails_the_run_and_frees_its_place(key: str) -> None:
    """A run whose turn does not come within ``wait`` fails; its place does not block later runs."""
    from py_reactor.coordination.ordered_lock import OrderedLock
    from py_reactor.errors import OrderedLockWaitError

    reactor = ordered_reactors()["impatient"]
    sequence = OrderedLock(key, ttl=60, poison_pill_timeout=600, strict=True)
    gate = sequence.take_position()
    started = time.monotonic()
    outcome = reactor.run(key=key)
    elapsed = time.monotonic() - started
    assert isinstance(outcome, FailureResult), outcome
    error = outcome.error
    assert isinstance(error, OrderedLockWaitError)
    assert error.key == key
    assert error.reactor == reactor.__py_reactor_name__
    assert key in str(error)
    assert reactor.__name__ in str(error)
    assert 0.25 <= elapsed < 5
    assert ran == []
    sequence.wait_turn(gate).release(failed=False)
    started = time.monotonic()
    after = reactor.run(key=key)  # would wait out the poison pill if the failed place blocked
    assert isinstance(after, SuccessResult), after
    assert time.monotonic() - started < 5
    assert ran == [key]
