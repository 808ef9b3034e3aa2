"""Module-level reactors for the background tests (a worker finds reactors by module:qualname).

Behaviour is looked up per test key in ``HOOKS``, so one class serves many tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from py_reactor import (
    Failure,
    Reactor,
    Result,
    background,
    compose,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)

#: test key -> what a step body does (called with the step's name and arguments).
HOOKS: dict[str, Callable[..., Any]] = {}


def hook(key: str, name: str, **values: Any) -> Any:
    action = HOOKS.get(key)
    return None if action is None else action(name, **values)


@background
class Whole(Reactor):
    key: str
    n: int

    @step
    def first(key: str, n: int) -> int:
        hook(key, "first")
        return n + 1

    @step(x=Result("first"))
    def second(key: str, x: int) -> int:
        hook(key, "second")
        return x * 2

    returns = "second"


@background(after="first")
class After(Whole):
    pass


@background(before="second")
class Before(Whole):
    pass


@background
class LockedStep(Reactor):
    """``reserve`` (no lock), then ``charge`` under the lock on ``key``."""

    key: str

    @step
    def reserve(key: str) -> str:
        hook(key, "reserve")
        return "reserved"

    @reserve.undo
    def unreserve(result: str, key: str) -> None:
        hook(key, "undo reserve")

    @step(wait_for=["reserve"])
    @with_lock(lambda args: args["key"], ttl=10)
    def charge(key: str) -> str:
        hook(key, "charge")
        return "charged"

    @charge.compensate
    def refund(error: Any, key: str) -> None:
        hook(key, "compensate charge")

    returns = "charge"


@background
@with_lock(lambda args: f"outer:{args['key']}", ttl=10)
class LockedBoth(Reactor):
    """The reactor holds ``outer:<key>``; its step wants ``<key>``."""

    key: str

    @step
    @with_lock(lambda args: args["key"], ttl=10)
    def charge(key: str) -> str:
        hook(key, "charge")
        return "charged"

    returns = "charge"


@background
@with_lock(lambda args: args["key"], ttl=10)
class LockedReactor(Reactor):
    key: str

    @step
    def work(key: str) -> str:
        hook(key, "work")
        return "done"

    returns = "work"


@background
class Limited(Reactor):
    key: str

    @step
    @with_rate_limit(lambda args: args["key"], limit=1, period=2)
    def call(key: str) -> float:
        hook(key, "call")
        return time.time()

    returns = "call"


@background
class Flaky(Reactor):
    """``attempt`` fails on its first attempt, then succeeds (backoff 1 s, fixed)."""

    key: str

    @step
    @retries(max_attempts=2, backoff="fixed", base_delay=1.0)
    def attempt(key: str) -> str:
        outcome = hook(key, "attempt")
        return outcome if outcome is not None else "ok"

    returns = "attempt"


def fail_first(tries: list[str]) -> Callable[..., Any]:
    """A hook that fails the first time it is called, records every call in ``tries``."""

    def action(name: str, **_: Any) -> Any:
        tries.append(name)
        return Failure("first attempt fails") if len(tries) == 1 else None

    return action


def _sequence(args: Any) -> str:
    return f"seq:{args['key']}"


class OrderedInCaller(Reactor):
    """Not background: a step-level ordered lock with no wait= in the calling process."""

    key: str

    @step
    @with_ordered_lock(_sequence)
    def ordered(key: str) -> str:
        hook(key, "ordered")
        return "passed"

    returns = "ordered"


@background
class OrderedStep(OrderedInCaller):
    pass


@background
@with_ordered_lock(_sequence)
class OrderedReactor(Reactor):
    key: str
    label: str

    @step
    def note(key: str, label: str) -> str:
        hook(key, "note", label=label)
        return label

    returns = "note"


#: poison_pill_timeout of the stale-position reactors; their retry backoff (4 s) outlasts it.
STALE_POISON = 1.0


@background
class OrderedRetry(Reactor):
    """``ordered`` (a step-level ordered lock) fails its first attempt and waits 4 s for its
    retry, far past the poison-pill timeout; ``after`` follows it."""

    key: str

    @step
    @with_ordered_lock(_sequence, poison_pill_timeout=STALE_POISON)
    @retries(max_attempts=2, backoff="fixed", base_delay=4.0)
    def ordered(key: str) -> str:
        outcome = hook(key, "ordered")
        return outcome if outcome is not None else "passed"

    @step(wait_for=["ordered"])
    def after(key: str) -> str:
        hook(key, "after")
        return "after"

    returns = "after"


@background
@with_ordered_lock(_sequence, poison_pill_timeout=STALE_POISON)
class OrderedReactorRetry(Reactor):
    """A reactor-level ordered lock; ``attempt`` fails once and waits 4 s for its retry."""

    key: str

    @step
    @retries(max_attempts=2, backoff="fixed", base_delay=4.0)
    def attempt(key: str) -> str:
        outcome = hook(key, "attempt")
        return outcome if outcome is not None else "ok"

    returns = "attempt"


class Kid(Reactor):
    """A composed child: ``prepare``, then ``charge`` under the lock on ``key``."""

    key: str

    @step
    def prepare(key: str) -> str:
        hook(key, "kid prepare")
        return "prepared"

    @step(wait_for=["prepare"])
    @with_lock(lambda args: args["key"], ttl=10)
    def charge(key: str) -> str:
        hook(key, "kid charge")
        return "charged"

    returns = "charge"


@background
class Parent(Reactor):
    key: str

    @step
    def before(key: str) -> str:
        hook(key, "before")
        return "ok"

    kid = compose(Kid)

    @step(value=Result("kid"))
    def after(key: str, value: str) -> str:
        hook(key, "after")
        return value

    returns = "after"


@background
class Unstorable(Reactor):
    """``opaque`` returns what JSON cannot hold: a worker cannot checkpoint it."""

    key: str

    @step
    def first(key: str) -> str:
        hook(key, "first")
        return "ok"

    @first.undo
    def unfirst(result: str, key: str) -> None:
        hook(key, "undo first")

    @step(wait_for=["first"])
    def opaque(key: str) -> object:
        hook(key, "opaque")
        return object()

    @opaque.undo
    def unopaque(result: object, key: str) -> None:
        hook(key, "undo opaque")

    @step(wait_for=["opaque"])
    def last(key: str) -> str:
        hook(key, "last")
        return "never"

    returns = "last"


@background(after="opaque")
class UnstorableBeforeHandOff(Unstorable):
    pass


@background
class Mailer(Reactor):
    """A step under a one-slot semaphore, after a step under a daily period."""

    key: str

    @step
    @with_period(lambda args: f"daily:{args['key']}", every="day")
    def digest(key: str) -> str:
        hook(key, "digest")
        return "digest"

    @step(wait_for=["digest"])
    @with_semaphore(lambda args: args["key"], limit=1)
    def send(key: str) -> str:
        hook(key, "send")
        return "sent"

    returns = "send"


@background
class SlowLimited(Reactor):
    """One call per 4 s window, declared with a long ``wait`` (a caller would sleep it)."""

    key: str

    @step
    @with_rate_limit(lambda args: args["key"], limit=1, period=4, wait=30)
    def call(key: str) -> str:
        hook(key, "call")
        return "called"

    returns = "call"


@background
class Nightly(Reactor):
    """A daily period on ``nightly:<key>`` (its default ``wait`` is 60 s)."""

    key: str

    @step
    @with_period(lambda args: f"nightly:{args['key']}", every="day")
    def report(key: str) -> str:
        hook(key, "report")
        return "reported"

    returns = "report"


@background
class TwoLocked(Reactor):
    """``first`` under the lock ``<key>:a``, then ``second`` under ``<key>:b``."""

    key: str

    @step
    @with_lock(lambda args: f"{args['key']}:a", ttl=10)
    def first(key: str) -> str:
        hook(key, "first")
        return "a"

    @step(wait_for=["first"])
    @with_lock(lambda args: f"{args['key']}:b", ttl=10)
    def second(key: str) -> str:
        hook(key, "second")
        return "b"

    returns = "second"
