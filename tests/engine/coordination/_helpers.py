"""Shared by the coordination tests: records, helpers, the step and common reactors.

Every test runs against the session's private redis-server (see ``conftest.py``). Keys
are unique per test (the ``key`` fixture), reactors read their coordination key from
their ``key`` input, and the one step they run (``Probe``) records that it ran and does
what the test asked of it.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from py_reactor import (
    Failure,
    Halt,
    Lock,
    Middleware,
    Reactor,
    Semaphore,
    Step,
    compose,
    configure,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.errors import LockAcquisitionError, SemaphoreAcquisitionError
from py_reactor.observability import events as ev
from py_reactor.observability.middleware import HOOKS

#: Keys whose Probe step ran, in order (cleared around every test).
ran: list[str] = []

#: What Probe does for a key, instead of returning a value (cleared around every test).
BEHAVIOUR: dict[str, Callable[[Step], Any]] = {}

_REGISTERED = f"stripe-{uuid.uuid4().hex[:8]}"


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


@with_lock(by_key)
class Locked(Reactor):
    key: str
    mode: str = "ok"
    probe = step(Probe)
    returns = "probe"


@with_lock(by_key, wait=0.3)
class LockedWait(Reactor):
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


@with_rate_limit(_REGISTERED)
class Registered(Reactor):
    key: str
    probe = step(Probe)


@with_period(by_key, every="day")
class Daily(Reactor):
    key: str
    mode: str = "ok"
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
