"""``async def`` steps and ``await Reactor.arun``: the one engine, driven from an event loop.

Every test runs a real event loop (``asyncio.run``) against the session's private Redis. What
is claimed here: async bodies (run, guard, compensate, undo, inline steps and their hooks) are
awaited on the loop; sync bodies of the same reactor run in a thread so the loop never blocks;
``@parallel`` steps run as tasks; cancelling the awaiting task aborts the run (no rollback,
holds given back); a sync ``run()`` still works outside a loop and refuses inside one.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from py_reactor import (
    Failure,
    Input,
    Lock,
    Reactor,
    Result,
    Skipped,
    Step,
    configure,
    parallel,
    retries,
    step,
    with_lock,
)
from py_reactor.errors import LockAcquisitionError
from tests._aio import run

#: What the bodies did, in order (cleared around every test).
CALLS: list[str] = []


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url)
    CALLS.clear()
    yield
    CALLS.clear()


# -- async bodies ------------------------------------------------------------------------------


class Reserve(Step):
    sku: str

    async def guard(self) -> Any:
        await asyncio.sleep(0)
        return None if self.inputs.sku != "skip" else Skipped("nothing to reserve")

    async def run(self) -> str:
        await asyncio.sleep(0.01)
        CALLS.append(f"reserve {self.inputs.sku}")
        return f"hold:{self.inputs.sku}"

    async def undo(self, result: Any) -> None:
        await asyncio.sleep(0)
        CALLS.append(f"undo {result}")


class Order(Reactor):
    sku: str
    fail: bool = False

    reserve = step(Reserve, sku=Input("sku"))

    @step(hold=Result("reserve"), fail=Input("fail"))
    async def charge(hold: str, fail: bool) -> str:
        await asyncio.sleep(0.01)
        CALLS.append("charge")
        if fail:
            raise RuntimeError("card declined")
        return f"paid {hold}"

    @charge.compensate
    async def _refund(error: Any, hold: str, fail: bool) -> None:
        await asyncio.sleep(0)
        CALLS.append(f"compensate {error}")

    returns = "charge"


def test_arun_awaits_async_bodies_and_returns_the_outcome() -> None:
    outcome = run(lambda: Order.arun(sku="a1"))
    assert outcome.is_success, outcome
    assert outcome.value == "paid hold:a1"
    assert CALLS == ["reserve a1", "charge"]


def test_a_failing_async_step_rolls_back_with_async_compensate_and_undo() -> None:
    outcome = run(lambda: Order.arun(sku="a2", fail=True))
    assert not outcome.is_success
    assert "card declined" in str(outcome.error)
    assert CALLS == [
        "reserve a2",
        "charge",
        "compensate card declined",
        "undo hold:a2",
    ]


def test_an_async_guard_skips_the_step() -> None:
    outcome = run(lambda: Order.arun(sku="skip"))
    assert "reserve skip" not in CALLS
    assert outcome.is_success  # charge ran with reserve's (absent) result


def test_run_outside_a_loop_runs_async_steps_on_a_loop_of_their_own() -> None:
    outcome = Order.run(sku="s1")
    assert outcome.is_success
    assert outcome.value == "paid hold:s1"
    assert CALLS == ["reserve s1", "charge"]


def test_run_inside_a_running_loop_refuses_and_points_at_arun() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"Order\.run\(\).*await Order\.arun"):
            Order.run(sku="x")

    run(main)
    assert CALLS == []


# -- sync and async steps in one reactor --------------------------------------------------------


class Mixed(Reactor):
    n: int

    @step(n=Input("n"))
    def blocking(n: int) -> int:
        CALLS.append(f"blocking in {threading.current_thread().name}")
        time.sleep(0.3)
        return n + 1

    @step(n=Result("blocking"))
    async def awaiting(n: int) -> int:
        await asyncio.sleep(0)
        return n * 10

    returns = "awaiting"


def test_sync_steps_run_in_a_thread_and_the_loop_keeps_ticking() -> None:
    async def main() -> tuple[Any, list[float]]:
        ticks: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        outcome = await Mixed.arun(n=1)
        stop.set()
        await task
        return outcome, ticks

    outcome, ticks = run(main)
    assert outcome.value == 20
    assert CALLS
    assert "MainThread" not in CALLS[0]
    # the blocking step slept 0.3 s in a thread: the loop ticked all along
    assert len(ticks) >= 10
    assert max(b - a for a, b in itertools.pairwise(ticks)) < 0.15


# -- holds: re-entrancy from sync and async bodies ----------------------------------------------


class Guarded(Reactor):
    key: str

    @step(key=Input("key"))
    @with_lock(lambda a: a["key"], ttl=30)
    async def inside_async(key: str) -> str:
        # the step holds `key`: the body re-enters it instead of waiting on itself
        async with Lock(key, wait=0) as hold:
            return f"async count={hold.count}"

    @step(key=Input("key"), before=Result("inside_async"))
    @with_lock(lambda a: a["key"], ttl=30)
    def inside_sync(key: str, before: str) -> str:
        with Lock(key, wait=0) as hold:  # in the loop's thread pool, as the execution
            return f"{before}; sync count={hold.count}"

    returns = "inside_sync"


def test_bodies_re_enter_what_their_step_holds_from_the_loop_and_from_the_thread(
    key: str,
) -> None:
    outcome = run(lambda: Guarded.arun(key=key))
    assert outcome.is_success, outcome
    assert outcome.value == "async count=2; sync count=2"


# -- @parallel on tasks ---------------------------------------------------------------------


@parallel(max_branches=4)
class Fan(Reactor):
    @step()
    async def one() -> float:
        await asyncio.sleep(0.3)
        return time.monotonic()

    @step()
    async def two() -> float:
        await asyncio.sleep(0.3)
        return time.monotonic()

    @step()
    async def three() -> float:
        await asyncio.sleep(0.3)
        return time.monotonic()

    @step(a=Result("one"), b=Result("two"), c=Result("three"))
    def joined(a: float, b: float, c: float) -> float:
        return max(a, b, c) - min(a, b, c)

    returns = "joined"


def test_parallel_steps_run_as_tasks_at_once() -> None:
    async def main() -> tuple[Any, float]:
        start = time.monotonic()
        outcome = await Fan.arun()
        return outcome, time.monotonic() - start

    outcome, elapsed = run(main)
    assert outcome.is_success, outcome
    assert elapsed < 0.75  # three 0.3 s steps, side by side (0.9 s one after the other)
    assert outcome.value < 0.2


# -- retries: the backoff is awaited -------------------------------------------------------------


ATTEMPTS: list[int] = []


class Flaky(Reactor):
    @step()
    @retries(3, backoff="fixed", base_delay=0.05)
    async def call() -> str:
        ATTEMPTS.append(1)
        if len(ATTEMPTS) < 3:
            return Failure("try again")  # type: ignore[return-value]
        return "ok"

    returns = "call"


def test_an_async_step_is_retried_with_its_backoff_awaited() -> None:
    ATTEMPTS.clear()
    outcome = run(Flaky.arun)
    assert outcome.is_success, outcome
    assert len(ATTEMPTS) == 3


# -- cancellation ------------------------------------------------------------------------------


class Slow(Reactor):
    key: str

    @step()
    async def first() -> str:
        CALLS.append("first")
        return "done"

    @first.undo
    async def _undo_first(result: str) -> None:
        CALLS.append("undo first")

    @step(key=Input("key"), after=Result("first"))
    @with_lock(lambda a: a["key"], ttl=60)
    async def held(key: str, after: str) -> str:
        CALLS.append("held")
        await asyncio.sleep(60)
        return "never"

    @held.compensate
    async def _compensate_held(error: Any, key: str, after: str) -> None:
        CALLS.append("compensate held")

    returns = "held"


def test_cancelling_the_awaiting_task_aborts_frees_the_key_and_rolls_nothing_back(
    key: str,
) -> None:
    async def main() -> float:
        task = asyncio.create_task(Slow.arun(key=key))
        while "held" not in CALLS:
            await asyncio.sleep(0.01)
        start = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        freed = time.monotonic() - start
        hold = await Lock(key, wait=0).aacquire()  # at once: no ttl to wait out
        await hold.arelease()
        return freed

    freed = run(main)
    assert freed < 1
    assert CALLS == ["first", "held"]  # no compensate, no undo: an abort


def test_a_sync_lock_acquire_inside_a_coroutine_refuses_instead_of_blocking_the_loop(
    key: str,
) -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"block the running event loop.*async with"):
            Lock(key).acquire()
        with pytest.raises(RuntimeError, match=r"async with"), Lock(key):
            pass

    run(main)


def test_a_busy_key_in_arun_waits_its_declared_wait_then_fails_the_step(key: str) -> None:
    class Busy(Reactor):
        @step()
        @with_lock(key, wait=0.2)
        async def locked() -> str:
            return "in"

        returns = "locked"

    async def main() -> Any:
        hold = await Lock(key, ttl=30).aacquire()
        try:
            return await Busy.arun()
        finally:
            await hold.arelease()

    outcome = run(main)
    assert not outcome.is_success
    assert isinstance(outcome.error, LockAcquisitionError)


def test_await_outcome_of_an_ended_run_is_that_outcome() -> None:
    async def main() -> tuple[Any, Any]:
        outcome = await Order.arun(sku="w1")
        return outcome, await outcome.await_outcome(timeout=1)

    outcome, final = run(main)
    assert final is outcome


# -- sibling tasks taking turns on the reactor's own key ---------------------------------------

TURNS: list[str] = []


def _reactor_key(args: dict[str, Any]) -> str:
    return f"{args['key']}:reactor"


@with_lock(lambda a: f"{a['key']}:reactor", wait=10)
async def _critical(key: str, who: str) -> None:
    TURNS.append(f"in {who}")
    await asyncio.sleep(0.05)
    TURNS.append(f"out {who}")


@parallel(max_branches=2)
@with_lock(_reactor_key, ttl=30, wait=10)
class Turns(Reactor):
    key: str

    @step(key=Input("key"))
    async def a(key: str) -> str:
        await _critical(key, "a")  # re-enters the reactor's hold: one sibling at a time
        return "a"

    @step(key=Input("key"))
    async def b(key: str) -> str:
        await _critical(key, "b")
        return "b"


def test_sibling_tasks_re_entering_the_reactors_hold_take_turns(key: str) -> None:
    TURNS.clear()
    outcome = run(lambda: Turns.arun(key=key))
    assert outcome.is_success, outcome
    assert sorted(TURNS[0::2]) == ["in a", "in b"]
    for first, second in zip(TURNS[0::2], TURNS[1::2], strict=True):
        assert first.split()[1] == second.split()[1]  # each in is followed by its own out
