"""Background execution on Celery: py_reactor against a raw Celery chain, on the same workers.

One run, one private redis-server (store and broker), the same worker processes for every
measurement: ``--workers`` (2) ``py-reactor worker`` processes with ``--concurrency`` (2)
prefork children each, which import ``benchmarks._background_reactors``: the py_reactor
reactors, and three raw Celery tasks registered on py_reactor's own Celery app and served from
its queue.

1. throughput: N executions of a 3-step reactor against N raw ``chain(t1.s(x), t2.s(),
   t3.s())`` doing the same trivial work; the last piece of work RPUSHes to a Redis list and the
   benchmark BLPOPs N items; for py_reactor the clock stops only once the store says all N are
   ``completed`` (their final checkpoint written), so it is never credited for work not done;
2. dispatch -> first step start: ``time.time()`` just before ``run()`` (or ``apply_async()``)
   against the ``time.time()`` the first step RPUSHes, one execution at a time;
3. park -> resume: this process holds ``Lock(key, owner="holder")``; a background run whose step
   needs the key parks in a worker; release -> the step's start (and -> ``completed``);
4. lock scope under contention: M executions of a 50 ms unlocked step + a 10 ms step under a
   lock on one shared key, the lock declared on the step, then on the whole reactor;
5. (information) Redis commands per execution, on the server, py_reactor against raw Celery.

Targets: py_reactor throughput >= 0.8x raw Celery's; park -> resume p50 <= 50 ms.
Run from the repository root: ``.venv/bin/python benchmarks/background.py [--quick]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import re
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import celery  # noqa: E402
import redis  # noqa: E402

from benchmarks._background_reactors import (  # noqa: E402
    QUEUE,
    Guarded,
    ReactorLocked,
    StepLocked,
    Three,
    t1,
    t2,
    t3,
)
from benchmarks._report import pct, verdict  # noqa: E402
from benchmarks._server import PrivateRedis  # noqa: E402
from benchmarks._workers import Workers, until_stored  # noqa: E402
from py_reactor import Lock, configure, find  # noqa: E402
from py_reactor.workers.celery import app  # noqa: E402

TARGET_RATIO = 0.8
TARGET_RESUME_P50_MS = 50.0
BENCH_CLIENT = "pyr-bench"  # the connection name of the benchmark's own commands
TIMEOUT = 120.0  # seconds anything may take before the benchmark gives up


# --------------------------------------------------------------------------- helpers


class Bench:
    def __init__(self, server: PrivateRedis) -> None:
        self.server = server
        self.redis = server.client(client_name=BENCH_CLIENT)

    def collect(self, name: str, count: int) -> list[str]:
        """BLPOP ``count`` items off ``bench:<name>``."""
        items = []
        for _ in range(count):
            got = self.redis.blpop([f"bench:{name}"], timeout=TIMEOUT)
            if got is None:
                raise TimeoutError(f"{len(items)} of {count} items on bench:{name}")
            items.append(got[1])
        return items

    def until_stored(self, ids: list[str], status: str = "completed") -> None:
        """Wait until every one of ``ids`` is stored ``status`` (``_workers.until_stored``)."""
        until_stored(self.redis, ids, TIMEOUT, status)

    def pyr_batch(self, n: int) -> tuple[float, float]:
        """Seconds until the N-th done signal, and until all N are stored ``completed``."""
        key = uuid.uuid4().hex
        started = time.perf_counter()
        ids = [Three.run(key=key, n=i).execution_id for i in range(n)]
        values = self.collect(f"done:{key}", n)
        signalled = time.perf_counter()
        self.until_stored(ids)
        stored = time.perf_counter()
        check(values, n)
        return signalled - started, stored - started

    def raw_batch(self, n: int) -> float:
        key = uuid.uuid4().hex
        started = time.perf_counter()
        for i in range(n):
            raw_chain(key, i).apply_async()
        values = self.collect(f"done:{key}", n)
        finished = time.perf_counter()
        check(values, n)
        return finished - started

    # 2 ---------------------------------------------------------------------

    def pyr_latency(self) -> float:
        key = uuid.uuid4().hex
        before = time.time()
        out = Three.run(key=key, n=1, stamped=True)
        began = float(self.collect(f"stamp:{key}", 1)[0])
        self.collect(f"done:{key}", 1)
        self.until_stored([out.execution_id])
        return (began - before) * 1000

    def raw_latency(self) -> float:
        key = uuid.uuid4().hex
        before = time.time()
        raw_chain(key, 1, stamped=True).apply_async()
        began = float(self.collect(f"stamp:{key}", 1)[0])
        self.collect(f"done:{key}", 1)
        return (began - before) * 1000

    # 3 ---------------------------------------------------------------------

    def park_resume(self) -> tuple[float, float, float, int]:
        """ms release -> step start, ms release -> completed, ms in ``release()``, parks."""
        key, lock = uuid.uuid4().hex, f"bench-park-{uuid.uuid4().hex[:8]}"
        held = Lock(lock, owner="holder", ttl=30).acquire()
        out = Guarded.run(key=key, lock=lock)
        deadline = time.monotonic() + TIMEOUT
        while (found := find(out.execution_id)) is None or found.status != "waiting":
            if time.monotonic() > deadline:
                raise TimeoutError("the run never parked")
            time.sleep(0.0005)
        if found.waiting_on is None or found.waiting_on["key"] != lock:
            raise RuntimeError(f"the run waits on something else: {found.waiting_on}")
        released = time.time()
        held.release()
        release_call = time.time() - released
        began = float(self.collect(f"stamp:{key}", 1)[0])
        self.until_stored([out.execution_id])
        completed = time.time()
        parks = find(out.execution_id).parks  # type: ignore[union-attr]
        return (
            (began - released) * 1000,
            (completed - released) * 1000,
            release_call * 1000,
            parks,
        )

    # 4 ---------------------------------------------------------------------

    def contended(self, cls: Any, m: int, prep_s: float, critical_s: float) -> dict[str, float]:
        key, lock = uuid.uuid4().hex, f"bench-shared-{uuid.uuid4().hex[:8]}"
        started = time.time()
        ids = [
            cls.run(key=key, n=i, lock=lock, prep_s=prep_s, critical_s=critical_s).execution_id
            for i in range(m)
        ]
        sent = time.time()
        self.collect(f"done:{key}", m)
        self.until_stored(ids)
        finished = time.time()
        parked = [find(i).parks for i in ids]  # type: ignore[union-attr]
        overlaps = int(self.redis.get(f"bench:overlaps:{lock}") or 0)
        prep = spans(self.redis.lrange(f"bench:prep:{key}", 0, -1))
        critical = spans(self.redis.lrange(f"bench:critical:{key}", 0, -1))
        # What the lock covers: the locked step, or (reactor-level) both steps.
        whole = cls is ReactorLocked
        held = sorted((prep[n][0] if whole else critical[n][0], critical[n][1]) for n in critical)
        gaps = [b[0] - a[1] for a, b in itertools.pairwise(held)]
        # The lock was idle for nothing when someone was ready for it before it fell free: its
        # prep had ended (step-level), or it had been dispatched (reactor-level).
        ready = [sent] * m if whole else sorted(prep[n][1] for n in prep)
        idle = sum(
            gap
            for i, (gap, (_, freed)) in enumerate(zip(gaps, held, strict=False))
            if sum(1 for r in ready if r <= freed) > i + 1
        )
        # How long a run's locked step waited after its prep: found the lock free, or parked.
        waited: dict[bool, list[float]] = {False: [], True: []}
        for n in critical:
            waited[parked[n] > 0].append((critical[n][0] - prep[n][1]) * 1000)
        return {
            "wall": finished - started,
            "rate": m / (finished - started),
            "parks": sum(parked) / m,
            "overlaps": overlaps,
            "busy": sum(b - a for a, b in held) / (held[-1][1] - held[0][0]),
            "gap p50": statistics.median(gaps) * 1000,
            "idle": idle,
            "free n": len(waited[False]),
            "free ms": statistics.median(waited[False]) if waited[False] else 0.0,
            "parked n": len(waited[True]),
            "parked ms": statistics.median(waited[True]) if waited[True] else 0.0,
        }


def spans(items: list[str]) -> dict[int, tuple[float, float]]:
    out = {}
    for item in items:
        n, began, ended = item.split()
        out[int(n)] = (float(began), float(ended))
    return out


def raw_chain(key: str, n: int, stamped: bool = False) -> celery.canvas.Signature:
    payload = {"key": key, "n": n, "stamped": stamped}
    return celery.chain(
        t1.s(payload).set(queue=QUEUE), t2.s().set(queue=QUEUE), t3.s().set(queue=QUEUE)
    )


def check(values: list[str], n: int) -> None:
    expected = sorted(str((i + 1) * 2 + 100) for i in range(n))
    if sorted(values) != expected:
        raise RuntimeError("the executions returned wrong values")


# --------------------------------------------------------------------------- counting


@contextmanager
def counted(server: PrivateRedis) -> Iterator[dict[str, Counter[str]]]:
    """Count what the server ran inside the block, three ways, leaving out the benchmark's own
    connections (named ``BENCH_CLIENT``: its done-signal BLPOPs and status polls) and the
    counting connections.

    ``commandstats``: from ``INFO commandstats``, every command run, including the commands
    Lua scripts run. ``requests``: the commands clients sent, from ``MONITOR`` (which tags
    script commands ``lua``). ``trips``: the same, a MULTI ... EXEC block counted once (a
    redis-py transaction pipeline sends it in one round trip).
    """
    control = server.client(single_connection_client=True)
    me = control.client_info()["addr"]
    marker = f"bench-end-{uuid.uuid4().hex}"
    monitor = server.client(single_connection_client=True)
    connection = monitor.connection
    assert connection is not None
    connection.send_command("MONITOR")
    connection.read_response()
    seen: list[tuple[str, str]] = []
    line_re = re.compile(r'^[\d.]+ \[\d+ ([^\]]*)\] "([^"]*)"')

    def read() -> None:
        while True:
            line = str(connection.read_response())
            if marker in line:
                return
            match = line_re.match(line)
            if match and match.group(1) not in ("lua", me):
                seen.append((match.group(1), match.group(2).lower()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    control.config_resetstat()
    result: dict[str, Counter[str]] = {
        "commandstats": Counter(),
        "requests": Counter(),
        "trips": Counter(),
    }
    try:
        yield result
    finally:
        stats = control.info("commandstats")
        ours = {c["addr"] for c in control.client_list() if c.get("name") == BENCH_CLIENT}
        control.echo(marker)
        reader.join(10)
        monitor.close()
        control.close()
    own: Counter[str] = Counter()
    in_block: set[str] = set()
    for addr, command in seen:
        if addr in ours:
            own[command] += 1
            continue
        result["requests"][command] += 1
        if command == "multi":
            in_block.add(addr)
        elif command == "exec":
            in_block.discard(addr)
            result["trips"]["multi/exec"] += 1
        elif addr not in in_block:
            result["trips"][command] += 1
    for name, entry in stats.items():
        command = name.removeprefix("cmdstat_")
        if command not in ("config", "info", "monitor", "client"):
            result["commandstats"][command] = int(entry["calls"]) - own[command]


def commands_per_execution(
    server: PrivateRedis, bench: Bench, n: int
) -> dict[str, tuple[float, float, str]]:
    """Per execution: (round trips, server commands, the top round trips); the idle traffic
    of the workers (dispatchers, consumers, control) measured for 2 s first and subtracted."""
    with counted(server) as idle:
        time.sleep(2.0)
    runs: dict[str, Callable[[], float]] = {
        "py_reactor": lambda: bench.pyr_batch(n)[1],
        "raw Celery": lambda: bench.raw_batch(n),
    }
    result = {}
    for name, run in runs.items():
        with counted(server) as counts:
            wall = run()
        net = {
            kind: Counter({c: v - idle[kind][c] * wall / 2.0 for c, v in counts[kind].items()})
            for kind in counts
        }
        top = " ".join(f"{c} {v / n:.1f}" for c, v in net["trips"].most_common(9) if v / n >= 0.05)
        result[name] = (sum(net["trips"].values()) / n, sum(net["commandstats"].values()) / n, top)
    return result


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (about 15 s)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--concurrency", type=int, default=2, help="pool size per worker (2)")
    parser.add_argument("--loglevel", default="WARNING", help="the workers' log level (WARNING)")
    parser.add_argument("-n", type=int, default=300, help="executions per throughput batch (300)")
    parser.add_argument("--reps", type=int, default=5, help="throughput batches per side (5)")
    parser.add_argument("--latency", type=int, default=200, help="latency samples per side (200)")
    parser.add_argument("--parks", type=int, default=60, help="park -> resume rounds (60)")
    parser.add_argument("-m", type=int, default=60, help="contended executions per batch (60)")
    parser.add_argument("--lock-reps", type=int, default=2, help="contended batches each (2)")
    parser.add_argument("--prep-ms", type=float, default=50.0, help="unlocked step (50 ms)")
    parser.add_argument("--critical-ms", type=float, default=10.0, help="locked step (10 ms)")
    parser.add_argument("--count", type=int, default=100, help="executions counted in 5 (100)")
    args = parser.parse_args()
    if args.quick:
        args.n, args.reps, args.latency, args.parks, args.m, args.lock_reps, args.count = (
            150, 2, 40, 15, 20, 1, 40
        )  # fmt: skip

    print(
        f"targets: py_reactor on Celery >= {TARGET_RATIO:g}x raw Celery chain executions/s; "
        f"park -> resume p50 <= {TARGET_RESUME_P50_MS:g} ms"
    )
    server = PrivateRedis()
    workers: Workers | None = None
    results: dict[str, bool] = {}
    finished = False
    try:
        version = server.client().info("server")["redis_version"]
        print(
            f"python {platform.python_version()}, celery {celery.__version__}, redis-py "
            f"{redis.__version__}, redis-server {version} (private, {server.url}), "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start"
        )
        configure(worker="celery", redis_url=server.url)
        app.conf.broker_url = server.url
        workers = Workers(
            server.url,
            "benchmarks._background_reactors",
            args.workers,
            args.concurrency,
            args.loglevel,
        )
        ready = workers.wait_ready()
        slots = args.workers * args.concurrency
        print(
            f"{args.workers} worker processes x --concurrency {args.concurrency} (prefork, "
            f"{slots} pool processes, loglevel {args.loglevel}) answered in {ready:.1f} s"
        )
        bench = Bench(server)
        for _ in range(2):  # warm-up: imports, scripts, connections in every pool process
            bench.pyr_batch(4 * slots)
            bench.raw_batch(4 * slots)
        print()

        # 1 -----------------------------------------------------------------
        print(f"1. throughput: {args.n} executions of 3 trivial steps per batch, {args.reps} each")
        pyr: list[float] = []
        pyr_signal: list[float] = []
        raw: list[float] = []
        for rep in range(args.reps):  # alternate which side goes first
            order = ("pyr", "raw") if rep % 2 == 0 else ("raw", "pyr")
            for side in order:
                if side == "pyr":
                    signalled, stored = bench.pyr_batch(args.n)
                    pyr.append(args.n / stored)
                    pyr_signal.append(args.n / signalled)
                else:
                    raw.append(args.n / bench.raw_batch(args.n))
        ratio = statistics.median(pyr) / statistics.median(raw)
        pairs = sorted(p / r for p, r in zip(pyr, raw, strict=True))
        print(
            f"   py_reactor : {statistics.median(pyr):7.1f} executions/s   (batches "
            f"{', '.join(f'{r:.0f}' for r in pyr)}; to the last done signal "
            f"{statistics.median(pyr_signal):.1f}/s)"
        )
        print(
            f"   raw Celery : {statistics.median(raw):7.1f} chains/s       (batches "
            f"{', '.join(f'{r:.0f}' for r in raw)})"
        )
        results["throughput"] = ratio >= TARGET_RATIO
        print(
            f"   ratio py_reactor / raw: {ratio:.2f}x (pairs of batches "
            f"{pairs[0]:.2f}x..{pairs[-1]:.2f}x); target >= {TARGET_RATIO:g}x: "
            f"{verdict(results['throughput'])}"
        )
        print()

        # 2 -----------------------------------------------------------------
        print(f"2. dispatch -> first step start, one at a time, {args.latency} samples each")
        lat: dict[str, list[float]] = {"py_reactor": [], "raw Celery": []}
        for _ in range(args.latency):
            lat["py_reactor"].append(bench.pyr_latency())
            lat["raw Celery"].append(bench.raw_latency())
        for name, samples in lat.items():
            print(
                f"   {name:11}: p50 {statistics.median(samples):6.2f} ms   p99 "
                f"{pct(samples, 0.99):6.2f} ms   max {max(samples):6.2f} ms"
            )
        print(
            f"   py_reactor - raw p50: "
            f"{statistics.median(lat['py_reactor']) - statistics.median(lat['raw Celery']):+.2f} ms"
        )
        print()

        # 3 -----------------------------------------------------------------
        print(f"3. park -> resume across processes, {args.parks} rounds")
        rounds = [bench.park_resume() for _ in range(args.parks)]
        resume = [r[0] for r in rounds]
        complete = [r[1] for r in rounds]
        release = [r[2] for r in rounds]
        parks = Counter(r[3] for r in rounds)
        print(
            f"   release -> step starts : p50 {statistics.median(resume):6.2f} ms   p99 "
            f"{pct(resume, 0.99):6.2f} ms   max {max(resume):6.2f} ms"
        )
        print(
            f"   release -> completed   : p50 {statistics.median(complete):6.2f} ms   p99 "
            f"{pct(complete, 0.99):6.2f} ms   max {max(complete):6.2f} ms"
        )
        print(
            f"   (release() itself p50 {statistics.median(release):.2f} ms; parks per run: "
            f"{dict(sorted(parks.items()))}; the backstop timer is 5-10 s, so all were woken)"
        )
        results["park -> resume"] = statistics.median(resume) <= TARGET_RESUME_P50_MS
        print(
            f"   target p50 (release -> step starts) <= {TARGET_RESUME_P50_MS:g} ms: "
            f"{verdict(results['park -> resume'])}"
        )
        print()

        # 4 -----------------------------------------------------------------
        prep_s, critical_s = args.prep_ms / 1000, args.critical_ms / 1000
        whole = prep_s + critical_s
        print(
            f"4. lock scope under contention: {args.m} executions of a {args.prep_ms:g} ms step "
            f"+ a {args.critical_ms:g} ms locked step on one key, {args.lock_reps} batches each"
        )
        scope: dict[str, list[dict[str, float]]] = {"step-level": [], "reactor-level": []}
        for rep in range(args.lock_reps):
            variants = [("step-level", StepLocked), ("reactor-level", ReactorLocked)]
            for name, cls in variants if rep % 2 == 0 else variants[::-1]:
                scope[name].append(bench.contended(cls, args.m, prep_s, critical_s))
        ideal = {
            "step-level": min(1 / critical_s, slots / whole),
            "reactor-level": 1 / whole,
        }
        rate = {}
        for name, batches in scope.items():
            rate[name] = statistics.median(b["rate"] for b in batches)
            print(
                f"   {name:13}: {rate[name]:6.1f} executions/s (ideal {ideal[name]:5.1f}: "
                f"{rate[name] / ideal[name]:.0%})   parks/execution "
                f"{statistics.median(b['parks'] for b in batches):.2f}   overlaps "
                f"{sum(int(b['overlaps']) for b in batches)}"
            )
            b = batches[0]
            print(
                f"      lock busy {b['busy']:.0%} of first hold -> last release; between two "
                f"holders p50 {b['gap p50']:.1f} ms; idle while a run was ready {b['idle']:.2f} "
                f"of {b['wall']:.2f} s"
            )
            if name == "step-level":
                print(
                    f"      prep end -> locked step start p50: {b['free ms']:.1f} ms for the "
                    f"{b['free n']:.0f} runs that found the lock free, {b['parked ms']:.0f} ms "
                    f"for the {b['parked n']:.0f} that parked"
                )
        ideal_ratio = ideal["step-level"] / ideal["reactor-level"]
        print(
            f"   step-level / reactor-level: {rate['step-level'] / rate['reactor-level']:.2f}x "
            f"(whole / locked step = {whole / critical_s:.1f}x; with {slots} pool processes "
            f"the ideal is min(that, {slots}) = {ideal_ratio:.1f}x)"
        )
        print()

        # 5 -----------------------------------------------------------------
        print(f"5. Redis per execution ({args.count} executions each; idle traffic subtracted)")
        for name, (trips, cmds, top) in commands_per_execution(server, bench, args.count).items():
            print(f"   {name:11}: {trips:5.1f} round trips  {cmds:5.1f} server cmds   {top}")
        print(
            "   (round trips: commands clients sent, a MULTI/EXEC block once; server cmds: INFO "
            "commandstats, which counts the commands Lua scripts run)"
        )
        print()
        problems = workers.errors()
        if problems:
            print(f"worker log errors ({len(problems)}): " + "; ".join(problems[:5]))
        finished = not problems
    finally:
        if workers is not None:
            workers.stop(keep_logs=not finished)
        server.stop()
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    summary = ", ".join(f"{name} {verdict(ok)}" for name, ok in results.items())
    print(f"overall: {summary}")


if __name__ == "__main__":
    main()
