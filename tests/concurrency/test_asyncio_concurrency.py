"""Step-scoped coordination on one event loop, against threads and other processes.

Many ``arun`` calls share one loop: a step lock serializes that step alone (the other steps of
the same runs overlap), a run waiting for a key held by a thread or another process awaits the
release without blocking the loop, and cancelling the task of a run that holds a key gives the
key back at once, to a waiter in another process too.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import pytest

from py_reactor import Input, Lock, Reactor, Result, configure, step, with_lock
from tests._aio import run
from tests._overlap import OverlapRecorder
from tests.concurrency import _asyncio_holder as holder
from tests.concurrency._spawn import SPAWN

#: Who is inside each step right now, and the most seen at once (one loop: plain counters).
INSIDE: dict[str, int] = {}
MOST: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str) -> None:
    configure(redis_url=redis_url)
    INSIDE.clear()
    MOST.clear()


def enter(step_name: str) -> None:
    INSIDE[step_name] = INSIDE.get(step_name, 0) + 1
    MOST[step_name] = max(MOST.get(step_name, 0), INSIDE[step_name])


def leave(step_name: str) -> None:
    INSIDE[step_name] -= 1


BARRIER: list[asyncio.Barrier] = []


class Transfer(Reactor):
    account: str

    @step(account=Input("account"))
    async def prepare(account: str) -> str:
        enter("prepare")
        await BARRIER[0].wait()  # every run is inside at once: this step overlaps for sure
        leave("prepare")
        return account

    @step(account=Result("prepare"))
    @with_lock(lambda a: f"acct:{a['account']}", ttl=30, wait=30)
    async def debit(account: str) -> str:
        enter("debit")
        await asyncio.sleep(0.05)
        leave("debit")
        return account

    @step(account=Result("debit"))
    async def notify(account: str) -> str:
        enter("notify")
        await asyncio.sleep(0.3)  # longer than the debits after it: the notifies overlap
        leave("notify")
        return account

    returns = "notify"


def test_five_aruns_on_one_step_key_never_overlap_in_that_step_while_other_steps_do(
    key: str,
) -> None:
    async def main() -> list[Any]:
        BARRIER[:] = [asyncio.Barrier(5)]
        return list(await asyncio.gather(*(Transfer.arun(account=key) for _ in range(5))))

    outcomes = run(main)
    assert all(outcome.is_success for outcome in outcomes)
    assert MOST["prepare"] == 5  # the unlocked steps of the five runs overlap...
    assert MOST["notify"] > 1
    assert MOST["debit"] == 1  # ...the locked one never does


class Guarded(Reactor):
    key: str
    label: str

    @step(key=Input("key"), label=Input("label"))
    @with_lock(lambda a: a["key"], ttl=30, wait=30)
    async def critical(key: str, label: str) -> str:
        recorder = OverlapRecorder(RECORDER_URL[0], key)
        await asyncio.to_thread(recorder.enter, label)
        await asyncio.sleep(0.05)
        await asyncio.to_thread(recorder.leave, label)
        return label

    returns = "critical"


RECORDER_URL: list[str] = []


async def ticking(until: asyncio.Event) -> list[float]:
    ticks = []
    while not until.is_set():
        ticks.append(time.monotonic())
        await asyncio.sleep(0.01)
    return ticks


def gaps(ticks: list[float]) -> float:
    return max(b - a for a, b in itertools.pairwise(ticks))


def test_the_loop_ticks_while_a_run_waits_for_a_key_a_thread_holds(
    key: str, redis_url: str
) -> None:
    held, go = threading.Event(), threading.Event()

    def thread_holder() -> None:
        with Lock(key, ttl=30):
            held.set()
            go.wait(10)

    async def main() -> tuple[Any, list[float], float]:
        stop = asyncio.Event()
        ticker = asyncio.create_task(ticking(stop))
        await asyncio.to_thread(held.wait, 10)
        run_task = asyncio.create_task(Guarded.arun(key=key, label="loop"))
        await asyncio.sleep(0.5)
        assert not run_task.done()  # it waits for the thread's hold
        released = time.monotonic()
        go.set()
        outcome = await run_task
        handed = time.monotonic() - released
        stop.set()
        return outcome, await ticker, handed

    RECORDER_URL[:] = [redis_url]
    thread = threading.Thread(target=thread_holder)
    thread.start()
    outcome, ticks, handed = run(main)
    thread.join()
    assert outcome.is_success, outcome
    assert len(ticks) > 30
    assert gaps(ticks) < 0.2  # never blocked while the run waited
    assert handed < 1  # woken by the release, not by a timer or the ttl


def test_the_loop_ticks_while_a_run_waits_for_a_key_another_process_holds(
    key: str, redis_url: str
) -> None:
    recorder = OverlapRecorder(redis_url, key)
    RECORDER_URL[:] = [redis_url]
    held, go = SPAWN.Event(), SPAWN.Event()
    child = SPAWN.Process(
        target=holder.hold_then_release, args=(redis_url, key, recorder, held, go), daemon=True
    )
    child.start()
    try:
        assert held.wait(60)

        async def main() -> tuple[Any, list[float]]:
            stop = asyncio.Event()
            ticker = asyncio.create_task(ticking(stop))
            run_task = asyncio.create_task(Guarded.arun(key=key, label="loop"))
            await asyncio.sleep(0.5)
            assert not run_task.done()  # the other process holds the key
            go.set()
            outcome = await run_task
            stop.set()
            return outcome, await ticker

        outcome, ticks = run(main)
    finally:
        go.set()
        child.join(30)
    assert outcome.is_success, outcome
    assert gaps(ticks) < 0.2
    assert recorder.max_concurrency == 1  # the process's hold and the step never overlapped
    assert recorder.entries == 2


class Holding(Reactor):
    key: str

    @step(key=Input("key"))
    @with_lock(lambda a: a["key"], ttl=60)
    async def hold(key: str) -> str:
        ENTERED[0].set()
        await asyncio.sleep(60)
        return "never"

    returns = "hold"


ENTERED: list[asyncio.Event] = []


def test_cancelling_a_run_that_holds_a_key_hands_it_to_a_waiting_process_at_once(
    key: str, redis_url: str
) -> None:
    acquired = SPAWN.Queue()
    child = SPAWN.Process(
        target=holder.wait_for_the_key, args=(redis_url, key, acquired), daemon=True
    )

    async def main() -> float:
        ENTERED[:] = [asyncio.Event()]
        task = asyncio.create_task(Holding.arun(key=key))
        await ENTERED[0].wait()
        child.start()
        deadline = time.monotonic() + 60
        while Lock(key).state().waiters < 1:  # the other process waits in the key's queue
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        cancelled = time.time()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return cancelled

    cancelled = run(main)
    got = acquired.get(timeout=30)
    child.join(30)
    assert got - cancelled < 2  # the ttl was 60 s: handed over by the cancellation's release
