"""Module-level reactors for the plugin's tests (a worker imports reactors by module:qualname).

Each is small and does one thing an assertion helper is about. Per-test behaviour comes from
``GATES`` (a step blocks until the test opens its gate) and ``CALLS`` (attempt counters), both
keyed by the test's unique key.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Annotated, Any

from pydantic import Field

from py_reactor import (
    Failure,
    Halt,
    Reactor,
    Result,
    Skipped,
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

#: test key -> attempts made so far by a flaky step.
CALLS: Counter[str] = Counter()
#: test key -> an event a step waits on (set by the test); absent: no wait.
GATES: dict[str, threading.Event] = {}
#: test key -> set when a gated step has started.
ENTERED: dict[str, threading.Event] = {}


def gate(key: str) -> None:
    """Block until the test opens the gate of ``key`` (if it made one)."""
    entered = ENTERED.get(key)
    if entered is not None:
        entered.set()
    event = GATES.get(key)
    if event is not None and not event.wait(30):
        raise TimeoutError(f"the test never opened the gate of {key}")


class Pricing(Reactor):
    """``double`` then ``describe``, which reads it."""

    n: int

    @step
    def double(n: int) -> int:
        return n * 2

    @step(x=Result("double"))
    def describe(x: int) -> str:
        return f"got {x}"

    returns = "describe"


class Declined(Reactor):
    """``reserve`` succeeds, ``charge`` fails with a ValueError; ``reserve`` is undone."""

    n: int

    @step
    def reserve(n: int) -> str:
        return "reserved"

    @step(wait_for=["reserve"])
    def charge(n: int) -> str:
        raise ValueError(f"card declined for {n}")

    returns = "charge"


class Flaky(Reactor):
    """``call`` fails ``fails`` times, then succeeds (three attempts at most, no delay)."""

    key: str
    fails: int

    @step
    @retries(max_attempts=3, base_delay=0)
    def call(key: str, fails: int) -> str:
        CALLS[key] += 1
        if CALLS[key] <= fails:
            return Failure(f"attempt {CALLS[key]} failed")
        return "answered"

    returns = "call"


class Signup(Reactor):
    """Reactor inputs with constraints; ``mail`` has a constraint of its own."""

    email: str
    age: Annotated[int, Field(ge=18)]

    @step(address=Result("normalize"))
    def mail(address: Annotated[str, Field(min_length=5)]) -> str:
        return f"mailed {address}"

    @step
    def normalize(email: str) -> str:
        return email.strip().lower()

    returns = "mail"


class Nothing(Reactor):
    """``check`` halts the run when there is nothing to do; ``work`` never runs then."""

    count: int

    @step
    def check(count: int) -> Any:
        return Halt("nothing to do") if count == 0 else count

    @step(n=Result("check"))
    def work(n: int) -> int:
        return n

    returns = "work"


class Cached(Reactor):
    """``lookup`` is skipped with reason "cached" and its value still flows on."""

    @step
    def lookup() -> Any:
        return Skipped("from cache", reason="cached")

    @step(found=Result("lookup"))
    def show(found: str) -> str:
        return f"showing {found}"

    returns = "show"


class Charge(Reactor):
    """``charge`` takes the lock on ``key`` (waiting ``wait`` s), then runs."""

    key: str

    @step
    @with_lock(lambda args: args["key"], ttl=10, wait=0)
    def charge(key: str) -> str:
        return "charged"

    returns = "charge"


@with_lock(lambda inputs: f"account:{inputs['key']}", ttl=10, wait=0)
class AccountWide(Reactor):
    """The reactor's own lock on ``account:<key>``."""

    key: str

    @step
    def work(key: str) -> str:
        return "worked"

    returns = "work"


class BrokenRollback(Reactor):
    """``charge`` (under the lock on ``key``) fails; its compensate raises, and the undo of
    ``reserve`` returns a failure: two rollback failures."""

    key: str

    @step
    def reserve(key: str) -> str:
        return "reserved"

    @reserve.undo
    def _unreserve(result: str, key: str) -> Any:
        return Failure("the reservation service is down")

    @step(wait_for=["reserve"])
    @with_lock(lambda args: args["key"], ttl=10)
    def charge(key: str) -> str:
        raise RuntimeError("gateway timeout")

    @charge.compensate
    def _refund(error: Any, key: str) -> None:
        raise ConnectionError("refund API unreachable")

    returns = "charge"


class Payment(Reactor):
    """A composed child: ``authorize``, then ``capture``, which fails when ``amount`` > 100."""

    amount: int

    @step
    def authorize(amount: int) -> str:
        return f"authorized {amount}"

    @step(wait_for=["authorize"])
    def capture(amount: int) -> str:
        if amount > 100:
            raise ValueError("over the limit")
        return f"captured {amount}"

    returns = "capture"


class Order(Reactor):
    """``payment`` composes ``Payment``; ``ship`` runs after it."""

    amount: int

    payment = compose(Payment)

    @step(receipt=Result("payment"))
    def ship(receipt: str) -> str:
        return f"shipped after {receipt}"

    returns = "ship"


class Report(Reactor):
    """``send`` runs once per day bucket of ``key``, and counts against a rate limit."""

    key: str

    @step
    @with_period(lambda args: f"report:{args['key']}", every="day")
    def send(key: str) -> str:
        return "sent"

    @step(wait_for=["send"])
    @with_rate_limit(lambda args: f"api:{args['key']}", limit=10, period="hour")
    def call(key: str) -> str:
        return "called"

    returns = "call"


class Mailer(Reactor):
    """``mail`` holds a slot of the semaphore on ``key`` (limit 2) until its gate opens."""

    key: str

    @step
    @with_semaphore(lambda args: args["key"], limit=2, wait=0)
    def mail(key: str) -> str:
        gate(key)
        return "mailed"

    returns = "mail"


class Ledger(Reactor):
    """``post`` passes the ordered lock on ``key`` in arrival order."""

    key: str

    @step
    @with_ordered_lock(lambda args: args["key"])
    def post(key: str) -> str:
        return "posted"

    returns = "post"


@background
class Shipment(Reactor):
    """In a worker: ``prepare``, then ``dispatch`` under the lock on ``key``."""

    key: str

    @step
    def prepare(key: str) -> str:
        return "prepared"

    @step(wait_for=["prepare"])
    @with_lock(lambda args: args["key"], ttl=10)
    def dispatch(key: str) -> str:
        return "dispatched"

    returns = "dispatch"


@background
class SlowShipment(Reactor):
    """In a worker: ``work`` blocks until the test opens the gate of ``key``."""

    key: str

    @step
    def work(key: str) -> str:
        gate(key)
        return "done"

    returns = "work"


@background
class Retrying(Reactor):
    """In a worker: ``call`` fails once, then succeeds after a 0.2 s backoff."""

    key: str

    @step
    @retries(max_attempts=2, backoff="fixed", base_delay=0.2)
    def call(key: str) -> str:
        CALLS[key] += 1
        if CALLS[key] == 1:
            return Failure("first attempt fails")
        return "answered"

    returns = "call"


@with_period(lambda inputs: f"nightly:{inputs['key']}", every="day")
class Nightly(Reactor):
    """Runs once per day bucket of ``key``; a second run that day halts (reason "period")."""

    key: str

    @step
    def build(key: str) -> str:
        return "built"

    returns = "build"


@background
class Rejected(Declined):
    """``Declined`` in a worker: its failure is read back from the store."""


@background
class SlowRetry(Reactor):
    """In a worker: ``call`` fails, then waits 30 s in the parked set before its retry."""

    key: str

    @step
    @retries(max_attempts=2, backoff="fixed", base_delay=30)
    def call(key: str) -> str:
        CALLS[key] += 1
        return Failure("always fails")

    returns = "call"


@background
class HoldingLock(Reactor):
    """In a worker: ``work`` holds the lock on ``key`` until the test opens its gate."""

    key: str

    @step
    @with_lock(lambda args: args["key"], ttl=10)
    def work(key: str) -> str:
        gate(key)
        return "worked"

    returns = "work"


class Catalog(Reactor):
    """Returns a value too large for one line: ``{"items": ["item 0", ...]}``."""

    n: int

    @step
    def build(n: int) -> dict[str, list[str]]:
        return {"items": [f"item {i}" for i in range(n)]}

    returns = "build"
