"""Reactor-level coordination under real concurrency: threads, spawn processes, a killed holder.

Who is inside a protected step, and with whom, is recorded in Redis by an ``OverlapRecorder``
so that threads and processes are counted together. Every test uses its own keys on the
session's private redis-server.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from py_reactor import Lock, Step, configure
from py_reactor.coordination.ordered_lock import OrderedLock
from tests._holds import ordered_position
from tests._overlap import OverlapRecorder
from tests._wait import until
from tests.concurrency import _reactors as r
from tests.concurrency._spawn import SPAWN, gather
from tests.engine.coordination._helpers import fresh_window


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str) -> Iterator[None]:
    """Point py_reactor at the private server; forget the hooks a test registered."""
    configure(redis_url=redis_url)
    yield
    r.HOOKS.clear()


def run_processes(
    url: str,
    reactor: str,
    key: str,
    name: str,
    *,
    processes: int,
    runs: int,
    hold: float = 0.0,
    before_start: Any = None,
) -> list[tuple[str, str | None]]:
    """Run ``reactor`` ``runs`` times in each of ``processes`` spawn children, started together.

    ``before_start()`` runs in the test process once every child is ready, just before they go.
    Returns every outcome, described as ``(status, error class or halt reason)``.
    """
    start = SPAWN.Barrier(processes + 1)
    results = SPAWN.Queue()
    return gather(
        r.run_many,
        (url, reactor, key, name, runs, hold, start, results),
        processes=processes,
        start=start,
        results=results,
        before_start=before_start,
    )


def run_threads(threads: int, work: Any) -> list[Any]:
    """Run ``work(i)`` in ``threads`` threads at once; every result, in thread order."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(work, range(threads)))


# -- locks -------------------------------------------------------------------------------------


def test_threads_never_overlap_under_one_lock(
    redis_url: str, key: str, overlap: OverlapRecorder
) -> None:
    """8 threads x 50 runs on one locked key: every run succeeds and no two are ever inside."""
    threads, runs = 8, 50
    start = threading.Barrier(threads)

    def work(_: int) -> list[Any]:
        start.wait(10)
        return [
            r.describe(r.LockedOccupy.run(key=key, url=redis_url, name=overlap.name, hold=0.001))
            for _ in range(runs)
        ]

    outcomes = [o for batch in run_threads(threads, work) for o in batch]
    assert outcomes == [("completed", None)] * (threads * runs)
    assert overlap.entries == threads * runs
    assert overlap.overlaps == 0
    assert overlap.max_concurrency == 1
    assert overlap.replayed_max() == 1
    assert overlap.current == 0


def test_runs_on_different_keys_do_overlap(
    redis_url: str, key: str, overlap: OverlapRecorder
) -> None:
    """Four runs locked on four different keys are all inside at once (they meet at a barrier)."""
    threads = 4
    inside = threading.Barrier(threads)
    r.HOOKS[overlap.name] = lambda occupy: inside.wait(10)

    def work(i: int) -> Any:
        return r.describe(r.LockedOccupy.run(key=f"{key}-{i}", url=redis_url, name=overlap.name))

    assert run_threads(threads, work) == [("completed", None)] * threads
    assert overlap.max_concurrency == threads
    assert overlap.overlaps >= 1


def test_processes_never_overlap_under_one_lock(
    redis_url: str, key: str, overlap: OverlapRecorder
) -> None:
    """4 spawn processes x 15 runs on one locked key: every run succeeds, none overlap."""
    outcomes = run_processes(
        redis_url, "LockedOccupy", key, overlap.name, processes=4, runs=15, hold=0.005
    )
    assert outcomes == [("completed", None)] * 60
    assert overlap.entries == 60
    assert overlap.overlaps == 0
    assert overlap.max_concurrency == 1
    assert overlap.replayed_max() == 1


def test_a_killed_holder_frees_its_lock_on_its_own(
    redis_url: str, key: str, overlap: OverlapRecorder
) -> None:
    """After kill -9 of a process holding a ttl=1 lock, a run waiting 5 s gets it within seconds."""
    inside = SPAWN.Event()
    holder = SPAWN.Process(
        target=r.hold_forever, args=(redis_url, key, overlap.name, inside), daemon=True
    )
    holder.start()
    try:
        assert inside.wait(60), "the holder never entered its step"
        state = Lock(key).state()
        assert state.owner is not None
        assert state.ttl is not None
        assert state.ttl <= r.KILLABLE_TTL
        assert overlap.current == 1
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        holder.join(10)
    assert holder.exitcode == -signal.SIGKILL
    started = time.monotonic()
    outcome = r.ShortLockedOccupy.run(key=key, url=redis_url, name=f"{overlap.name}-after")
    elapsed = time.monotonic() - started
    assert outcome.status == "completed", outcome
    assert elapsed < 4
    assert Lock(key).state().owner is None


# -- semaphores --------------------------------------------------------------------------------


def test_a_semaphore_admits_exactly_its_limit(
    redis_url: str, key: str, overlap: OverlapRecorder
) -> None:
    """9 threads on a limit-3 semaphore: three at a time are inside, never a fourth."""
    threads, limit = 9, 3
    start = threading.Barrier(threads)
    trio = threading.Barrier(limit)  # the three holders of a round meet here, then leave

    def meet(occupy: Step) -> None:
        trio.wait(10)
        time.sleep(0.05)  # a slow step: a fourth holder, if let in, would be seen inside

    r.HOOKS[overlap.name] = meet

    def work(_: int) -> Any:
        start.wait(10)
        return r.describe(r.SemaphoreOccupy.run(key=key, url=redis_url, name=overlap.name))

    assert run_threads(threads, work) == [("completed", None)] * threads
    assert overlap.entries == threads
    assert overlap.max_concurrency == limit
    assert overlap.replayed_max() == limit


# -- rate limits -------------------------------------------------------------------------------


def test_a_rate_limit_admits_exactly_limit_runs_across_processes(
    redis_url: str, key: str, overlap: OverlapRecorder, raw: redis.Redis
) -> None:
    """4 processes x 10 runs against 7 per minute: exactly 7 run, 33 are refused."""
    outcomes = run_processes(
        redis_url,
        "RateLimitedOccupy",
        key,
        overlap.name,
        processes=4,
        runs=10,
        before_start=lambda: fresh_window(raw, margin=10),
    )
    assert len(outcomes) == 40
    assert outcomes.count(("completed", None)) == 7
    assert outcomes.count(("failed", "RateLimitExceededError")) == 33
    assert overlap.entries == 7


# -- periods -----------------------------------------------------------------------------------


def test_a_period_runs_once_when_racers_start_together(
    redis_url: str, key: str, overlap: OverlapRecorder
) -> None:
    """8 threads start a daily reactor at once: one step runs, seven runs halt on the period."""
    threads = 8
    start = threading.Barrier(threads)

    def work(_: int) -> Any:
        start.wait(10)
        return r.describe(r.DailyOccupy.run(key=key, url=redis_url, name=overlap.name, hold=0.2))

    outcomes = run_threads(threads, work)
    assert outcomes.count(("completed", None)) == 1
    assert outcomes.count(("halted", "period")) == threads - 1
    assert overlap.entries == 1


# -- ordered locks -----------------------------------------------------------------------------


def test_ordered_runs_pass_in_the_order_they_took_their_positions(
    redis_url: str, key: str, overlap: OverlapRecorder
) -> None:
    """20 runs arriving in random order each run their step in the order of their positions."""
    runs = 20
    ran: list[tuple[int, int]] = []  # (epoch, number) of each step body, in the order it ran
    ran_lock = threading.Lock()

    def note(occupy: Step) -> str:
        position = ordered_position(occupy.context)
        with ran_lock:
            ran.append((int(position["epoch"]), int(position["number"])))
        time.sleep(0.005)  # a step that takes a moment: a later position must not slip in
        return occupy.context.root_id

    r.HOOKS[overlap.name] = note
    sequence = OrderedLock(key, ttl=60, poison_pill_timeout=600, strict=True)
    gate = sequence.take_position()  # nobody passes until every run has taken its position
    delays = [random.uniform(0, 0.1) for _ in range(runs)]

    def work(i: int) -> Any:
        time.sleep(delays[i])  # arrival order is shuffled on purpose, not synchronized
        return r.OrderedOccupy.run(key=key, url=redis_url, name=overlap.name)

    with ThreadPoolExecutor(runs) as pool:
        futures = [pool.submit(work, i) for i in range(runs)]
        until(
            lambda: sequence.state().next_position >= runs + 2,
            "every run took a position",
        )
        assert ran == []
        turn = sequence.wait_turn(gate)
        assert not turn.short_circuit
        turn.release(failed=False)
        outcomes = [f.result(timeout=30) for f in futures]

    assert [o.status for o in outcomes] == ["completed"] * runs
    assert len(ran) == runs
    assert len({epoch for epoch, _ in ran}) == 1
    assert [number for _, number in ran] == list(range(2, runs + 2))
    assert ran == sorted(ran)
    assert overlap.max_concurrency == 1
    assert sequence.state().drained
