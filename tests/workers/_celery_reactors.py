"""Reactors the Celery tests send to real worker processes.

They run in other processes, so they report through Redis: each step appends
``"<name>:<pid>"`` to the list ``celery-test:<key>``, and a step that must wait for the test
blocks on ``celery-test:<key>:go`` (the test pushes to it).
"""

from __future__ import annotations

import os
import time

from py_reactor import Reactor, Result, background, configure, retries, step, with_lock
from py_reactor.storage import current_store

if os.environ.get("PY_REACTOR_TEST_LEASE"):  # the worker processes' liveness lease
    configure(execution_lease=float(os.environ["PY_REACTOR_TEST_LEASE"]))


def client():  # type: ignore[no-untyped-def]
    return current_store().client  # type: ignore[attr-defined]


def record(key: str, what: str) -> None:
    client().rpush(f"celery-test:{key}", f"{what}:{os.getpid()}")


def hold_until_told(key: str, timeout: float = 30) -> None:
    """Block until the test pushes to ``celery-test:<key>:go``."""
    client().blpop([f"celery-test:{key}:go"], timeout=timeout)


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
    """``first``, then ``slow`` (which waits for the test), then ``last``."""

    key: str

    @step
    def first(key: str) -> str:
        record(key, "first")
        return "one"

    @step(wait_for=["first"])
    def slow(key: str) -> str:
        record(key, "slow")
        hold_until_told(key)
        return "two"

    @step(wait_for=["slow"])
    def last(key: str) -> str:
        record(key, "last")
        return "three"

    returns = "last"
