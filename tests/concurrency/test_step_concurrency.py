"""Step-level coordination under real concurrency: spawn processes, and threads inside them.

A coordination decorator on one step serializes, bounds, rate-limits or dedups that step's
work across every process using the store, and nothing else of the reactor. Each step body
records its stay in a Redis-backed ``OverlapRecorder`` (``<name>-<step>``), so runs in
different processes and threads are counted together. Runs meet at cross-process barriers
inside uncoordinated steps, so the overlaps the tests count on are certain, not a matter of
timing. Every test uses its own keys on the session's private redis-server.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
import redis

from py_reactor import Lock, Period, Semaphore, configure
from tests._overlap import OverlapRecorder
from tests.concurrency import _step_reactors as sr
from tests.concurrency._spawn import SPAWN, gather
from tests.engine.coordination._helpers import fresh_window, lock_is_free

OK = sr.Seen("completed", None, None, ())


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str) -> None:
    """Point py_reactor at the private server (settings are restored after the test)."""
    configure(redis_url=redis_url)


@pytest.fixture
def name() -> str:
    """The prefix of this test's recorders (``<name>-<step>``)."""
    return f"rec-{uuid.uuid4().hex[:12]}"


def inside(url: str, name: str, step: str) -> OverlapRecorder:
    """The recorder of ``step``'s bodies in this test."""
    return OverlapRecorder(url, f"{name}-{step}")


def run_processes(
    url: str,
    reactor: str,
    key: str,
    name: str,
    *,
    processes: int,
    runs: int,
    threads: int = 1,
    barriers: Mapping[str, int] | None = None,
    before_start: Any = None,
) -> list[sr.Seen]:
    """Run ``reactor`` ``runs`` times in each of ``threads`` threads of ``processes`` children.

    Every runner starts at once. ``barriers`` maps a barrier name to its number of parties; the
    children share those cross-process barriers, which the step bodies meet at.
    ``before_start()`` runs in the test process once every child is ready, just before they go.
    Returns every outcome.
    """
    start = SPAWN.Barrier(processes * threads + 1)
    shared = {label: SPAWN.Barrier(parties) for label, parties in (barriers or {}).items()}
    results = SPAWN.Queue()
    return gather(
        sr.run_many,
        (url, reactor, key, name, runs, start, results, shared, threads),
        processes=processes,
        start=start,
        results=results,
        before_start=before_start,
    )


# -- locks -------------------------------------------------------------------------------------


def test_a_step_lock_serializes_its_step_across_processes_and_only_it(
    redis_url: str, key: str, name: str
) -> None:
    """4 processes x 5 runs: the locked step never overlaps; the free step before it does.

    Every round, the four runs meet at a barrier inside the free step (so all four are in it at
    once), then all go for the locked step at the same moment: they pass it one at a time.
    """
    processes, runs = 4, 5
    outcomes = run_processes(
        redis_url,
        "MeetThenLock",
        key,
        name,
        processes=processes,
        runs=runs,
        barriers={"meet": processes},
    )
    total = processes * runs
    assert outcomes == [OK] * total
    locked = inside(redis_url, name, "exclusive")
    assert locked.entries == total
    assert locked.max_concurrency == 1
    assert locked.replayed_max() == 1
    assert locked.overlaps == 0
    free = inside(redis_url, name, "meet")
    assert free.entries == total
    assert free.max_concurrency == processes
    assert lock_is_free(key)


def test_threads_of_several_processes_share_one_step_lock(
    redis_url: str, key: str, name: str
) -> None:
    """2 processes x 3 threads x 4 runs on one step lock: all six meet, the locked step is alone."""
    processes, threads, runs = 2, 3, 4
    outcomes = run_processes(
        redis_url,
        "MeetThenLock",
        key,
        name,
        processes=processes,
        threads=threads,
        runs=runs,
        barriers={"meet": processes * threads},
    )
    total = processes * threads * runs
    assert outcomes == [OK] * total
    locked = inside(redis_url, name, "exclusive")
    assert locked.entries == total
    assert locked.max_concurrency == 1
    assert locked.replayed_max() == 1
    free = inside(redis_url, name, "meet")
    assert free.max_concurrency == processes * threads
    assert lock_is_free(key)


# -- semaphores --------------------------------------------------------------------------------


def test_a_step_semaphore_admits_exactly_its_limit_across_processes(
    redis_url: str, key: str, name: str
) -> None:
    """4 processes x 4 rounds on a 2-slot step semaphore: two are inside at once, never three.

    Each round the four runs meet before the step; inside it, holders meet two by two at a
    barrier, so two holders are certainly inside together (and a third let in would be seen).
    """
    processes, runs = 4, 4
    outcomes = run_processes(
        redis_url,
        "MeetThenPair",
        key,
        name,
        processes=processes,
        runs=runs,
        barriers={"meet": processes, "pair": sr.SEMAPHORE_LIMIT},
    )
    total = processes * runs
    assert outcomes == [OK] * total
    limited = inside(redis_url, name, "pair")
    assert limited.entries == total
    assert limited.max_concurrency == sr.SEMAPHORE_LIMIT
    assert limited.replayed_max() == sr.SEMAPHORE_LIMIT
    assert Semaphore(key, limit=sr.SEMAPHORE_LIMIT).state().held == 0


# -- rate limits -------------------------------------------------------------------------------


def test_a_step_rate_limit_admits_exactly_limit_bodies_across_processes(
    redis_url: str, key: str, name: str, raw: redis.Redis
) -> None:
    """4 processes x 4 runs against 5 a minute: 5 send steps run, 11 runs fail at "send"."""
    processes, runs = 4, 4
    outcomes = run_processes(
        redis_url,
        "PrepareThenSend",
        key,
        name,
        processes=processes,
        runs=runs,
        before_start=lambda: fresh_window(raw, margin=5),
    )
    total = processes * runs
    refused = sr.Seen("failed", "RateLimitExceededError", "send", ())
    assert len(outcomes) == total
    assert outcomes.count(OK) == sr.RATE_LIMIT
    assert outcomes.count(refused) == total - sr.RATE_LIMIT
    assert inside(redis_url, name, "send").entries == sr.RATE_LIMIT
    assert inside(redis_url, name, "prepare").entries == total


# -- periods -----------------------------------------------------------------------------------


def test_a_step_period_runs_once_when_processes_race_for_it(
    redis_url: str, key: str, name: str, raw: redis.Redis
) -> None:
    """4 processes x 3 runs race a daily, locked step: one body runs, 11 runs skip it.

    The runs of a round meet just before the step, so the first round reaches it all at once.
    Every skipping run still completes and runs the step after it; the lock is free at the end.
    """
    processes, runs = 4, 3
    outcomes = run_processes(
        redis_url,
        "MeetThenDaily",
        key,
        name,
        processes=processes,
        runs=runs,
        barriers={"meet": processes},
        before_start=lambda: fresh_window(raw, seconds=86400, margin=30),
    )
    total = processes * runs
    skipped = sr.Seen("completed", None, None, ("daily:period",))
    assert outcomes.count(OK) == 1
    assert outcomes.count(skipped) == total - 1
    daily = inside(redis_url, name, "daily")
    assert daily.entries == 1
    assert inside(redis_url, name, "after").entries == total
    assert inside(redis_url, name, "meet").max_concurrency == processes
    assert Period(key, every="day").is_done()
    assert lock_is_free(key)
    assert Lock(key).state().owner is None
