"""A fanned-out map (``map_step(..., fan_out=True)``) of 1,000 elements, against 1,000 plain
@background executions of the same child dispatched directly.

One private redis-server (the store, and Celery's broker) per backend, in turn: the thread
worker (``configure(worker="threads")``, a pool in this process), then ``--workers`` (2)
``py-reactor worker`` processes with ``--concurrency`` (2) prefork children each, which import
this module (its reactors are at module level, so a worker finds them by ``module:qualname``;
run as a script, the module imports itself under its package name for that reason).

- **fan-out**: ``Fan.run(items=[0..n-1])``: one run in this process whose map step dispatches
  the ``n`` elements (``Child``, one trivial step) as executions of their own, at most
  ``batch_size`` (50, the default) in flight, waiting for the oldest when the window is full;
  elements/s = n / the time ``run()`` took (it returns when every element has ended).
- **baseline**: ``n`` ``Plain.run(i=i)`` from a loop (``Plain`` is ``@background`` with the
  same one step as ``Child``), until the store says all ``n`` are ``completed``;
  executions/s.
- (information) **fan-out in a worker**: ``BackgroundFan``, the same map in a ``@background``
  run: it dispatches from a worker and parks on its full window (woken by an element's end).

The sides take turns (each goes first half the time) and the medians are compared: the ratio
is fan-out elements/s over baseline executions/s, measured in the same run on the same
backend. Target (information, not a test): >= 0.5x.

Run from the repository root: ``.venv/bin/python benchmarks/map_fan_out.py [--quick]``;
``measure(worker, elements)`` runs one backend and returns its figures (another benchmark may
import it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from py_reactor import (  # noqa: E402
    Element,
    Input,
    Reactor,
    SuccessResult,
    background,
    configure,
    map_step,
    step,
)

__all__ = ["BATCH", "BackgroundFan", "Child", "Fan", "Plain", "measure"]

MODULE = "benchmarks.map_fan_out"
BATCH = 50  # the map's window: map_step's default batch_size
TIMEOUT = 300.0  # seconds anything may take before the benchmark gives up
TARGET_RATIO = 0.5  # fan-out elements/s / plain background executions/s, at least


# --------------------------------------------------------------------------- reactors


class Child(Reactor):
    """One element: one trivial step."""

    i: int

    @step
    def work(i: int) -> int:
        return i * 2

    returns = "work"


@background
class Plain(Child):
    """The baseline: the same one step, the whole run in a worker."""


class Fan(Reactor):
    """A map of ``Child`` over ``items``, each element a worker job of its own."""

    items: list[int]

    fan = map_step(Child, source=Input("items"), fan_out=True, batch_size=BATCH, i=Element("fan"))
    returns = "fan"


@background
class BackgroundFan(Fan):
    """The same map, dispatched from a worker (it parks on its full window)."""


def _reactors() -> ModuleType:
    """This module under its package name: as a script it is ``__main__``, whose classes a
    Celery worker could not import, so the benchmark runs the importable copy."""
    if __name__ != "__main__":
        return sys.modules[__name__]
    return importlib.import_module(MODULE)


# --------------------------------------------------------------------------- measurements


class _Bench:
    def __init__(self, url: str) -> None:
        import redis

        self.redis = redis.Redis.from_url(url, decode_responses=True)
        self.reactors = _reactors()

    def until_stored(self, ids: list[str]) -> None:
        """Wait until every one of ``ids`` is stored completed (``_workers.until_stored``)."""
        from benchmarks._workers import until_stored

        until_stored(self.redis, ids, TIMEOUT, pause=0.001)

    def fan(self, n: int) -> float:
        """Seconds ``Fan.run()`` of ``n`` elements took (all ended when it returns)."""
        items = list(range(n))
        started = time.perf_counter()
        out = self.reactors.Fan.run(items=items)
        took = time.perf_counter() - started
        if not isinstance(out, SuccessResult) or out.value != [i * 2 for i in items]:
            raise RuntimeError(f"Fan did not return its elements' values: {out!r}")
        return took

    def background_fan(self, n: int) -> tuple[float, int]:
        """Seconds ``BackgroundFan.run()`` of ``n`` elements took until stored completed,
        and how many times its map parked on its window."""
        items = list(range(n))
        started = time.perf_counter()
        out = self.reactors.BackgroundFan.run(items=items)
        done = out.wait(timeout=TIMEOUT)
        took = time.perf_counter() - started
        if not isinstance(done, SuccessResult) or done.value != [i * 2 for i in items]:
            raise RuntimeError(f"BackgroundFan did not return its elements' values: {done!r}")
        return took, sum(1 for e in done.trace if e["type"] == "parked")

    def plain(self, n: int) -> float:
        """Seconds for ``n`` ``Plain.run()`` from a loop until all are stored completed."""
        started = time.perf_counter()
        ids = [self.reactors.Plain.run(i=i).execution_id for i in range(n)]
        self.until_stored(ids)
        return time.perf_counter() - started


def measure(
    worker: str,
    elements: int,
    *,
    rounds: int = 3,
    workers: int = 2,
    concurrency: int = 2,
    loglevel: str = "WARNING",
) -> dict[str, Any]:
    """Measure one backend (``"threads"`` or ``"celery"``) on a private redis-server of its
    own: ``rounds`` fans of ``elements`` against as many plain batches, the sides taking
    turns, then one ``BackgroundFan`` for information. It configures this process
    (``worker``, ``redis_url``, ``async_wait_timeout``) and stops its thread worker, Celery
    workers and server before returning: configure again afterwards to run anything else.

    Returns:
        ``worker``, ``elements``, ``batch_size``, ``rounds``; ``fan_per_s`` and
        ``plain_per_s`` (medians, with every round's in ``fan_rates`` / ``plain_rates``),
        ``ratio`` (fan over plain); ``background_fan_per_s`` and ``background_fan_parks``.
    """
    from benchmarks._server import PrivateRedis
    from benchmarks._workers import Workers
    from py_reactor import workers as thread_workers

    if worker not in ("threads", "celery"):
        raise ValueError(f"worker= takes 'threads' or 'celery', got {worker!r}")
    server = PrivateRedis()
    celery_workers: Workers | None = None
    try:
        configure(worker=worker, redis_url=server.url, async_wait_timeout=TIMEOUT)
        if worker == "threads":
            thread_workers.start()
        else:
            from py_reactor.workers.celery import app

            thread_workers.stop()  # its dispatcher must not pick up what Celery serves
            app.conf.broker_url = server.url
            celery_workers = Workers(server.url, MODULE, workers, concurrency, loglevel)
            celery_workers.wait_ready()
        bench = _Bench(server.url)
        warm = max(10, min(elements, 100))  # imports, scripts, connections in every worker
        bench.fan(warm)
        bench.plain(warm)
        bench.background_fan(warm)
        fans: list[float] = []
        plains: list[float] = []
        for turn in range(rounds):
            for side in ("fan", "plain") if turn % 2 == 0 else ("plain", "fan"):
                if side == "fan":
                    fans.append(elements / bench.fan(elements))
                else:
                    plains.append(elements / bench.plain(elements))
        background_took, parks = bench.background_fan(elements)
        problems = celery_workers.errors() if celery_workers is not None else []
        if problems:
            raise RuntimeError("worker log errors: " + "; ".join(problems[:5]))
    finally:
        thread_workers.stop()
        if celery_workers is not None:
            celery_workers.stop()
        server.stop()
    fan_rate, plain_rate = statistics.median(fans), statistics.median(plains)
    return {
        "worker": worker,
        "elements": elements,
        "batch_size": BATCH,
        "rounds": rounds,
        "fan_per_s": fan_rate,
        "plain_per_s": plain_rate,
        "ratio": fan_rate / plain_rate,
        "fan_rates": fans,
        "plain_rates": plains,
        "background_fan_per_s": elements / background_took,
        "background_fan_parks": parks,
    }


# --------------------------------------------------------------------------- main


def _report(figures: dict[str, Any]) -> bool:
    worker, n = figures["worker"], figures["elements"]
    ok = bool(figures["ratio"] >= TARGET_RATIO)
    print(f"[{worker}] a map of {n} elements, fan_out=True, batch_size {figures['batch_size']}")
    print(
        f"   fan-out map        : {figures['fan_per_s']:8.1f} elements/s   (rounds "
        f"{', '.join(f'{r:.0f}' for r in figures['fan_rates'])})"
    )
    print(
        f"   plain @background  : {figures['plain_per_s']:8.1f} executions/s (rounds "
        f"{', '.join(f'{r:.0f}' for r in figures['plain_rates'])})"
    )
    print(
        f"   ratio fan-out / plain: {figures['ratio']:.2f}x; target >= {TARGET_RATIO:g}x: "
        f"{'PASS' if ok else 'FAIL'}"
    )
    print(
        f"   (information) the map in a @background run: "
        f"{figures['background_fan_per_s']:.1f} elements/s, parked "
        f"{figures['background_fan_parks']} time(s) on its window"
    )
    print()
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 elements, 1 round")
    parser.add_argument("--elements", type=int, default=1000, help="elements per map (1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side (3)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (2)")
    parser.add_argument("--concurrency", type=int, default=2, help="pool size per worker (2)")
    parser.add_argument("--loglevel", default="WARNING", help="the workers' log level (WARNING)")
    parser.add_argument(
        "--backend", choices=("both", "threads", "celery"), default="both", help="(both)"
    )
    args = parser.parse_args()
    if args.quick:
        args.elements, args.rounds = 200, 1
    import celery
    import redis

    print(
        f"python {platform.python_version()}, celery {celery.__version__}, redis-py "
        f"{redis.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    results: dict[str, bool] = {}
    for worker in ("threads", "celery"):
        if args.backend in ("both", worker):
            figures = measure(
                worker,
                args.elements,
                rounds=args.rounds,
                workers=args.workers,
                concurrency=args.concurrency,
                loglevel=args.loglevel,
            )
            results[worker] = _report(figures)
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    print("overall: " + ", ".join(f"{w} {'PASS' if ok else 'FAIL'}" for w, ok in results.items()))


if __name__ == "__main__":
    main()
