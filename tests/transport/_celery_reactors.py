"""Reactors the Celery tests send to real worker processes.

They run in other processes, so they report through Redis: each step appends
``"<name>:<pid>"`` to the list ``celery-test:<key>``, and a step that must wait for the test
blocks on ``celery-test:<key>:go`` (the test pushes to it).
"""

from __future__ import annotations

import os
import time

from py_reactor import (
    Reactor,
    Result,
    background,
    configure,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
)
from py_reactor.storage import current_store

# The worker processes' settings, from the environment their test gives them.
for _option, _variable in (
    ("execution_lease", "PY_REACTOR_TEST_LEASE"),
    ("park_max_attempts", "PY_REACTOR_TEST_PARK_CAP"),
    ("park_delay", "PY_REACTOR_TEST_PARK_DELAY"),
    ("park_jitter", "PY_REACTOR_TEST_PARK_JITTER"),
    ("unimportable_grace", "PY_REACTOR_TEST_UNIMPORTABLE_GRACE"),
):
    if os.environ.get(_variable):
        configure(**{_option: float(os.environ[_variable])})


def client():  # type: ignore[no-untyped-def]
    return current_store().client  # type: ignore[attr-defined]


def record(key: str, what: str) -> None:
    client().rpush(f"celery-test:{key}", f"{what}:{os.getpid()}")


def hold_until_told(key: str, timeout: float = 30) -> None:
    """Block until the test pushes to ``celery-test:<key>:go`` (in short BLPOPs: the store's
    client gives up reading after its 5 s socket timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client().blpop([f"celery-test:{key}:go"], timeout=1):
            return


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
    on ``<account>`` for ``charge``."""

    key: str
    account: str

    @step
    def reserve(key: str) -> str:
        record(key, "reserve")
        return "reserved"

    @step(wait_for=["reserve"])
    @with_lock(lambda args: f"celery-test:{args['account']}", ttl=10)
    def charge(key: str, account: str) -> str:
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
