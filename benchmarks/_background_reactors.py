"""What background.py sends to its Celery workers: py_reactor reactors and raw Celery tasks.

The worker processes import this module (``py-reactor worker --import
benchmarks._background_reactors``), so the reactors are found by ``module:qualname`` and the raw
tasks are registered on the same Celery app (``py_reactor.workers.celery.app``), served from the
same queue by the same pool processes.

Steps and tasks report through Redis (the store's own client): ``bench:done:<key>`` gets one
item when an execution's or chain's last piece of work ran, ``bench:stamp:<key>`` gets
``time.time()`` when the first one started (when asked to), and the contended reactors push
``n start end`` to ``bench:prep:<key>`` and ``bench:critical:<key>`` for each step body.
"""

from __future__ import annotations

import math
import time
from typing import Any

from py_reactor import Reactor, Result, background, configure, step, with_lock
from py_reactor.storage import current_store
from py_reactor.workers.celery import app

# Many executions contend for one key in section 4: let them park as often as they need to.
configure(park_max_attempts=math.inf)

QUEUE = "py_reactor.benchmarks"  # the queue of namespace "benchmarks", which the workers serve


def client() -> Any:
    return current_store().client  # type: ignore[attr-defined]


def stamp(key: str) -> None:
    client().rpush(f"bench:stamp:{key}", repr(time.time()))


def done(key: str, value: object) -> None:
    client().rpush(f"bench:done:{key}", str(value))


# -- 1 and 2: three trivial steps, as a reactor and as a raw Celery chain -----------------------


def work_first(key: str, n: int, stamped: bool) -> int:
    if stamped:
        stamp(key)
    return n + 1


def work_second(x: int) -> int:
    return x * 2


def work_third(key: str, x: int) -> int:
    value = x + 100
    done(key, value)
    return value


@background
class Three(Reactor):
    key: str
    n: int
    stamped: bool = False

    @step
    def first(key: str, n: int, stamped: bool) -> int:
        return work_first(key, n, stamped)

    @step(x=Result("first"))
    def second(x: int) -> int:
        return work_second(x)

    @step(x=Result("second"))
    def third(key: str, x: int) -> int:
        return work_third(key, x)

    returns = "third"


@app.task(name="bench.t1")
def t1(payload: dict[str, Any]) -> dict[str, Any]:
    key = payload["key"]
    return {"key": key, "x": work_first(key, payload["n"], payload["stamped"])}


@app.task(name="bench.t2")
def t2(payload: dict[str, Any]) -> dict[str, Any]:
    return {"key": payload["key"], "x": work_second(payload["x"])}


@app.task(name="bench.t3")
def t3(payload: dict[str, Any]) -> int:
    return work_third(payload["key"], payload["x"])


# -- 3: a step that needs a lock the benchmark holds ---------------------------------------------


@background
class Guarded(Reactor):
    key: str
    lock: str

    @step
    @with_lock(lambda args: args["lock"], ttl=30)
    def guarded(key: str, lock: str) -> str:
        stamp(key)
        return "resumed"

    returns = "guarded"


# -- 4: the same shape with the lock on one step, or on the whole reactor ------------------------


def work_prep(key: str, n: int, seconds: float) -> str:
    began = time.time()
    time.sleep(seconds)
    client().rpush(f"bench:prep:{key}", f"{n} {began!r} {time.time()!r}")
    return "prepared"


def work_critical(key: str, n: int, lock: str, seconds: float) -> str:
    """Sleep ``seconds`` counting who is inside; record ``n start end`` in
    ``bench:critical:<key>``."""
    redis = client()
    began = time.time()
    if redis.incr(f"bench:inside:{lock}") != 1:
        redis.incr(f"bench:overlaps:{lock}")
    time.sleep(seconds)
    redis.decr(f"bench:inside:{lock}")
    redis.rpush(f"bench:critical:{key}", f"{n} {began!r} {time.time()!r}")
    done(key, "critical")
    return "done"


@background
class StepLocked(Reactor):
    """``prep`` unlocked, then ``critical`` under the lock on ``lock``."""

    key: str
    n: int
    lock: str
    prep_s: float
    critical_s: float

    @step
    def prep(key: str, n: int, prep_s: float) -> str:
        return work_prep(key, n, prep_s)

    @step(wait_for=["prep"])
    @with_lock(lambda args: args["lock"], ttl=30)
    def critical(key: str, n: int, lock: str, critical_s: float) -> str:
        return work_critical(key, n, lock, critical_s)

    returns = "critical"


@background
@with_lock(lambda args: args["lock"], ttl=30)
class ReactorLocked(Reactor):
    """The same two steps, the whole run under the lock on ``lock``."""

    key: str
    n: int
    lock: str
    prep_s: float
    critical_s: float

    @step
    def prep(key: str, n: int, prep_s: float) -> str:
        return work_prep(key, n, prep_s)

    @step(wait_for=["prep"])
    def critical(key: str, n: int, lock: str, critical_s: float) -> str:
        return work_critical(key, n, lock, critical_s)

    returns = "critical"
