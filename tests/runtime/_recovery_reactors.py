"""Background reactors and child-process entry points for the worker recovery tests.

They live at module level in a module of their own so that a worker in any process can import
them by ``module:qualname``. Steps record what they do in Redis under keys that start with the
run's ``tag`` input (the test's unique key), so the test process sees what every process did.
A child process is started as ``python -c "from tests.runtime._recovery_reactors import
<entry>; <entry>(*sys.argv[1:])" <args>``.
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

import redis

import py_reactor.transport.threads
from py_reactor import (
    Halt,
    Reactor,
    Result,
    Step,
    Success,
    background,
    configure,
    get_config,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
)
from py_reactor.storage import current_store
from py_reactor.storage.executions import ExecutionStore

__all__ = [
    "SLOW_SECONDS",
    "BooksInTheCaller",
    "Boom",
    "Halts",
    "InterruptedTwice",
    "LockedReactor",
    "LockedStep",
    "Ok",
    "Usurped",
    "UsurpedInPeriod",
    "UsurpedInTurn",
    "client",
    "dispatch_and_linger",
    "dispatch_without_running",
]

#: How long ``InterruptedTwice.slow`` sleeps on its first try: far longer than any test waits.
SLOW_SECONDS = 30.0


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def client() -> redis.Redis:
    """A client of the server this process is configured for (one per URL and process)."""
    url = get_config().redis_url
    if url is None:  # pragma: no cover - every test and child configures one
        raise RuntimeError("configure(redis_url=...) before running the recovery reactors")
    return _client(url)


@background
class InterruptedTwice(Reactor):
    """``first`` counts its runs; ``slow`` counts its runs and sleeps on its first try only."""

    tag: str

    @step()
    def first(tag: str) -> Any:
        client().incr(f"{tag}:first")
        return Success(1)

    @step(wait_for=["first"])
    def slow(tag: str) -> Any:
        c = client()
        c.incr(f"{tag}:slow")
        if c.set(f"{tag}:slept", "1", nx=True):  # the first try: stay inside until killed
            c.set(f"{tag}:started", "1")
            time.sleep(SLOW_SECONDS)
        return Success("done")

    returns = "slow"


@background
class Ok(Reactor):
    """One step that counts its runs and returns the tag."""

    tag: str

    @step()
    def only(tag: str) -> Any:
        client().incr(f"{tag}:ok")
        return Success(f"ok {tag}")

    returns = "only"


@background
class Boom(Reactor):
    """One step that raises."""

    tag: str

    @step()
    def explode(tag: str) -> Any:
        raise ValueError(f"boom {tag}")


@background
class Halts(Reactor):
    """One step that halts the run."""

    tag: str

    @step()
    def stop_here(tag: str) -> Any:
        return Halt(f"halted {tag}")


@background
class LockedStep(Reactor):
    """A step locked on the ``lock`` input (a worker parks on contention)."""

    lock: str

    @step()
    @with_lock(lambda args: str(args["lock"]), ttl=30, wait=0)
    def guarded(lock: str) -> Any:
        return Success(lock)

    returns = "guarded"


@background
@with_lock(lambda inputs: str(inputs["lock"]), ttl=30, wait=0)
class LockedReactor(Reactor):
    """A reactor locked on the ``lock`` input (a worker parks on contention)."""

    lock: str

    @step()
    def inside(lock: str) -> Any:
        return Success(lock)

    returns = "inside"


class TakeOver(Step):
    """Counts its runs, then waits for its runner's lease to lapse and claims the execution
    as ``usurper``: the runner executing this step is stale by the time the step ends."""

    tag: str

    def run(self) -> Any:
        client().incr(f"{self.inputs.tag}:takeover")
        executions = ExecutionStore(current_store())
        execution_id = self.context.root_id
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            epoch = executions.claim(execution_id, "usurper", 30.0, due=False)
            if epoch > 0:
                client().set(f"{self.inputs.tag}:usurped", epoch)
                return Success("taken over")
            time.sleep(0.02)
        raise TimeoutError(f"the lease of execution {execution_id} never lapsed")


@background
class Usurped(Reactor):
    """``take_over`` makes its own runner stale; ``after`` must then never run."""

    tag: str

    take_over = step(TakeOver)

    @step(wait_for=["take_over"])
    def after(tag: str) -> Any:
        client().incr(f"{tag}:after")
        return Success("after")


@background
@with_ordered_lock(lambda v: f"{v['tag']}:seq")
class UsurpedInTurn(Reactor):
    """``Usurped`` inside its reactor-level ordered turn (strict): the turn is the
    execution's, which the usurper now carries; the stale runner must not pass it on."""

    tag: str

    take_over = step(TakeOver)

    @step(wait_for=["take_over"])
    def after(tag: str) -> Any:
        client().incr(f"{tag}:after")
        return Success("after")


@background
@with_period(lambda v: f"{v['tag']}:daily", every="day")
class UsurpedInPeriod(Reactor):
    """``Usurped`` inside its reactor-level period claim: the claim is the execution's, which
    the usurper now carries; the stale runner must not give it up."""

    tag: str

    take_over = step(TakeOver)

    @step(wait_for=["take_over"])
    def after(tag: str) -> Any:
        client().incr(f"{tag}:after")
        return Success("after")


@background(after="book")
class BooksInTheCaller(Reactor):
    """``reserve`` and ``book`` run in the caller, ``pay`` in a worker; each logs to
    ``<tag>:log``, and so do the undos."""

    tag: str

    @step
    def reserve(tag: str) -> str:
        client().rpush(f"{tag}:log", "reserve")
        return "reserved"

    @reserve.undo
    def _release(result: Any, tag: str) -> None:
        client().rpush(f"{tag}:log", "undo reserve")

    @step(r=Result("reserve"))
    def book(tag: str, r: str) -> str:
        client().rpush(f"{tag}:log", "book")
        return "booked"

    @book.undo
    def _unbook(result: Any, tag: str, **_: Any) -> None:
        client().rpush(f"{tag}:log", "undo book")

    @step(b=Result("book"))
    def pay(tag: str, b: str) -> str:
        client().rpush(f"{tag}:log", "pay")
        return "paid"

    returns = "pay"


# -- child-process entry points ----------------------------------------------------------------


def dispatch_and_linger(url: str, tag: str) -> None:
    """Dispatch ``InterruptedTwice`` with a 1 s lease, publish its id, and live on (the test
    kills this process while its worker thread is inside ``slow``)."""
    configure(redis_url=url, execution_lease=1.0)
    out = InterruptedTwice.run(tag=tag)
    client().set(f"{tag}:id", out.execution_id)
    time.sleep(60)
    sys.exit("dispatch_and_linger was not killed")


def dispatch_without_running(url: str, tag: str, count: str) -> None:
    """Dispatch ``count`` ``Ok`` executions and exit before any worker here could take one:
    this process's thread worker is never started. Their ids go to the list ``<tag>:ids``."""
    configure(redis_url=url)
    py_reactor.transport.threads.ensure_worker = lambda: None  # type: ignore[assignment]
    for i in range(int(count)):
        out = Ok.run(tag=f"{tag}-{i}")
        client().rpush(f"{tag}:ids", out.execution_id)
