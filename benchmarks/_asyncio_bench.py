"""asyncio vs threads: throughput, memory per run in flight, and lock hand-off latency.

The reactor has three steps: the first and last wait 10 ms on I/O (``asyncio.sleep`` on the
loop, ``time.sleep`` on a thread), the middle one holds a step lock on one of 10 keys. Measured in
one run, against one private redis-server:

1. **throughput**: ``--runs`` runs, at most ``--in-flight`` (1,000) at once on one event loop with
   ``await Reactor.arun``, against the same runs on 32 threads with ``Reactor.run``;
2. **memory per run in flight**: each path runs in a fresh process of its own, whose resident
   set (RSS, from ``/proc/self/statm``) is sampled every 5 ms from before its first run to the
   end of its throughput run: ``(peak - cold) / runs in flight`` (1,000 tasks, 32 threads) is
   everything the path added to keep its runs in flight: the threads' stacks and the malloc
   arenas they grow, the loop's tasks and bridges, each path's Redis connections. The target is
   judged on it. Beside it: only what holding that many runs at once in their first step (1 s)
   adds after a warm-up (a thread created for it, a task);
3. **lock hand-off**: a holder releases, a waiter blocked on the same key holds it: p50 of
   ``await hold.arelease()`` -> ``await lock.aacquire()`` returning, against the same with two
   threads and ``release()``/``acquire()``.

Targets (issue 22): throughput >= 1.0x the thread path's; memory per run in flight <= 1/4 of a
thread's; async hand-off p50 <= 1.5x the sync one.

Run from the repository root: ``python benchmarks/asyncio.py`` (``--quick`` for a short run);
that launcher runs this module.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _report import pct, verdict
from _server import PrivateRedis

import py_reactor
from py_reactor import Input, Lock, Reactor, Result, step, with_lock
from py_reactor.aio import close_loop_resources

#: The script to start each path's process with (the launcher, benchmarks/asyncio.py).
SCRIPT = Path(__file__).resolve().parent / "asyncio.py"

IO = 0.010
#: The first step's wait: IO, or HOLD while the memory of runs held in flight is sampled.
FIRST_IO = [IO]
HOLD = 1.0
KEYS = 10
THREADS = 32
TARGET_THROUGHPUT = 1.0
TARGET_MEMORY = 0.25
TARGET_HANDOFF = 1.5


def _key(args: dict[str, Any]) -> str:
    return f"bench:{args['account']}"


class AsyncPay(Reactor):
    account: int

    @step(account=Input("account"))
    async def fetch(account: int) -> int:
        await asyncio.sleep(FIRST_IO[0])
        return account

    @step(account=Result("fetch"))
    @with_lock(_key, ttl=30, wait=60)
    async def charge(account: int) -> int:
        return account

    @step(account=Result("charge"))
    async def notify(account: int) -> int:
        await asyncio.sleep(IO)
        return account

    returns = "notify"


class SyncPay(Reactor):
    account: int

    @step(account=Input("account"))
    def fetch(account: int) -> int:
        time.sleep(FIRST_IO[0])
        return account

    @step(account=Result("fetch"))
    @with_lock(_key, ttl=30, wait=60)
    def charge(account: int) -> int:
        return account

    @step(account=Result("charge"))
    def notify(account: int) -> int:
        time.sleep(IO)
        return account

    returns = "notify"


def _rss() -> int:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Sampler:
    """The peak RSS, sampled every 5 ms on a thread of its own."""

    def __init__(self) -> None:
        self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


# -- one path, in a process of its own ------------------------------------------------------


def _path_async(runs: int, in_flight: int) -> dict[str, float]:
    async def main() -> dict[str, float]:
        slots = asyncio.Semaphore(in_flight)
        failed = 0

        async def one(index: int) -> None:
            nonlocal failed
            async with slots:
                outcome = await AsyncPay.arun(account=index % KEYS)
                failed += not outcome.is_success

        cold = _rss()
        whole = _Sampler()
        # warm up as the threads do: a full load opens the connections it waits on
        await asyncio.gather(*(one(i) for i in range(in_flight)))
        # every run held in its first step at once, sampled
        FIRST_IO[0] = HOLD
        before = _rss()
        held = _Sampler()
        await asyncio.gather(*(one(i) for i in range(in_flight)))
        peak = held.stop()
        FIRST_IO[0] = IO
        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(runs)))
        elapsed = time.perf_counter() - start
        top = whole.stop()
        await close_loop_resources()
        return {
            "elapsed": elapsed, "cold": cold, "top": top, "before": before, "peak": peak,
            "failed": failed,
        }  # fmt: skip

    return asyncio.run(main())


def _path_threads(runs: int) -> dict[str, float]:
    cold = _rss()
    whole = _Sampler()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda i: SyncPay.run(account=i % KEYS), range(THREADS * 4)))  # warm
    # a run held in its first step on each of 32 (new) threads at once, sampled
    FIRST_IO[0] = HOLD
    before = _rss()
    held = _Sampler()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda i: SyncPay.run(account=i % KEYS), range(THREADS)))
    peak = held.stop()
    FIRST_IO[0] = IO
    start = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = list(pool.map(lambda i: SyncPay.run(account=i % KEYS), range(runs)))
    elapsed = time.perf_counter() - start
    top = whole.stop()
    failed = sum(not outcome.is_success for outcome in outcomes)
    return {
        "elapsed": elapsed, "cold": cold, "top": top, "before": before, "peak": peak,
        "failed": failed,
    }  # fmt: skip


def _child(path: str, url: str, runs: int, in_flight: int) -> dict[str, float]:
    """Run one path in a fresh interpreter (so neither inherits the other's heap)."""
    command = [sys.executable, str(SCRIPT), "--child", path, "--url", url, "--runs", str(runs)]
    command += ["--in-flight", str(in_flight)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


# -- hand-off -------------------------------------------------------------------------------


def _handoff_sync(samples: int) -> list[float]:
    lock = Lock("bench:handoff-sync", ttl=30, wait=30)
    go, queued = threading.Event(), threading.Event()
    got: list[float] = []
    done = threading.Event()

    def waiter() -> None:
        for _ in range(samples):
            go.wait()
            go.clear()
            queued.set()
            hold = lock.acquire()
            got.append(time.perf_counter())
            hold.release()
            done.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    latencies = []
    for _ in range(samples):
        hold = lock.acquire()
        done.clear()
        queued.clear()
        go.set()
        queued.wait()
        _wait_queued(lock.state)
        start = time.perf_counter()
        hold.release()
        done.wait(30)
        latencies.append(got[-1] - start)
    thread.join()
    return latencies


def _wait_queued(state: Any) -> None:
    """Until the waiter is queued on the key (so the release hands it over)."""
    deadline = time.monotonic() + 5
    while state().waiters != 1 and time.monotonic() < deadline:
        time.sleep(0.0005)
    time.sleep(0.002)


async def _timed_acquire(lock: Lock) -> float:
    """Acquire ``lock`` (waiting for the hand-off), note when, release it."""
    hold = await lock.aacquire()
    got = time.perf_counter()
    await hold.arelease()
    return got


async def _handoff_async(samples: int) -> list[float]:
    lock = Lock("bench:handoff-async", ttl=30, wait=30)
    latencies = []
    for _ in range(samples):
        hold = await lock.aacquire()
        task = asyncio.create_task(_timed_acquire(lock))
        await asyncio.sleep(0)
        await asyncio.to_thread(_wait_queued, lock.state)
        start = time.perf_counter()
        await hold.arelease()
        got = await task
        latencies.append(got - start)
    await close_loop_resources()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="2,000 runs, 100 hand-offs")
    parser.add_argument("--child", choices=("async", "threads"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        py_reactor.configure(redis_url=args.url)
        if args.child == "async":
            result = _path_async(args.runs, args.in_flight)
        else:
            result = _path_threads(args.runs)
        print(json.dumps(result))
        return 0
    if args.quick:
        args.runs, args.samples = 2000, 100
    server = PrivateRedis()
    try:
        py_reactor.configure(redis_url=server.url)
        print(
            f"asyncio vs threads: {args.runs} runs of a 3-step reactor (10 ms I/O, a step lock on "
            f"one of {KEYS} keys, 10 ms I/O)"
        )
        threads = _child("threads", server.url, args.runs, args.in_flight)
        loop = _child("async", server.url, args.runs, args.in_flight)
        sync_latencies = _handoff_sync(args.samples)
        async_latencies = asyncio.run(_handoff_async(args.samples))
    finally:
        server.stop()
    ok = True
    t_rate = args.runs / threads["elapsed"]
    a_rate = args.runs / loop["elapsed"]
    print(f"1. throughput: threads ({THREADS}) {t_rate:8.1f} runs/s   failed {threads['failed']:g}")
    print(f"               asyncio ({args.in_flight} in flight) {a_rate:8.1f} runs/s   "
          f"failed {loop['failed']:g}")  # fmt: skip
    ratio = a_rate / t_rate
    ok &= ratio >= TARGET_THROUGHPUT
    print(f"   target: asyncio >= {TARGET_THROUGHPUT}x threads: {ratio:.2f}x -> "
          f"{verdict(ratio >= TARGET_THROUGHPUT)}")  # fmt: skip
    t_mem = (threads["top"] - threads["cold"]) / THREADS
    a_mem = (loop["top"] - loop["cold"]) / args.in_flight
    print(f"2. memory per run in flight (RSS; all the path added from a cold start to its peak): "
          f"thread {t_mem / 1024:.1f} KB   asyncio {a_mem / 1024:.1f} KB")  # fmt: skip
    t_held = (threads["peak"] - threads["before"]) / THREADS
    a_held = (loop["peak"] - loop["before"]) / args.in_flight
    print(f"   only the runs held in their first step, after the warm-up: thread "
          f"{t_held / 1024:.1f} KB   asyncio {a_held / 1024:.1f} KB "
          f"({a_held / t_held:.3f}x)")  # fmt: skip
    share = a_mem / t_mem if t_mem > 0 else float("inf")
    ok &= share <= TARGET_MEMORY
    print(f"   target: asyncio <= {TARGET_MEMORY}x a thread's: {share:.3f}x -> "
          f"{verdict(share <= TARGET_MEMORY)}")  # fmt: skip
    s50, a50 = statistics.median(sync_latencies), statistics.median(async_latencies)
    s99, a99 = pct(sync_latencies, 0.99), pct(async_latencies, 0.99)
    print(f"3. lock hand-off p50 / p99: sync {s50 * 1e3:.3f} / {s99 * 1e3:.3f} ms   "
          f"asyncio {a50 * 1e3:.3f} / {a99 * 1e3:.3f} ms")  # fmt: skip
    ok &= a50 / s50 <= TARGET_HANDOFF
    print(f"   target: asyncio p50 <= {TARGET_HANDOFF}x sync: {a50 / s50:.2f}x -> "
          f"{verdict(a50 / s50 <= TARGET_HANDOFF)}")  # fmt: skip
    return 0 if ok else 1
