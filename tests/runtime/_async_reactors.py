"""Module-level reactors for the async-unit tests (a worker finds units by module:qualname).

Behaviour is looked up per test key in ``HOOKS`` (``hook(key, name, **values)``), so one class
serves many tests; every lock is keyed on the test's ``key`` input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from py_reactor import (
    Failure,
    Input,
    Reactor,
    Result,
    Step,
    Success,
    async_reactor,
    async_step,
    background,
    compose,
    step,
    with_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)

#: test key -> what a body does (called with the step's name and arguments).
HOOKS: dict[str, Callable[..., Any]] = {}


def hook(key: str, name: str, **values: Any) -> Any:
    action = HOOKS.get(key)
    return None if action is None else action(name, **values)


# -- units ---------------------------------------------------------------------------------------


class Work(Step):
    """A unit with no coordination: calls the hook, returns n * 10."""

    key: str
    n: int

    def run(self) -> Any:
        hook(self.inputs.key, "work", n=self.inputs.n)
        return self.inputs.n * 10

    def compensate(self, error: Any) -> Any:
        hook(self.inputs.key, "compensate work")
        return Success()

    def undo(self, result: Any) -> Any:
        hook(self.inputs.key, "undo work", result=result)
        return Success()


class Boom(Step):
    """A unit whose work fails (after the hook ran)."""

    key: str

    def run(self) -> Any:
        hook(self.inputs.key, "boom")
        return Failure("boom", retryable=False)

    def compensate(self, error: Any) -> Any:
        hook(self.inputs.key, "compensate boom", error=str(error))
        return Success()


@with_lock(lambda a: a["key"], ttl=30)
class LockedWork(Step):
    """A unit that takes the lock on ``key`` where it runs."""

    key: str
    n: int = 1

    def run(self) -> Any:
        hook(self.inputs.key, "locked", n=self.inputs.n)
        return self.inputs.n

    def compensate(self, error: Any) -> Any:
        hook(self.inputs.key, "compensate locked")
        return Success()


@with_semaphore(lambda a: a["key"], limit=1, lease=30)
class OneSlot(Step):
    key: str

    def run(self) -> Any:
        return "one"


@with_semaphore(lambda a: a["key"], limit=2, lease=30)
class TwoSlots(Step):
    key: str

    def run(self) -> Any:
        return "two"


def _broken_key(args: Any) -> str:
    raise KeyError("no such field: account")


@with_lock(_broken_key, ttl=30)
class BrokenKey(Step):
    key: str

    def run(self) -> Any:
        return "never"


class Child(Reactor):
    """A child reactor for async_reactor: one step, value n + 1."""

    key: str
    n: int

    @step
    def add(key: str, n: int) -> int:
        hook(key, "child add", n=n)
        return n + 1

    @add.undo
    def _undo_add(result: Any, key: str, n: int) -> Any:
        hook(key, "undo child add", result=result)

    @step(x=Result("add"))
    def check(key: str, x: int) -> int:
        if hook(key, "child check") == "fail":
            raise RuntimeError("child check failed")
        return x

    returns = "check"


@with_lock(lambda i: i["key"], ttl=30)
class LockedChild(Reactor):
    """A child reactor with a reactor-level lock on ``key``."""

    key: str

    @step
    def inside(key: str) -> str:
        hook(key, "locked child")
        return "child done"

    returns = "inside"


# -- parents ---------------------------------------------------------------------------------


class Fan(Reactor):
    """Dispatches ``work``, runs ``meanwhile`` while it runs, then reads it."""

    key: str
    n: int

    work = async_step(Work)

    @step
    def meanwhile(key: str) -> str:
        hook(key, "meanwhile")
        return "went on"

    @step(x=Result("work"), m=Result("meanwhile"))
    def read(key: str, x: int, m: str) -> int:
        hook(key, "read", x=x)
        return x + 1

    returns = "read"


class Forms(Reactor):
    """The inline form and async_reactor, read by one step."""

    key: str
    n: int

    @async_step
    def inline(key: str, n: int) -> int:
        hook(key, "inline", n=n)
        return n * 2

    kid = async_reactor(Child)

    @step(a=Result("inline"), b=Result("kid"))
    def both(a: int, b: int) -> list[int]:
        return [a, b]

    returns = "both"


class ReturnsUnit(Reactor):
    key: str
    n: int

    work = async_step(Work)
    returns = "work"


@background
class BgFan(Fan):
    """``Fan`` in a worker: its reader parks until the unit ends."""


@background
class BgReturnsUnit(ReturnsUnit):
    pass


class Unread(Reactor):
    """A unit that fails and that nobody reads."""

    key: str

    boom = async_step(Boom)

    @step
    def fine(key: str) -> str:
        hook(key, "fine")
        return "fine"

    returns = "fine"


class ReadsFailure(Reactor):
    """An earlier step, a unit that fails, a reader of it."""

    key: str

    @step
    def first(key: str) -> str:
        hook(key, "first")
        return "first"

    @first.undo
    def _undo_first(result: Any, key: str) -> Any:
        hook(key, "undo first")

    boom = async_step(Boom, wait_for=["first"])

    @step(x=Result("boom"))
    def read(key: str, x: Any) -> Any:
        hook(key, "read")
        return x

    returns = "read"


class ReadsChildFailure(Reactor):
    key: str
    n: int

    kid = async_reactor(Child)

    @step(x=Result("kid"))
    def read(x: int) -> int:
        return x


class ReadThenFail(Reactor):
    """Reads a unit and a child, then fails: both are undone with the run's rollback."""

    key: str
    n: int

    work = async_step(Work)
    kid = async_reactor(Child)

    @step(x=Result("work"), y=Result("kid"))
    def explode(key: str, x: int, y: int) -> None:
        hook(key, "explode")
        raise RuntimeError("explode")


class Locking(Reactor):
    """Dispatches a unit locked on ``key``."""

    key: str
    n: int

    unit = async_step(LockedWork)
    returns = "unit"


class LaterLock(Reactor):
    """Dispatches a unit locked on ``key``; waits until its body started; then takes ``key``
    itself in a later step (which must wait for the unit to release it)."""

    key: str
    n: int

    unit = async_step(LockedWork)

    @step
    def gate(key: str) -> str:
        hook(key, "gate")
        return "gate"

    @step(g=Result("gate"))
    @with_lock(lambda a: a["key"], ttl=30, wait=20)
    def mine(key: str, g: str) -> str:
        hook(key, "mine")
        return "mine"

    returns = "mine"


@background
class BgLocking(Locking):
    pass


class ReadsLockedChild(Reactor):
    key: str

    kid = async_reactor(LockedChild)
    returns = "kid"


# -- the hand-off deadlock guard -------------------------------------------------------------


@with_lock(lambda i: i["key"], ttl=30)
class GuardedByReactor(Reactor):
    """Holds ``key`` at reactor level, then dispatches a unit that wants it."""

    key: str

    @step
    def first(key: str) -> str:
        hook(key, "first")
        return "first"

    @first.undo
    def _undo_first(result: Any, key: str) -> Any:
        hook(key, "undo first")

    unit = async_step(LockedWork, wait_for=["first"])


@with_semaphore(lambda i: i["key"], limit=1, lease=30)
class GuardedBySemaphore(Reactor):
    key: str

    one = async_step(OneSlot)


@with_semaphore(lambda i: i["key"], limit=1, lease=30)
class NotGuardedTwoSlots(Reactor):
    key: str

    two = async_step(TwoSlots)
    returns = "two"


class InnerDispatch(Reactor):
    """Dispatches a unit locked on ``key`` (run nested inside a step that holds it)."""

    key: str

    unit = async_step(LockedWork)
    returns = "unit"


class GuardedByStep(Reactor):
    """A step locked on ``key`` whose body runs ``InnerDispatch`` nested: refused."""

    key: str

    @step
    @with_lock(lambda a: a["key"], ttl=30)
    def outer(key: str) -> Any:
        nested = InnerDispatch.run(key=key)
        hook(key, "nested", outcome=nested)
        return Failure(nested.error) if not nested.is_success else nested.value


@with_lock(lambda i: i["key"], ttl=30)
class GuardedByComposedParent(Reactor):
    """Holds ``key`` at reactor level and composes a child that dispatches a unit on it."""

    key: str

    inner = compose(InnerDispatch)


class GuardedKeyError(Reactor):
    key: str

    broken = async_step(BrokenKey)


@with_lock(lambda i: i["key"], ttl=30)
class GuardedInlineUnwired(Reactor):
    """An inline unit with no wiring: its key comes from the reactor input of the same name."""

    key: str

    @async_step
    @with_lock(lambda a: a["key"], ttl=30)
    def unwired(key: str) -> str:
        return "never"


@with_lock(lambda i: i["key"], ttl=30)
class GuardedChildReactor(Reactor):
    """Holds ``key`` and dispatches a child whose reactor-level lock is on ``key``."""

    key: str

    kid = async_reactor(LockedChild)


class Deferred(Reactor):
    """``second``'s key reads the result of ``first``, a unit not ended when ``second`` is
    dispatched: the guard is skipped (logged) and ``second`` waits for it in its worker."""

    key: str
    n: int

    first = async_step(Work)
    second = async_step(LockedWork, key=Input("key"), n=Result("first"))
    returns = "second"


# -- a nested invoke that contends inside a unit ---------------------------------------------


@with_lock(lambda a: a["key"], ttl=30, wait=0.2)
class Contended(Step):
    key: str

    def run(self) -> Any:
        return "inside"


class InvokesInside(Step):
    key: str

    def run(self) -> Any:
        outcome = Contended.invoke({"key": self.inputs.key})
        hook(self.inputs.key, "invoked", outcome=outcome)
        return outcome


class NestedInvoke(Reactor):
    key: str

    unit = async_step(InvokesInside)
    returns = "unit"


# -- the rest of the family, where the unit runs -----------------------------------------------


@with_period(lambda a: a["key"], every="day")
class Daily(Step):
    key: str

    def run(self) -> Any:
        hook(self.inputs.key, "daily")
        return "sent"


class DailyUnit(Reactor):
    key: str

    daily = async_step(Daily)
    returns = "daily"


@with_rate_limit(lambda a: a["key"], limit=1, period=2)
class Limited(Step):
    key: str
    n: int

    def run(self) -> Any:
        hook(self.inputs.key, "limited", n=self.inputs.n)
        return self.inputs.n


class LimitedUnit(Reactor):
    key: str
    n: int

    limited = async_step(Limited)
    returns = "limited"
