"""Module-level reactors the dashboard tests run (a worker finds reactors by module:qualname)."""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel

from py_reactor import (
    Reactor,
    Result,
    background,
    interrupt,
    parallel,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)

#: keys whose ``reserve`` step has been undone, in order (written by the undo hook).
UNDONE: list[str] = []


@background
class Charge(Reactor):
    """``reserve`` (undoable), then ``charge`` under the lock on ``key`` and a slot of
    ``pool:<key>``."""

    key: str
    amount: int = 1

    @step
    def reserve(key: str, amount: int) -> str:
        return f"reserved {amount}"

    @reserve.undo
    def unreserve(result: str, key: str, amount: int) -> None:
        UNDONE.append(key)

    @step(reserved=Result("reserve"))
    @with_lock(lambda args: args["key"], ttl=30)
    @with_semaphore(lambda args: f"pool:{args['key']}", limit=2, lease=30)
    def charge(key: str, amount: int, reserved: str) -> int:
        return amount * 100

    returns = "charge"


class RefundFailed(Exception):
    """The compensation of ``Broken.pay`` fails too: a rollback failure."""


@background
@with_lock(lambda args: f"account:{args['key']}", ttl=30)
class Broken(Reactor):
    """``pay`` fails after ``book``; undoing ``book`` fails as well (a rollback failure)."""

    key: str

    @step
    def book(key: str) -> str:
        return "booked"

    @book.undo
    def unbook(result: str, key: str) -> None:
        raise RefundFailed(f"cannot unbook {key}")

    @step(booked=Result("book"))
    def pay(key: str, booked: str) -> Any:
        raise RuntimeError(f"card declined for {key}")

    returns = "pay"


#: test key -> an event the ``Gated.work`` step waits for (set it to let the step finish).
GATES: dict[str, threading.Event] = {}
#: test key -> set once ``Gated.work`` has started (it holds all its coordination then).
STARTED: dict[str, threading.Event] = {}


@background
@with_lock(lambda args: f"outer:{args['key']}", ttl=30)
class Gated(Reactor):
    """A reactor-level lock, and a step under all five primitives that runs until its gate
    opens: while it runs, the execution holds every kind of key."""

    key: str

    @step
    @with_ordered_lock(lambda args: f"line:{args['key']}")
    @with_period(lambda args: f"daily:{args['key']}", every="day")
    @with_lock(lambda args: args["key"], ttl=30)
    @with_semaphore(lambda args: f"pool:{args['key']}", limit=3, lease=30)
    @with_rate_limit(lambda args: f"api:{args['key']}", limit=5, period="minute")
    def work(key: str) -> str:
        STARTED[key].set()
        if not GATES[key].wait(20):
            raise TimeoutError(f"the test never opened the gate of {key}")
        return "worked"

    returns = "work"


class Approval(BaseModel):
    """The payload the dashboard's resume form sends."""

    approved: bool


class Review(Reactor):
    """Pauses at ``review`` until resumed with an :class:`Approval`."""

    key: str

    review = interrupt(payload=Approval, correlation_id=lambda i: i["key"])

    @step(approval=Result("review"))
    def record(key: str, approval: dict[str, Any]) -> str:
        return f"approved={approval['approved']}"

    returns = "record"


@background
@parallel
class Branches(Reactor):
    """Two branches at once, each under a lock of its own, running until their gate opens:
    their holds are under the branch owners (``"<root id>/<step>"``)."""

    key: str

    @step
    @with_lock(lambda args: f"left:{args['key']}", ttl=30)
    def left(key: str) -> str:
        return _gated(f"{key}-left")

    @step
    @with_lock(lambda args: f"right:{args['key']}", ttl=30)
    def right(key: str) -> str:
        return _gated(f"{key}-right")


@with_lock(lambda args: f"outer:{args['key']}", ttl=30)
class InCaller(Reactor):
    """Runs in the caller (no ``@background``, so it is never stored): a reactor-level lock, and
    a step under a lock and a semaphore slot (waiting to be handed them if they are busy) that
    runs until its gate opens."""

    key: str

    @step
    @with_lock(lambda args: args["key"], ttl=30, wait=10)
    @with_semaphore(lambda args: f"pool:{args['key']}", limit=2, lease=30, wait=10)
    def hold(key: str) -> str:
        return _gated(key)

    returns = "hold"


def _gated(name: str) -> str:
    STARTED[name].set()
    if not GATES[name].wait(20):
        raise TimeoutError(f"the test never opened the gate of {name}")
    return "done"


@background
class Lined(Reactor):
    """A step under an ordered lock only, running until its gate opens: a second run waits
    for its turn, parked on the ordered lock (a park the cap never counts)."""

    key: str

    @step
    @with_ordered_lock(lambda args: f"turns:{args['key']}")
    def work(key: str) -> str:
        return _gated(key)

    returns = "work"


@background
class Refunds(Reactor):
    """``hold`` (under a lock and a semaphore slot, undoable), then ``pay`` (under a lock)
    fails: rollback compensates ``pay`` and undoes ``hold``, each under the step's keys."""

    key: str

    @step
    @with_lock(lambda args: f"hold:{args['key']}", ttl=30)
    @with_semaphore(lambda args: f"slots:{args['key']}", limit=2, lease=30)
    def hold(key: str) -> str:
        return "held"

    @hold.undo
    def unhold(result: str, key: str) -> None:
        return None

    @step(held=Result("hold"))
    @with_lock(lambda args: f"pay:{args['key']}", ttl=30)
    def pay(key: str, held: str) -> Any:
        raise RuntimeError(f"card declined for {key}")

    @pay.compensate
    def void(error: Any, key: str, held: str) -> None:
        return None

    returns = "pay"


class Note(Reactor):
    """Pauses at ``note`` for any JSON object (an interrupt without a payload model)."""

    key: str

    note = interrupt(correlation_id=lambda i: f"note:{i['key']}")

    returns = "note"
