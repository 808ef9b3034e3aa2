"""Async units (async_step): dispatch latency and a fan of 100, against plain @background runs.

One run, one private redis-server (the store, and Celery's broker), two backends in turn: the
thread worker (``configure(worker="threads")``, a pool in this process), then ``--workers`` (2)
``py-reactor worker`` processes with ``--concurrency`` (2) prefork children each, which import
``benchmarks._async_reactors``. Every figure has its baseline measured on the same backend in
the same run, the sides taking turns:

1. dispatch -> unit start: ``time.time()`` just before ``Reach.run()`` (whose only step is an
   ``async_step``, read by ``returns``) against the ``time.time()`` the unit's body records in
   its worker; also from the moment the run reached the unit (its ``dispatched`` trace entry).
   Baseline: the same from before ``Plain.run()`` (a ``@background`` reactor of the same one
   step) to its step's start, what background.py calls dispatch latency. One at a time.
2. a fan of 100 async units: ``Fan.run()`` dispatches 100 ``async_step`` units and its final
   step reads all 100 results (it waits for them in the caller); units/s = 100 / the time
   ``run()`` took. Baseline: 100 ``Plain.run()`` from a loop, until the store says all 100 are
   ``completed``; executions/s. For information, the same fan under ``@background``
   (``BackgroundFan``: the parent runs in a worker and its final step waits there).

Targets: unit dispatch -> start p50 <= 1.5x the plain background run's; fan units/s >= 0.8x
plain background executions/s.
Run from the repository root: ``.venv/bin/python benchmarks/async_units.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import celery  # noqa: E402
import redis  # noqa: E402

from benchmarks._async_reactors import FAN, BackgroundFan, Fan, Plain, Reach  # noqa: E402
from benchmarks._report import pct, verdict  # noqa: E402
from benchmarks._server import PrivateRedis  # noqa: E402
from benchmarks._workers import Workers, until_stored  # noqa: E402
from py_reactor import SuccessResult, configure, get_config, workers  # noqa: E402
from py_reactor.workers.celery import app  # noqa: E402

TARGET_LATENCY_RATIO = 1.5  # unit dispatch -> start p50 / plain background run's, at most
TARGET_FAN_RATIO = 0.8  # fan units/s / plain background executions/s, at least
MODULE = "benchmarks._async_reactors"
TIMEOUT = 120.0  # seconds anything may take before the benchmark gives up
FAN_TOTAL = sum(range(FAN))


# --------------------------------------------------------------------------- measurements


class Bench:
    def __init__(self, server: PrivateRedis) -> None:
        self.redis = server.client()

    def stamps(self, key: str, count: int) -> dict[int, float]:
        """``{i: time.time() the body started}`` of the ``count`` bodies that ran for ``key``,
        BLPOPped off ``bench:stamp:<key>``."""
        found: dict[int, float] = {}
        for _ in range(count):
            got = self.redis.blpop([f"bench:stamp:{key}"], timeout=TIMEOUT)
            if got is None:
                raise TimeoutError(f"{len(found)} of {count} bodies ran for {key}")
            i, began = got[1].split()
            found[int(i)] = float(began)
        if len(found) != count:
            raise RuntimeError(f"{count} bodies ran for {key}, but not one for each i")
        return found

    def until_stored(self, ids: list[str], status: str = "completed") -> None:
        """Wait until every one of ``ids`` is stored ``status`` (``_workers.until_stored``)."""
        until_stored(self.redis, ids, TIMEOUT, status)

    def unit_latency(self) -> tuple[float, float]:
        """ms from before ``Reach.run()``, and from the run reaching the unit (its
        ``dispatched`` trace entry), to the unit's body starting in its worker."""
        key = uuid.uuid4().hex
        before = time.time()
        out = Reach.run(key=key, i=7)
        if not isinstance(out, SuccessResult) or out.value != 7:
            raise RuntimeError(f"Reach did not return its unit's value: {out!r}")
        began = self.stamps(key, 1)[7]
        (reached,) = [e["started_at"] for e in out.context.trace if e["type"] == "dispatched"]
        return (began - before) * 1000, (began - reached) * 1000

    def plain_latency(self) -> float:
        """ms from before ``Plain.run()`` to its step's body starting in its worker."""
        key = uuid.uuid4().hex
        before = time.time()
        out = Plain.run(key=key, i=7)
        began = self.stamps(key, 1)[7]
        self.until_stored([out.execution_id])
        return (began - before) * 1000

    # 2 ---------------------------------------------------------------------

    def fan(self) -> dict[str, float]:
        """One ``Fan.run()``: seconds it took; and from its start, seconds to the end of the
        last dispatch, to the first and to the last unit body's start."""
        key = uuid.uuid4().hex
        wall_start, started = time.time(), time.perf_counter()
        out = Fan.run(key=key)
        took = time.perf_counter() - started
        if not isinstance(out, SuccessResult) or out.value != FAN_TOTAL:
            raise RuntimeError(f"Fan did not return the sum of its units: {out!r}")
        began = self.stamps(key, FAN)
        sent = max(e["finished_at"] for e in out.context.trace if e["type"] == "dispatched")
        return {
            "wall": took,
            "sent": sent - wall_start,
            "first": min(began.values()) - wall_start,
            "last": max(began.values()) - wall_start,
        }

    def background_fan(self) -> dict[str, float]:
        """One ``BackgroundFan.run()`` until the store says it is ``completed``; and how many
        times its final step parked waiting for units."""
        key = uuid.uuid4().hex
        wall_start, started = time.time(), time.perf_counter()
        out = BackgroundFan.run(key=key)
        self.until_stored([out.execution_id])
        took = time.perf_counter() - started
        found = BackgroundFan.find(out.execution_id)
        if found is None or found.outcome is None or found.outcome.value != FAN_TOTAL:
            raise RuntimeError("BackgroundFan did not return the sum of its units")
        began = self.stamps(key, FAN)
        parks = sum(1 for e in found.trace if e["type"] == "parked")
        return {
            "wall": took,
            "first": min(began.values()) - wall_start,
            "last": max(began.values()) - wall_start,
            "parks": float(parks),
        }

    def plain_batch(self, n: int) -> dict[str, float]:
        """``n`` ``Plain.run()`` from a loop, until all are stored ``completed``: seconds; and
        from the start, seconds to the end of the loop, to the first and last body's start."""
        key = uuid.uuid4().hex
        wall_start, started = time.time(), time.perf_counter()
        ids = [Plain.run(key=key, i=i).execution_id for i in range(n)]
        sent = time.time()
        self.until_stored(ids)
        took = time.perf_counter() - started
        began = self.stamps(key, n)
        return {
            "wall": took,
            "sent": sent - wall_start,
            "first": min(began.values()) - wall_start,
            "last": max(began.values()) - wall_start,
        }


# --------------------------------------------------------------------------- one backend


def measure(bench: Bench, backend: str, args: argparse.Namespace) -> dict[str, bool]:
    """Sections 1 and 2 on the configured backend; PASS/FAIL of each target."""
    results: dict[str, bool] = {}
    for _ in range(2):  # warm-up: imports, scripts, connections in every worker
        for _ in range(8):
            bench.unit_latency()
            bench.plain_latency()
        bench.fan()
        bench.plain_batch(FAN)
        bench.background_fan()

    print(f"1. [{backend}] dispatch -> unit start, one at a time, {args.latency} samples each")
    unit: list[float] = []
    reach: list[float] = []
    plain: list[float] = []
    for sample in range(args.latency):  # the sides take turns, each going first half the time
        order = ("unit", "plain") if sample % 2 == 0 else ("plain", "unit")
        for side in order:
            if side == "unit":
                from_run, from_reach = bench.unit_latency()
                unit.append(from_run)
                reach.append(from_reach)
            else:
                plain.append(bench.plain_latency())
    lines = [
        ("async_step: run() -> unit body", unit),
        ("async_step: reached -> unit body", reach),
        ("@background: run() -> step body", plain),
    ]
    for name, samples in lines:
        print(
            f"   {name:33}: p50 {statistics.median(samples):6.2f} ms   p95 "
            f"{pct(samples, 0.95):6.2f} ms   max {max(samples):6.2f} ms"
        )
    ratio = statistics.median(unit) / statistics.median(plain)
    results[f"{backend} latency"] = ratio <= TARGET_LATENCY_RATIO
    print(
        f"   ratio async_step / @background: p50 {ratio:.2f}x "
        f"({statistics.median(unit) - statistics.median(plain):+.2f} ms), p95 "
        f"{pct(unit, 0.95) / pct(plain, 0.95):.2f}x; target p50 <= {TARGET_LATENCY_RATIO:g}x: "
        f"{verdict(results[f'{backend} latency'])}"
    )
    print()

    print(
        f"2. [{backend}] a fan of {FAN} async units read by one final step, against {FAN} "
        f"plain @background runs; {args.fans} batches each"
    )
    fans: list[dict[str, float]] = []
    batches: list[dict[str, float]] = []
    for rep in range(args.fans):  # alternate which side goes first
        for side in ("fan", "plain") if rep % 2 == 0 else ("plain", "fan"):
            if side == "fan":
                fans.append(bench.fan())
            else:
                batches.append(bench.plain_batch(FAN))
    fan_rate = [FAN / f["wall"] for f in fans]
    plain_rate = [FAN / b["wall"] for b in batches]
    for name, rates, runs, unit_name in (
        ("async_step fan", fan_rate, fans, "units/s"),
        ("@background loop", plain_rate, batches, "executions/s"),
    ):
        median = statistics.median
        print(
            f"   {name:17}: {median(rates):7.1f} {unit_name:12} (batches "
            f"{', '.join(f'{r:.0f}' for r in rates)}); from the start, ms to: all sent "
            f"{median(r['sent'] for r in runs) * 1000:.0f}, first body "
            f"{median(r['first'] for r in runs) * 1000:.1f}, last body "
            f"{median(r['last'] for r in runs) * 1000:.0f}, done "
            f"{median(r['wall'] for r in runs) * 1000:.0f}"
        )
    ratio = statistics.median(fan_rate) / statistics.median(plain_rate)
    pairs = sorted(f / p for f, p in zip(fan_rate, plain_rate, strict=True))
    results[f"{backend} fan"] = ratio >= TARGET_FAN_RATIO
    print(
        f"   ratio fan units/s / @background executions/s: {ratio:.2f}x (pairs of batches "
        f"{pairs[0]:.2f}x..{pairs[-1]:.2f}x); target >= {TARGET_FAN_RATIO:g}x: "
        f"{verdict(results[f'{backend} fan'])}"
    )
    background = [bench.background_fan() for _ in range(args.fans)]
    rates = [FAN / b["wall"] for b in background]
    parks = ", ".join(f"{b['parks']:.0f}" for b in background)
    print(
        f"   (information) the fan under @background, its final step waiting in a worker: "
        f"{statistics.median(rates):.1f} units/s (batches {', '.join(f'{r:.0f}' for r in rates)});"
        f" ms to first body {statistics.median(b['first'] for b in background) * 1000:.1f}, "
        f"last body {statistics.median(b['last'] for b in background) * 1000:.0f}; parks of "
        f"the reader per run {parks}"
    )
    print()
    return results


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (about 10 s)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (2)")
    parser.add_argument("--concurrency", type=int, default=2, help="pool size per worker (2)")
    parser.add_argument("--loglevel", default="WARNING", help="the workers' log level (WARNING)")
    parser.add_argument("--latency", type=int, default=200, help="latency samples per side (200)")
    parser.add_argument("--fans", type=int, default=5, help="fan batches per side (5)")
    parser.add_argument(
        "--backend",
        choices=("both", "threads", "celery"),
        default="both",
        help="which backends to measure (both)",
    )
    args = parser.parse_args()
    if args.quick:
        args.latency, args.fans = 40, 2

    print(
        f"targets: async_step dispatch -> unit start p50 <= {TARGET_LATENCY_RATIO:g}x a plain "
        f"@background run's dispatch -> step start; a fan of {FAN} async units >= "
        f"{TARGET_FAN_RATIO:g}x the executions/s of {FAN} plain @background runs"
    )
    server = PrivateRedis()
    celery_workers: Workers | None = None
    results: dict[str, bool] = {}
    finished = False
    try:
        version = server.client().info("server")["redis_version"]
        print(
            f"python {platform.python_version()}, celery {celery.__version__}, redis-py "
            f"{redis.__version__}, redis-server {version} (private, {server.url}), "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start"
        )
        bench = Bench(server)
        if args.backend in ("both", "threads"):
            configure(worker="threads", redis_url=server.url)
            workers.start()
            print(f"thread worker: {get_config().worker_threads} threads in this process")
            print()
            results.update(measure(bench, "threads", args))
            workers.stop()  # its dispatcher must not pick up what the Celery workers serve
        if args.backend in ("both", "celery"):
            configure(worker="celery", redis_url=server.url)
            app.conf.broker_url = server.url
            celery_workers = Workers(
                server.url, MODULE, args.workers, args.concurrency, args.loglevel
            )
            ready = celery_workers.wait_ready()
            print(
                f"celery: {args.workers} worker processes x --concurrency {args.concurrency} "
                f"(prefork, {args.workers * args.concurrency} pool processes, loglevel "
                f"{args.loglevel}) answered in {ready:.1f} s"
            )
            print()
            results.update(measure(bench, "celery", args))
            problems = celery_workers.errors()
            if problems:
                print(f"worker log errors ({len(problems)}): " + "; ".join(problems[:5]))
            finished = not problems
        else:
            finished = True
    finally:
        workers.stop()
        if celery_workers is not None:
            celery_workers.stop(keep_logs=not finished)
        server.stop()
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    summary = ", ".join(f"{name} {verdict(ok)}" for name, ok in results.items())
    print(f"overall: {summary}")


if __name__ == "__main__":
    main()
