"""Reactors the asyncio worker tests run, in this process or in a ``py-reactor worker --pool
asyncio`` process (which imports this module). Bodies count who is inside a locked step on the
test's private Redis, so overlaps are seen across processes too."""

from __future__ import annotations

import asyncio
import os

import redis.asyncio

from py_reactor import Input, Reactor, Result, background, step, with_lock

URL_ENV = "PY_REACTOR_TEST_ASYNCIO_URL"

_clients: dict[int, redis.asyncio.Redis] = {}


def _raw() -> redis.asyncio.Redis:
    """This loop's client of the test's Redis (the bodies' own recorder, not py_reactor's)."""
    loop = id(asyncio.get_running_loop())
    if loop not in _clients:
        _clients[loop] = redis.asyncio.Redis.from_url(os.environ[URL_ENV], decode_responses=True)
    return _clients[loop]


async def close_raw() -> None:
    client = _clients.pop(id(asyncio.get_running_loop()), None)
    if client is not None:
        await client.aclose()


@background
class Charge(Reactor):
    """Fetch (I/O), charge under a step lock on ``key`` (records overlap), notify (I/O)."""

    key: str
    tag: str

    @step(key=Input("key"))
    async def fetch(key: str) -> str:
        await asyncio.sleep(0.002)
        return key

    @step(key=Result("fetch"), tag=Input("tag"))
    @with_lock(lambda a: a["key"], ttl=30)
    async def charge(key: str, tag: str) -> int:
        raw = _raw()
        inside = await raw.incr(f"{tag}:inside:{key}")
        if inside > 1:
            await raw.incr(f"{tag}:overlaps")
        await asyncio.sleep(0.003)
        await raw.decr(f"{tag}:inside:{key}")
        return int(inside)

    @step(n=Result("charge"), tag=Input("tag"))
    async def notify(n: int, tag: str) -> int:
        await _raw().incr(f"{tag}:done")
        return n

    returns = "notify"


@background
class Mixed(Reactor):
    """A sync step and an async one, run by whichever worker serves."""

    n: int

    @step(n=Input("n"))
    def double(n: int) -> int:
        return n * 2

    @step(n=Result("double"))
    async def plus_one(n: int) -> int:
        await asyncio.sleep(0)
        return n + 1

    returns = "plus_one"


@background
class Sleepy(Reactor):
    """Holds a step lock on ``key`` for a minute on its first attempt (outlives any stop's
    patience); a run of it again ends at once."""

    key: str

    @step(key=Input("key"))
    @with_lock(lambda a: a["key"], ttl=60)
    async def hold(key: str) -> str:
        if await _raw().incr(f"{key}:entered") == 1:
            await asyncio.sleep(60)  # the first attempt outlives the stop; a re-run does not
        return "done"

    returns = "hold"


#: Counted's bodies, in this process: who is inside ``locked`` per key, the overlaps seen, and
#: how many times ``last`` ran (no store involved, so a store outage cannot skew them).
INSIDE: dict[str, int] = {}
OVERLAPS: list[int] = [0]
LAST_RAN: list[int] = [0]


@background
class Counted(Reactor):
    """Like Charge, but counting in this process: for runs across a store restart."""

    key: str

    @step(key=Input("key"))
    async def first(key: str) -> str:
        await asyncio.sleep(0.005)
        return key

    @step(key=Result("first"))
    @with_lock(lambda a: a["key"], ttl=10)
    async def locked(key: str) -> str:
        INSIDE[key] = INSIDE.get(key, 0) + 1
        if INSIDE[key] > 1:
            OVERLAPS[0] += 1
        await asyncio.sleep(0.01)
        INSIDE[key] -= 1
        return key

    @step(key=Result("locked"))
    async def last(key: str) -> str:
        LAST_RAN[0] += 1
        return key

    returns = "last"
