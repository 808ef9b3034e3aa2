"""Reactors with async units (``async_step``, ``async_reactor``) that the Celery async tests send
to real worker processes (``py-reactor worker --import tests.transport._celery_async_reactors``).

They report as ``_celery_reactors`` does, through ``_worker_side`` (and apply the worker
settings their test passes through the environment): each step appends ``"<what>:<pid>"`` to
the list ``celery-test:<key>``, and a body that must wait for the test blocks on
``celery-test:<key>:go`` (and leaves the word there: a re-run of the body passes too). A body
that holds the lock ``celery-async:<account>`` records who owns it, and enters the overlap
recorder ``celery-async:<account>`` (``tests._overlap``) while it works.
"""

from __future__ import annotations

import time
from typing import Any

from py_reactor import (
    Lock,
    Reactor,
    Result,
    Step,
    async_reactor,
    async_step,
    background,
    step,
    with_lock,
)
from py_reactor.config import get_config
from tests._overlap import OverlapRecorder
from tests.transport._worker_side import apply_settings, hold_until_told, record

apply_settings()  # the settings the test gave this worker process


def lock_key(account: str) -> str:
    return f"celery-async:{account}"


def owner_of(account: str) -> str | None:
    """Who holds ``account``'s lock now (read from the store, as any process could)."""
    return Lock(lock_key(account)).state().owner


def overlap(account: str) -> OverlapRecorder:
    return OverlapRecorder(str(get_config().redis_url), lock_key(account))


# ----------------------------------------------------------------------------- a reader


@background
class Relay(Reactor):
    """``first``, then the inline async step ``unit`` (waits for the test), ``sibling`` (needs
    nothing of the unit) and ``after``, which reads the unit's result."""

    key: str
    n: int

    @step
    def first(key: str, n: int) -> int:
        record(key, "first")
        return n + 1

    @async_step(n=Result("first"))
    def unit(key: str, n: int) -> int:
        record(key, "unit")
        hold_until_told(key, keep=True)
        return n * 10

    @step(wait_for=["first"])
    def sibling(key: str) -> str:
        record(key, "sibling")
        return "went on"

    @step(x=Result("unit"))
    def after(key: str, x: int) -> int:
        record(key, "after")
        return x + 1

    returns = "after"


# ----------------------------------------------------------------------------- owners


@with_lock(lambda args: lock_key(args["account"]), ttl=10)
class LockedWork(Step):
    """Under the lock on ``account``: records its owner, waits for the test, holds ``hold``
    seconds more, all inside the overlap recorder."""

    key: str
    account: str
    hold: float

    def run(self) -> str:
        key, account = self.inputs.key, self.inputs.account
        with overlap(account).inside(key):
            record(key, f"work owner={owner_of(account)}")
            hold_until_told(key, keep=True)
            time.sleep(self.inputs.hold)  # widens the window an overlap would show in
        return f"worked {key}"

    def compensate(self, error: Any) -> None:
        record(self.inputs.key, "compensate work")


@background
class LockedUnit(Reactor):
    """Dispatches ``work`` (locked in its own execution) and reads it."""

    key: str
    account: str
    hold: float

    work = async_step(LockedWork)

    @step(x=Result("work"))
    def after(key: str, x: str) -> str:
        record(key, "after")
        return x

    returns = "after"


# ----------------------------------------------------------------------------- the guard


@background
@with_lock(lambda args: lock_key(args["account"]), ttl=10)
class SelfLocked(Reactor):
    """Holds the lock on ``account`` for the whole run, then dispatches ``work``, which
    declares the same lock: the dispatch must be refused."""

    key: str
    account: str
    hold: float

    @step
    def reserve(key: str) -> str:
        record(key, "reserve")
        return "reserved"

    @reserve.undo
    def unreserve(result: str, key: str) -> None:
        record(key, "undo reserve")

    work = async_step(LockedWork, wait_for=["reserve"])

    returns = "work"


# ----------------------------------------------------------------------------- unread


class Doomed(Step):
    """Fails as soon as it runs; its compensate records in which process it ran."""

    key: str

    def run(self) -> str:
        record(self.inputs.key, "doomed")
        raise RuntimeError("the unit fails")

    def compensate(self, error: Any) -> None:
        record(self.inputs.key, "compensate doomed")


@background
class Unread(Reactor):
    """``first``, the async step ``doomed`` nobody reads, and ``last`` (waits for the test)."""

    key: str

    @step
    def first(key: str) -> str:
        record(key, "first")
        return "one"

    @first.undo
    def unfirst(result: str, key: str) -> None:
        record(key, "undo first")

    doomed = async_step(Doomed, wait_for=["first"])

    @step(wait_for=["first"])
    def last(key: str) -> str:
        record(key, "last")
        hold_until_told(key, keep=True)
        return "done"

    returns = "last"


# ----------------------------------------------------------------------------- async_reactor


@with_lock(lambda args: lock_key(args["account"]), ttl=10)
class LockedChild(Reactor):
    """A child with a reactor-level lock on ``account``: ``book`` records who owns it."""

    key: str
    account: str

    @step
    def book(key: str, account: str) -> int:
        record(key, f"book owner={owner_of(account)}")
        return 42

    returns = "book"


@background
class Composer(Reactor):
    """Dispatches ``LockedChild`` as an async reactor and reads its value."""

    key: str
    account: str

    child = async_reactor(LockedChild)

    @step(x=Result("child"))
    def after(key: str, x: int) -> int:
        record(key, "after")
        return x + 1

    returns = "after"


@background
class Ping(Reactor):
    """The workers' warm-up: one job through the module's queue before the first test."""

    @step
    def pong() -> str:
        return "pong"
