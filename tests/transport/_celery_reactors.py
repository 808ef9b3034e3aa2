"""Reactors the Celery tests send to real worker processes.

They run in other processes, so they report through Redis (``_worker_side``): each step
appends ``"<name>:<pid>"`` to the list ``celery-test:<key>``, and a step that must wait for the
test blocks on ``celery-test:<key>:go`` (the test pushes to it). ``client``, ``record`` and
``hold_until_told`` stay importable from here (other reactors modules import them, and
importing this module applies the worker settings too).
"""

from __future__ import annotations

import asyncio
import time

from py_reactor import (
    Lock,
    Reactor,
    Result,
    background,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
)
from tests.transport._worker_side import apply_settings, client, hold_until_told, record

apply_settings()  # the settings the test gave this worker process


@background
class Three(Reactor):
    key: str
    n: int

    @step
    def first(key: str, n: int) -> int:
        record(key, "first")
        return n + 1

    @step(x=Result("first"))
    def second(key: str, x: int) -> int:
        record(key, "second")
        return x * 2

    @step(x=Result("second"))
    def third(key: str, x: int) -> int:
        record(key, "third")
        return x + 100

    returns = "third"


@background
class AsyncLocked(Reactor):
    """Async steps on a Celery worker (each on a loop of its own): ``charge`` under a step lock
    on ``account``, and an async lock inside it that re-enters the step's."""

    key: str
    account: str

    @step
    async def first(key: str) -> str:
        await asyncio.sleep(0)
        record(key, "first")
        return "ok"

    @step(wait_for=["first"])
    @with_lock(lambda args: f"celery-test:{args['account']}", ttl=10)
    async def charge(key: str, account: str) -> int:
        async with Lock(f"celery-test:{account}", wait=0) as hold:  # its own step's key
            await asyncio.sleep(0.01)
            record(key, "charge")
            return hold.count

    returns = "charge"


@background(after="first")
class ThreeAfter(Three):
    pass


@background(before="third")
class ThreeBefore(Three):
    pass


@background
class LockedCharge(Reactor):
    """``reserve``, then ``charge`` under a step-level lock on ``account``: the overlap
    counter ``celery-test:<account>:inside`` must never exceed 1."""

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

    @step(wait_for=["reserve"])
    @with_lock(lambda args: f"celery-test:{args['account']}", ttl=10)
    def charge(key: str, account: str, hold: float) -> str:
        redis = client()
        if redis.incr(f"celery-test:{account}:inside") != 1:
            redis.incr(f"celery-test:{account}:overlaps")
        time.sleep(hold)
        redis.decr(f"celery-test:{account}:inside")
        record(key, "charge")
        return "charged"

    @charge.compensate
    def refund(error: Exception, key: str, account: str, hold: float) -> None:
        record(key, "compensate charge")

    returns = "charge"


@background
class Flaky(Reactor):
    """``call`` fails its first two attempts; retries wait 0.2 s (parked, not slept)."""

    key: str

    @step
    @retries(max_attempts=3, backoff="fixed", base_delay=0.2)
    def call(key: str) -> int:
        attempt = int(client().incr(f"celery-test:{key}:attempts"))
        record(key, f"call {attempt}")
        if attempt < 3:
            raise RuntimeError(f"attempt {attempt} fails")
        return attempt

    returns = "call"


@background
class Slow(Reactor):
    """``first``, then ``slow`` (under a lock, waiting for the test), then ``last``."""

    key: str

    @step
    def first(key: str) -> str:
        record(key, "first")
        return "one"

    @step(wait_for=["first"])
    @with_lock(lambda args: f"celery-test:slow:{args['key']}", ttl=30)
    def slow(key: str) -> str:
        record(key, "slow")
        hold_until_told(key)
        return "two"

    @step(wait_for=["slow"])
    def last(key: str) -> str:
        record(key, "last")
        return "three"

    returns = "last"


@background
@with_lock(lambda args: f"celery-test:outer:{args['account']}", ttl=10)
class LockedBoth(Reactor):
    """A reactor-level lock on ``outer:<account>`` around ``reserve`` and a step-level lock
    on ``<account>`` for ``charge``, which appends the state of the outer lock (``owner|count|
    fencing token``, as it sees it from inside) to ``celery-test:<key>:outer``."""

    key: str
    account: str

    @step
    def reserve(key: str) -> str:
        record(key, "reserve")
        return "reserved"

    @step(wait_for=["reserve"])
    @with_lock(lambda args: f"celery-test:{args['account']}", ttl=10)
    def charge(key: str, account: str) -> str:
        outer = Lock(f"celery-test:outer:{account}").state()
        client().rpush(
            f"celery-test:{key}:outer", f"{outer.owner}|{outer.count}|{outer.fencing_token}"
        )
        record(key, "charge")
        return "charged"

    returns = "charge"


@background
@with_ordered_lock(lambda args: f"celery-test:sequence:{args['account']}")
class InOrder(Reactor):
    """Runs of one account pass in the order ``run()`` dispatched them."""

    key: str
    account: str
    position: int

    @step
    def book(key: str, account: str, position: int) -> int:
        client().rpush(f"celery-test:{account}:order", position)
        time.sleep(0.02)
        return position

    returns = "book"


@background
class MeteredThenLocked(Reactor):
    """``call`` is rate limited (10 a minute), ``digest`` runs once a day; ``charge`` then
    needs a lock the test holds."""

    key: str
    account: str

    @step
    @with_rate_limit(lambda args: f"celery-test:api:{args['key']}", limit=10, period="minute")
    def call(key: str) -> str:
        record(key, "call")
        return "called"

    @step(wait_for=["call"])
    @with_period(lambda args: f"celery-test:digest:{args['key']}", every="day")
    def digest(key: str) -> str:
        record(key, "digest")
        return "digested"

    @step(wait_for=["digest"])
    @with_lock(lambda args: f"celery-test:{args['account']}", ttl=10)
    def charge(key: str, account: str) -> str:
        record(key, "charge")
        return "charged"

    returns = "charge"


@background
@with_rate_limit(lambda args: f"celery-test:api:{args['key']}", limit=10, period="hour")
class MeteredReactorThenLocked(Reactor):
    """A reactor-level rate limit (10 an hour), charged when the run starts, around ``call``
    and then ``charge``, which needs a lock the test holds: the run parks inside the reactor's
    scope, and the resumed run builds that scope again (it must adopt the charge from the
    ledger, not pay again). The limit admits a second charge, so paying twice shows as a
    count of 2, not as a refusal."""

    key: str
    account: str

    @step
    def call(key: str) -> str:
        record(key, "call")
        return "called"

    @step(wait_for=["call"])
    @with_lock(lambda args: f"celery-test:{args['account']}", ttl=10)
    def charge(key: str, account: str) -> str:
        record(key, "charge")
        return "charged"

    returns = "charge"


@background
class Ping(Reactor):
    """The workers' warm-up: one job through the module's queue before the first test."""

    @step
    def pong() -> str:
        return "pong"
